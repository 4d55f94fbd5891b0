"""The table a change stream reads, at its newest metadata, loaded only when it changed.

**Watching the table.** The stream's first `load()` starts a `SnapshotWatcher` on the table
(file events for local tables, polling with backoff for object stores). While the watcher
has seen nothing, `load()` returns the table it loaded last without touching the file
system, so a trigger every 10 ms costs nothing; once it has, `load()` resolves and reads the
newest metadata as before (reusing the watcher's parse of the same file). A commit is
therefore visible to `latest_offset` once the watcher has seen it: about a millisecond
after the commit with file events, up to the polling interval (2 s) on object stores.
With option `watch-wait-ms`, `latest_offset` waits that long for a commit when nothing is
new, so an idle stream blocks instead of spinning and starts the moment a commit lands.
`close()` stops the watcher (so does garbage collection of the stream). A
`Trigger.AvailableNow` stream pins its last snapshot when it starts and never watches.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from meltwater.planner.errors import MeltwaterError, NoSuchTableError
from meltwater.planner.table.fileio import FileIO, PyArrowFileIO
from meltwater.planner.table.table_loading import Table, locate_table, read_metadata
from meltwater.planner.table.table_source import TableSource

if TYPE_CHECKING:
    from meltwater.stream.watch.watcher import SnapshotWatcher


class WatchedTable:
    """A table at its newest metadata, and the watcher that says when that changed.

    `watch=False` loads the table from the file system on every `load()` instead of
    watching it; a metadata file is never watched (it never changes)."""

    def __init__(self, source: TableSource, io: FileIO | None = None, *,
                 watch: bool = True, branch: str | None = None) -> None:
        self.source = source
        self.branch = branch  # what `pin` stops at the head of (None: main)
        self.io = io or PyArrowFileIO(source.io_properties)
        self.watch = watch and not (source.location or "").endswith(".json")
        self._watcher: SnapshotWatcher | None = None
        self._stop_watcher: weakref.finalize | None = None
        self._token: int | None = None  # the watcher's token when `loaded` was loaded
        self.loaded: Table | None = None  # the table `load()` returned last
        self.target: int | None = None  # AvailableNow: the snapshot to stop at
        self.pinned = False

    def load(self) -> Table:
        """The table at its newest metadata: the one loaded last while the watcher saw
        nothing, else the version hint, then the metadata file unless it is the one already
        loaded (metadata files never change)."""
        if self.pinned and self.loaded is not None:
            return self.loaded
        watcher = self.watcher
        if (self.loaded is not None and watcher is not None and self._token is not None
                and not watcher.changed_since(self._token)):
            # the watcher asks a catalog table's catalog every look: its FileIO carries the
            # freshest credentials there are
            self.io = self.loaded.io = watcher.io
            return self.loaded
        token = None if watcher is None else watcher.token  # before looking: no gap
        try:
            source = self.source
            located = locate_table(source, None if source.is_catalog_table else self.io)
            self.io = located.io  # a catalog's answer carries fresh credentials
            location = located.metadata_location
            if self.loaded is not None and self.loaded.metadata_location == location:
                self.loaded.io = self.io
                self._token = token
                return self.loaded
            seen = None if watcher is None else watcher.latest
            metadata = (seen.metadata if seen is not None and seen.metadata_location == location
                        else read_metadata(location, self.io))
            table = Table(location, metadata, self.io, source)
        except NoSuchTableError as error:
            raise NoSuchTableError(f"{error}: the table the stream reads has vanished; its "
                                   "checkpoint keeps the last committed offset, so restoring "
                                   "the table and restarting the query resumes there") from None
        self.loaded = table
        self._token = token
        return table

    @property
    def watcher(self) -> SnapshotWatcher | None:
        """The table's watcher, started on first use (None when not watching, or while the
        table cannot be watched: then `load()` reads the file system each time)."""
        if self._watcher is None and self.watch:
            from meltwater.stream.watch.watcher import SnapshotWatcher  # watchdog: only to watch

            watcher = SnapshotWatcher(self.source, io=self.io, queue_size=0)
            try:
                watcher.start()
            except MeltwaterError:
                return None  # no table (yet): load() says so, and the next load tries again
            self._watcher = watcher
            # stop it with the stream, even if nobody calls close()
            self._stop_watcher = weakref.finalize(self, watcher.stop)
        return self._watcher

    @property
    def watching(self) -> bool:
        """Whether a watcher can say when the table changes after the last `load()`."""
        return self._watcher is not None and self._token is not None

    def wait_for_change(self, timeout: float) -> bool:
        """Block until the watcher sees something since the last `load()`, or `timeout`
        seconds; whether it did (True at once when nothing is loaded or watched)."""
        if self._watcher is None or self._token is None:
            return True
        return self._watcher.wait_changed(self._token, timeout)

    def close(self) -> None:
        """Stop watching the table."""
        if self._stop_watcher is not None:
            self._stop_watcher()  # runs watcher.stop() once
        self._watcher = self._stop_watcher = None
        self._token = None

    def pin(self) -> None:
        """Stop at the newest snapshot there is now (`target`), for good.

        A pinned table never looks past its target, so it needs no watcher (nor the
        watchdog import and threads, which every AvailableNow query would pay again) and
        keeps the metadata it pinned: the snapshots up to the target never change."""
        self.watch = False
        self.close()
        head = self.load().metadata.branch_head(self.branch)
        self.target = None if head is None else head.snapshot_id
        self.pinned = True
