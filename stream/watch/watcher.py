"""`SnapshotWatcher`: a table's new snapshots, reported as they are committed.

A table changes by one atomic step: a new `metadata/*.metadata.json` becomes current
(Hadoop tables: `<uuid>.metadata.json` is written, renamed to `v<N>.metadata.json`, then
`version-hint.text` is rewritten through a temporary file; other catalogs write
`<NNNNN>-<uuid>.metadata.json`). The watcher finds the current file exactly as
`load_table` does (`find_metadata_location`), so what it reports is what a reader loading
the table next sees. It looks again when something may have changed:

- **events** (local tables): watchdog tells of files created, renamed, closed after
  writing or deleted in `metadata/`; only `version-hint.text` and committed metadata names
  wake it. A slow safety look (`interval`, default 30 s) covers a missed event.
- **polling** (`poll=True`, and any non-local URI such as `s3://`): through `pyarrow.fs`,
  backing off from 50 ms to `interval` (default 2 s) while nothing changes.
- **catalog** (a table named `catalog.namespace.table`): one `loadTable` every `interval`
  (default 1 s), whose answer is the current metadata file and fresh FileIO properties
  (vended credentials are renewed by the same request).

Each is a strategy object (`watch_modes`), chosen once (events turn to polling for good
when `metadata/` cannot be watched).

A metadata file that does not parse yet (half written by a writer that does not rename) is
never reported nor an error: the watcher looks again shortly. Each new metadata file is
compared with the last snapshot reported (`snapshot_events.commits_after`): every commit
since then is reported once, oldest first, however many landed between two looks; expired
ones are skipped with a warning, a rollback is reported as described there.

Example::

    with SnapshotWatcher("/warehouse/db/orders") as watcher:    # from the current snapshot
        while True:
            for event in watcher.wait(timeout=10):
                print(event.snapshot_id, event.operation, event.added_records)

`SnapshotWatcher(T, after=42)` resumes after snapshot 42 (e.g. the last one a restarted
consumer handled). Consumers that only need to know *whether* something changed use
`token` / `changed_since(token)` / `wait_changed(token, timeout)`, which never touch the
file system; `latest` is the newest metadata the watcher read. Memory stays bounded:
events wait for `wait()` in a queue of `queue_size` (the oldest are dropped, with a
warning, if nobody collects them), and only the newest metadata is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from meltwater.planner.errors import (
    CorruptMetadataError,
    MeltwaterError,
    NoSuchTableError,
    UnsupportedFeatureError,
)
from meltwater.planner.table.fileio import FileIO, PyArrowFileIO
from meltwater.planner.table.metadata import TableMetadata
from meltwater.planner.table.table_loading import locate_table, metadata_file_version, read_metadata
from meltwater.planner.table.table_source import TableSource, parse_table_source
from meltwater.stream.errors import WatcherError
from meltwater.stream.watch.snapshot_events import (
    Cursor,
    EventQueue,
    SnapshotEvent,
    commits_after,
)
from meltwater.stream.watch.watch_modes import FIRST_DELAY, watch_mode

log = logging.getLogger(__name__)

RETRY_LIMIT = 1.0  # the longest wait before reading an unreadable metadata file again
START_PATIENCE = 2.0  # start(): how long a half-written current metadata file is waited for
UNREADABLE_WARNING = 5.0  # warn when the newest metadata file stays unreadable this long
MAX_INTERVAL = 86_400.0  # an interval of a day or more is a typo (or `inf`), not a plan

Subscriber = Callable[[list[SnapshotEvent]], None]


@dataclass(frozen=True)
class WatchState:
    """The newest metadata file the watcher read and the table's current snapshot there.

    `generation` counts the metadata files read since the watcher started (1 after start).
    """

    metadata_location: str
    snapshot_id: int | None
    sequence_number: int | None
    timestamp_ms: int | None
    generation: int
    metadata: TableMetadata = field(repr=False, compare=False)


class SnapshotWatcher:
    """Reports a table's new snapshots (see the module doc). Thread-safe.

    Args:
        table: the table, by location (a directory, any `pyarrow.fs` URI, or a
            `*.metadata.json` file, which never changes: nothing is ever reported) or by
            catalog identifier (a `TableSource`, or text `load_table` reads the same way).
        after: report the commits after this snapshot id; default: after the current one.
        poll: True to poll, False for file events; default: events for local tables.
        interval: seconds; polling: the longest wait between looks (default 2);
            events: the safety look (default 30).
        io: the FileIO to read with.
        queue_size: how many events `wait()` may have waiting; 0 keeps none (for consumers
            of `subscribe`, `latest` or `token` only).
    """

    def __init__(self, table: str | TableSource, *, after: int | None = None,
                 poll: bool | None = None, interval: float | None = None,
                 io: FileIO | None = None, queue_size: int = 10_000) -> None:
        if interval is not None and not 0 < interval < MAX_INTERVAL:
            raise WatcherError(f"watcher interval {interval}: expected a positive number "
                               f"of seconds below {MAX_INTERVAL:g}")
        self.source = table if isinstance(table, TableSource) else parse_table_source(table)
        self.location = str(self.source)  # what messages call the table
        self.io = io or PyArrowFileIO(self.source.io_properties)
        self.after = after
        self.queue_size = queue_size
        self._cond = threading.Condition(threading.Lock())
        self._state: WatchState | None = None
        self._token = 0
        self._pending = EventQueue(queue_size, self.location)
        self._subscribers: list[Subscriber] = []
        self._started = False
        self._stopped = False
        self._wake = threading.Event()
        self._mode = watch_mode(self.source, poll, interval, changed=self._bump,
                                wake=self._wake.set)
        self._thread: threading.Thread | None = None
        # below: used by the watcher's own thread only (and by start() before it runs)
        self._cursor = Cursor(None)
        self._resolved: str | None = None
        self._missing = False
        self._unreadable: tuple[str, float] | None = None  # location, since
        self._retry = FIRST_DELAY
        self._backwards: str | None = None

    @property
    def mode(self) -> str:
        """How the watcher notices new snapshots: "events", "polling", "catalog" or
        "fixed" (`watch_modes`), for messages."""
        return self._mode.name

    @property
    def interval(self) -> float:
        """Seconds: the longest wait between two looks (events: the safety look)."""
        return self._mode.interval

    def __repr__(self) -> str:
        return f"SnapshotWatcher({self.location!r}, mode={self.mode})"

    def __reduce__(self) -> Any:
        raise TypeError("a SnapshotWatcher is live driver-side state (threads, file watches) "
                        "and is never pickled")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SnapshotWatcher:
        """Read the table once and start watching; raises NoSuchTableError if there is none."""
        with self._cond:
            if self._stopped:
                raise WatcherError(f"{self!r} was stopped; create a new watcher")
            if self._started:
                return self
            self._started = True
        try:
            self._arm()
            self._first_look()
        except BaseException:
            self.stop()
            raise
        if self._mode.runs:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"meltwater-watch {self.location}")
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching and wake every `wait`; idempotent."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._mode.cancel()

    def __enter__(self) -> SnapshotWatcher:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the watcher has started and not stopped."""
        with self._cond:
            return self._started and not self._stopped

    # -- what consumers ask ------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> list[SnapshotEvent]:
        """The snapshots committed since the last `wait`, oldest first, blocking until
        there is one or `timeout` seconds passed ([] then, or once stopped)."""
        if self.queue_size == 0:
            raise WatcherError(f"{self!r} keeps no events (queue_size=0); use subscribe()")
        with self._cond:
            self._require_started()
            self._cond.wait_for(lambda: self._pending or self._stopped, timeout)
            return self._pending.take()

    @property
    def latest(self) -> WatchState | None:
        """The newest metadata the watcher read (None before `start()`); no file access."""
        with self._cond:
            return self._state

    @property
    def token(self) -> int:
        """A number that changes whenever the table may have changed (a file event, a new
        metadata file found by a look); compare with `changed_since`."""
        with self._cond:
            return self._token

    def changed_since(self, token: int) -> bool:
        """Whether the table may have changed since `token` was taken: True unless the
        watcher knows it did not (it also says True while it cannot watch, e.g. stopped,
        or with `metadata/` deleted). Never touches the file system."""
        with self._cond:
            return token != self._token or not self._vouches()

    def wait_changed(self, token: int, timeout: float | None = None) -> bool:
        """Block until the token moves past `token` (or `timeout` seconds); whether it did."""
        with self._cond:
            return self._cond.wait_for(lambda: self._token != token or self._stopped,
                                       timeout) and self._token != token

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(events)` on the watcher's thread for each batch of new snapshots
        (independently of `wait`); returns the function that unsubscribes it. Keep it
        quick: the watcher does not look at the table while it runs."""
        with self._cond:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._cond:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def _require_started(self) -> None:
        if not self._started:
            raise WatcherError(f"{self!r} is not started: call start() or use it in a with "
                               "block")

    def _vouches(self) -> bool:
        if not self._started or self._stopped:
            return False
        return self._mode.vouches()

    # -- the watcher's thread ----------------------------------------------------------------

    def _run(self) -> None:
        delay = self._mode.next_delay(changed=True)
        while not self._stopped:
            self._wake.wait(delay)
            if self._stopped:
                break
            self._wake.clear()  # before looking: a later event wakes the next look
            try:
                delay = self._look()
            except Exception:  # a bug must not end the watch silently: say so, go on
                log.exception("watcher of %s: looking at the table failed", self.location)
                delay = self.interval

    def _bump(self) -> None:
        with self._cond:
            self._token += 1
            self._cond.notify_all()

    def _arm(self) -> None:
        """Have the mode keep what tells of changes in place, before a look (events: the
        directory watch; the mode turns to polling if it cannot be had)."""
        self._mode = self._mode.arm()

    def _locate(self) -> str:
        """The table's current metadata file, as `load_table` finds it; for a catalog table
        one `loadTable`, whose FileIO (fresh credentials) the next reads use."""
        located = locate_table(self.source, None if self.source.is_catalog_table
                               else self.io)
        self.io = located.io
        return located.metadata_location

    def _first_look(self) -> None:
        location = self._locate()
        deadline = time.monotonic() + START_PATIENCE
        while True:
            try:
                metadata = read_metadata(location, self.io)
                break
            except CorruptMetadataError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(FIRST_DELAY)
                location = self._locate()
        self._resolved = location
        if self.after is None:
            current = metadata.current_snapshot
            self._cursor = Cursor(None) if current is None else Cursor.at(current)
        else:
            self._cursor = Cursor(self.after).known(metadata)
            if self.after not in metadata.snapshots:
                log.warning("watcher of %s: snapshot %s is not in the table (expired or "
                            "never committed); reporting the retained commits after it",
                            self.location, self.after)
        self._publish(location, metadata)

    def _look(self) -> float:
        """Look at the table once; returns how long to wait before the next look."""
        self._arm()
        try:
            location = self._locate()
        except (MeltwaterError, OSError) as error:  # gone, or a store or catalog failing
            if not self._missing:
                self._missing = True
                self._bump()
                gone = "the table is gone" if isinstance(error, NoSuchTableError) else (
                    "cannot read the table")
                log.warning("watcher of %s: %s (%s); looking again until it is back",
                            self.location, gone, error)
                return self._mode.failed(first=True)
            return self._mode.failed(first=False)
        if self._missing:
            self._missing = False
            log.warning("watcher of %s: the table is back", self.location)
        if location != self._resolved:
            self._resolved = location
            self._bump()
        state = self._state
        if state is not None and location == state.metadata_location:
            self._unreadable = None
            return self._mode.next_delay(changed=False)
        if state is not None and self._went_back(state.metadata_location, location):
            return FIRST_DELAY
        try:
            metadata = read_metadata(location, self.io)
        except (CorruptMetadataError, NoSuchTableError, UnsupportedFeatureError, OSError) as error:
            return self._still_unreadable(location, error)
        self._unreadable = None
        self._publish(location, metadata)
        return self._mode.next_delay(changed=True)

    def _went_back(self, previous: str, location: str) -> bool:
        """A lower metadata version than before: a version hint read half written, or the
        table dropped and created again. Believed when a second look finds it too."""
        old = metadata_file_version(previous.rsplit("/", 1)[-1])
        new = metadata_file_version(location.rsplit("/", 1)[-1])
        if old is None or new is None or new >= old or self._backwards == location:
            self._backwards = None
            return False
        self._backwards = location
        return True

    def _still_unreadable(self, location: str, error: Exception) -> float:
        """The newest metadata file does not parse (yet): half written by a writer that
        does not rename, or vanished in between. Look again after 50 ms, doubling up to
        1 s; warn if it lasts. Returns the delay."""
        now = time.monotonic()
        if self._unreadable is None or self._unreadable[0] != location:
            self._unreadable = (location, now)
            self._retry = FIRST_DELAY
            return self._retry
        if now - self._unreadable[1] > UNREADABLE_WARNING:
            log.warning("watcher of %s: the newest metadata file is still unreadable after "
                        "%.0f s (%s); waiting for it", self.location, now - self._unreadable[1],
                        error)
            self._unreadable = (location, now)
        self._retry = min(self._retry * 2, RETRY_LIMIT)
        return self._retry

    def _publish(self, location: str, metadata: TableMetadata) -> None:
        """A new metadata file: report the commits since the cursor."""
        state = self._state
        if state is not None and metadata.table_uuid != state.metadata.table_uuid:
            log.warning("watcher of %s: the table was replaced (uuid %s, was %s); reporting "
                        "its history from the start", self.location, metadata.table_uuid,
                        state.metadata.table_uuid)
            self._cursor = Cursor(None)
        cursor = self._cursor.known(metadata)
        commits = commits_after(metadata, cursor)
        if commits.gap:
            log.warning("watcher of %s: commits after snapshot %s up to %s expired before the "
                        "watcher saw them; going on with snapshot %s", self.location,
                        cursor.snapshot_id, commits.snapshots[0].parent_id,
                        commits.snapshots[0].snapshot_id)
        if commits.reset:
            log.warning("watcher of %s: the main branch left the lineage of snapshot %s "
                        "(rollback?); now at snapshot %s", self.location, cursor.snapshot_id,
                        metadata.current_snapshot_id)
        events = [SnapshotEvent.of(s, location, reset=commits.reset and i == 0)
                  for i, s in enumerate(commits.snapshots)]
        if commits.snapshots:
            self._cursor = Cursor.at(commits.snapshots[-1])
        current = metadata.current_snapshot
        with self._cond:
            generation = 1 if state is None else state.generation + 1
            self._state = WatchState(location, metadata.current_snapshot_id,
                                     current.sequence_number if current else None,
                                     current.timestamp_ms if current else None,
                                     generation, metadata)
            self._token += 1
            self._pending.add(events)
            self._cond.notify_all()
            subscribers = list(self._subscribers)
        if events:
            for callback in subscribers:
                try:
                    callback(events)
                except Exception:
                    log.exception("watcher of %s: subscriber %r failed", self.location,
                                  callback)
