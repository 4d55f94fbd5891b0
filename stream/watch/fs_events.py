"""Change notifications for local directories, from one watchdog observer per process.

Every `SnapshotWatcher` in event mode asks here to hear about one table's `metadata/`
directory. They share a single watchdog `Observer`: on Linux each observer is an inotify
instance, and a user may own only 128 of those by default, while a service or a test run
may watch many tables. Watches of one directory are shared too (watchdog keys them by path),
so this module counts subscribers and only drops the watch with its last one.

Only events that can mean a commit are asked for: files created, moved in, closed after
writing (Linux) or modified (elsewhere, where there is no close event), and deleted. Never
opened or read files: the watcher's own reads would wake it up again.

A watched directory that is deleted ends its watch: `DirectoryWatch.alive` turns false and
the subscriber is told (with the deletion event); subscribing again once the directory is
back arms a new watch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.events import (
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.utils import platform

log = logging.getLogger(__name__)

Callback = Callable[[FileSystemEvent], None]

EVENT_TYPES: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileMovedEvent, FileDeletedEvent, DirDeletedEvent, DirMovedEvent,
    FileClosedEvent if platform.is_linux() else FileModifiedEvent,
]


@dataclass(eq=False)
class _Watched:
    """One watched directory: its watchdog watch and who listens to it."""

    path: str
    watch: ObservedWatch | None = None
    # replaced, never changed in place: watchdog's thread reads it without the hub's lock
    callbacks: frozenset[Callback] = frozenset()
    alive: bool = True


class _FanOut(FileSystemEventHandler):
    """The one watchdog handler of a directory: hands each event to its subscribers."""

    def __init__(self, watched: _Watched) -> None:
        self.watched = watched

    def dispatch(self, event: FileSystemEvent) -> None:
        watched = self.watched
        if event.is_directory and os.fsdecode(event.src_path) == watched.path and isinstance(
                event, (DirDeletedEvent, DirMovedEvent)):
            watched.alive = False  # watchdog stops watching a deleted directory
        # No lock here: watchdog calls this holding its observer's lock, which subscribe()
        # and cancel() take while holding the hub's; the callbacks set is immutable instead.
        for callback in watched.callbacks:
            try:
                callback(event)
            except Exception:  # a subscriber's bug must not stop the others' events
                log.exception("file event callback %r failed", callback)


class _Hub:
    """The process's observer and its watched directories (recreated after a fork)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pid = os.getpid()
        self.observer: BaseObserver | None = None
        self.watched: dict[str, _Watched] = {}

    def _observer(self) -> BaseObserver:
        if self.observer is None:
            observer = Observer()
            observer.daemon = True
            observer.start()
            self.observer = observer
        return self.observer

    def subscribe(self, path: str, callback: Callback) -> DirectoryWatch:
        with self.lock:
            observer = self._observer()
            watched = self.watched.get(path)
            if watched is not None and not watched.alive:
                self._drop(watched)  # its directory was deleted: arm a new watch
                del self.watched[path]
                watched = None
            if watched is None:
                watched = _Watched(path)
                watched.watch = observer.schedule(_FanOut(watched), path,
                                                  event_filter=EVENT_TYPES)
                self.watched[path] = watched
            watched.callbacks = watched.callbacks | {callback}
            return DirectoryWatch(self, watched, callback)

    def unsubscribe(self, watched: _Watched, callback: Callback) -> None:
        with self.lock:
            watched.callbacks = watched.callbacks - {callback}
            if not watched.callbacks and self.watched.get(watched.path) is watched:
                self._drop(watched)
                del self.watched[watched.path]

    def _drop(self, watched: _Watched) -> None:
        if self.observer is not None and watched.watch is not None:
            with contextlib.suppress(KeyError, OSError, RuntimeError):  # gone with its dir
                self.observer.unschedule(watched.watch)
        watched.watch = None
        watched.alive = False


_hub: _Hub | None = None
_hub_lock = threading.Lock()


def _current_hub() -> _Hub:
    global _hub
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid():  # a forked child has no observer thread
            _hub = _Hub()
        return _hub


@dataclass(eq=False)
class DirectoryWatch:
    """A subscription to a directory's events; `cancel()` ends it."""

    hub: _Hub
    watched: _Watched
    callback: Callback
    cancelled: bool = False

    @property
    def path(self) -> str:
        """The directory watched."""
        return self.watched.path

    @property
    def alive(self) -> bool:
        """Whether events still arrive: not cancelled and the directory not deleted."""
        return not self.cancelled and self.watched.alive

    def cancel(self) -> None:
        """Stop receiving the directory's events; calling it again does nothing."""
        if not self.cancelled:
            self.cancelled = True
            self.hub.unsubscribe(self.watched, self.callback)


def watch_directory(path: str, callback: Callback) -> DirectoryWatch:
    """Call `callback(event)` (on watchdog's thread) for changes to files in `path`.

    Raises OSError (e.g. FileNotFoundError) if the directory cannot be watched; callers
    fall back to polling.
    """
    return _current_hub().subscribe(os.path.abspath(path), callback)
