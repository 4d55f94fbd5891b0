"""How a `SnapshotWatcher` notices new snapshots: one strategy object per way of looking.

- `FileEvents` (local tables): watchdog wakes the watcher for files that can mean a commit
  in `metadata/`; a slow safety look covers a missed event. Falls back to `Polling` for
  good when the directory cannot be watched (e.g. out of inotify watches).
- `Polling` (object stores, `poll=True`): a look after 50 ms, doubling while nothing
  changes up to the interval, back to 50 ms on a change.
- `CatalogPolling` (a catalog table): one `loadTable` every interval, each a request to a
  shared server; a failing catalog is asked again after 2 s, doubling up to a minute.
- `FixedFile` (a `*.metadata.json` location): the file never changes; nothing runs.

The watcher asks its mode how long to wait (`next_delay`, `failed`), whether it can vouch
that nothing changed between looks (`vouches`), and to keep its watch up (`arm`); it
never compares mode names. `name` is what messages and `SnapshotWatcher.mode` call it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import urlparse

from meltwater.planner.table.table_loading import metadata_file_version
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.errors import WatcherError
from meltwater.stream.watch.fs_events import DirectoryWatch, watch_directory

log = logging.getLogger(__name__)

FIRST_DELAY = 0.05  # seconds: the first look after a change, when polling or retrying
POLL_INTERVAL = 2.0  # polling: the longest wait between two looks
SAFETY_INTERVAL = 30.0  # events: a look now and then in case an event was missed
CATALOG_INTERVAL = 1.0  # catalog tables: one loadTable a second (60 requests/minute idle)
CATALOG_RETRY = 2.0  # a failing catalog: asked again after 2 s, doubling...
CATALOG_RETRY_LIMIT = 60.0  # ...up to a minute


class WatchMode:
    """A way of noticing new snapshots; by default a look after each `interval`."""

    name: ClassVar[str]
    runs: ClassVar[bool] = True  # whether the watcher needs a thread that looks

    def __init__(self, interval: float) -> None:
        self.interval = interval

    def arm(self) -> WatchMode:
        """Make sure what tells of changes is in place before a look; returns the mode to
        go on with (itself, or another when this one cannot be had)."""
        return self

    def vouches(self) -> bool:
        """Whether nothing can have changed unseen since the last look."""
        return True

    def next_delay(self, *, changed: bool) -> float:  # noqa: ARG002  (modes that back off use it)
        """How long until the next look, unless an event comes first (`changed`: the last
        look found a new metadata file)."""
        return self.interval

    def failed(self, *, first: bool) -> float:  # noqa: ARG002  (the catalog's backoff uses it)
        """How long until the next look after one that could not reach the table (`first`:
        the table was reachable at the look before)."""
        return self.next_delay(changed=False)

    def cancel(self) -> None:
        """Release what the mode holds (a directory watch)."""


class FixedFile(WatchMode):
    """A `*.metadata.json` location: it never changes, so nothing looks again."""

    name = "fixed"
    runs = False


class Polling(WatchMode):
    """Looks after `FIRST_DELAY`, doubling while nothing changes up to `interval`."""

    name = "polling"

    def __init__(self, interval: float, cap: float | None = None) -> None:
        super().__init__(interval)
        self._cap = interval if cap is None else cap
        self._delay = FIRST_DELAY

    def next_delay(self, *, changed: bool) -> float:
        """Back to the first delay on a change, else twice the last, up to the cap."""
        self._delay = FIRST_DELAY if changed else min(self._delay * 2, self._cap)
        return self._delay


class CatalogPolling(WatchMode):
    """One `loadTable` every `interval`; a failing catalog backed off (see the module doc)."""

    name = "catalog"

    def __init__(self, interval: float) -> None:
        super().__init__(interval)
        self._retry = CATALOG_RETRY

    def failed(self, *, first: bool) -> float:
        """After 2 s the first time, doubling up to a minute: each look is a request."""
        self._retry = CATALOG_RETRY if first else min(self._retry * 2, CATALOG_RETRY_LIMIT)
        return self._retry


class FileEvents(WatchMode):
    """Watches a local `metadata/` directory (see the module doc).

    `changed` is told whenever the table may have changed (an event, or a watch armed
    anew after events may have been missed); `wake` whenever the watcher should look now.
    While the directory is gone (deleted, or replaced) the watcher polls until it can be
    watched again.
    """

    name = "events"

    def __init__(self, interval: float, directory: str, *, changed: Callable[[], None],
                 wake: Callable[[], None], location: str) -> None:
        super().__init__(interval)
        self.directory = directory
        self._changed = changed
        self._wake = wake
        self._location = location  # what messages call the table
        self._watch: DirectoryWatch | None = None
        self._identity: tuple[int, int] | None = None
        self._polling = Polling(interval, cap=min(interval, POLL_INTERVAL))

    def arm(self) -> WatchMode:
        """Watch `metadata/` (again, after it was deleted or replaced), before the look that
        follows so no commit falls in between; polling for good if it cannot be watched."""
        watch = self._watch
        if watch is not None and watch.alive and self._identity == self._directory_id():
            return self
        if watch is not None:
            watch.cancel()
            self._watch = None
            self._changed()  # events may have been missed meanwhile
        try:
            identity = self._directory_id()
            self._watch = watch_directory(self.directory, self._on_event)
        except OSError as error:
            if os.path.isdir(self.directory):
                log.warning("watcher of %s: cannot watch %s (%s); polling instead",
                            self._location, self.directory, error)
                return Polling(POLL_INTERVAL)
            return self
        self._identity = identity
        self._changed()
        return self

    def vouches(self) -> bool:
        """While the directory is watched, every change wakes the watcher."""
        return self._watch is not None and self._watch.alive

    def next_delay(self, *, changed: bool) -> float:
        """The safety interval while events flow; polling while `metadata/` is gone."""
        if self.vouches():
            return self.interval
        return self._polling.next_delay(changed=changed)

    def cancel(self) -> None:
        """Stop watching the directory."""
        if self._watch is not None:
            self._watch.cancel()

    def _directory_id(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.directory)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def _on_event(self, event: Any) -> None:
        """On watchdog's thread: wake the watcher for files that can mean a commit."""
        paths = [os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "")
                                                           or "")]
        if paths[0] != self.directory and not any(
                name == "version-hint.text" or metadata_file_version(name) is not None
                for name in (os.path.basename(p) for p in paths if p)):
            return
        self._changed()
        self._wake()


def watch_mode(source: TableSource, poll: bool | None, interval: float | None, *,
               changed: Callable[[], None], wake: Callable[[], None]) -> WatchMode:
    """The way a table's snapshots are noticed, chosen once: a catalog's, a fixed file's,
    polling (asked for, or any non-local location), else file events. `interval`
    overrides the mode's default; `changed` and `wake` are what file events call."""
    location = source.location or ""
    local = local_directory(location) if source.location is not None else None
    if source.is_catalog_table:
        return CatalogPolling(CATALOG_INTERVAL if interval is None else float(interval))
    if location.endswith(".json"):
        return FixedFile(POLL_INTERVAL if interval is None else float(interval))
    if poll or (poll is None and local is None):
        return Polling(POLL_INTERVAL if interval is None else float(interval))
    if local is None:
        raise WatcherError(f"{location}: file events need a local table; poll instead")
    return FileEvents(SAFETY_INTERVAL if interval is None else float(interval),
                      os.path.abspath(os.path.join(local, "metadata")),
                      changed=changed, wake=wake, location=str(source))


def local_directory(location: str) -> str | None:
    """The local path of a table location, or None for a remote store."""
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    if scheme == "":
        return location
    if scheme == "file":
        return parsed.path
    if len(scheme) == 1:  # a Windows drive letter
        return location
    return None
