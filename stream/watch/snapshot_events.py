"""What a new metadata file says happened to a table: its new commits, in commit order.

A watcher keeps a cursor, the last snapshot it reported, and compares each new metadata
file with it. This module is that comparison, without threads or files, so its cases can be
tested one by one:

- the cursor is an ancestor of the current snapshot: the commits after it, oldest first;
- the cursor is not in the table any more (expired, or a resumed watcher's snapshot that
  expired meanwhile): the retained ancestors committed after it, a *gap* before them;
- the cursor is in the table but not an ancestor (a rollback, or main set to a snapshot of
  another lineage): a *reset*. The commits of the new lineage after the newest snapshot
  both lineages share, oldest first, or, when the table went back to an ancestor of the
  cursor, that ancestor itself, reported again. The first event carries `reset=True`.

Only the main branch is followed (the table's current snapshot). Example::

    >>> commits = commits_after(metadata, Cursor(41))     # 41 -> 42 -> 43 is main
    >>> [s.snapshot_id for s in commits.snapshots], commits.reset, commits.gap
    ([42, 43], False, False)
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from meltwater.planner.table.metadata import Snapshot, TableMetadata

log = logging.getLogger(__name__)


def _count(summary: dict[str, str], key: str) -> int | None:
    value = summary.get(key)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


@dataclass(frozen=True)
class SnapshotEvent:
    """A commit to a table's main branch, as a watcher reports it.

    Counts come from the snapshot summary and are None when the writer did not record them.
    `metadata_location` is the metadata file in which the watcher first saw the snapshot
    (several commits seen at once share the newest one). `reset` marks the first event
    after a rollback (see the module doc).
    """

    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    operation: str
    timestamp_ms: int
    metadata_location: str
    added_records: int | None = None
    deleted_records: int | None = None
    added_data_files: int | None = None
    deleted_data_files: int | None = None
    added_delete_files: int | None = None
    removed_delete_files: int | None = None
    added_position_deletes: int | None = None  # rows the new delete files delete by position
    added_equality_deletes: int | None = None  # keys the new delete files delete by value
    total_records: int | None = None
    reset: bool = False

    @classmethod
    def of(cls, snapshot: Snapshot, metadata_location: str, *,
           reset: bool = False) -> SnapshotEvent:
        """The event of one snapshot, with the counts its summary records; `reset` marks a table
        replaced or rolled back."""
        summary = snapshot.summary
        return cls(snapshot.snapshot_id, snapshot.parent_id, snapshot.sequence_number,
                   snapshot.operation, snapshot.timestamp_ms, metadata_location,
                   added_records=_count(summary, "added-records"),
                   deleted_records=_count(summary, "deleted-records"),
                   added_data_files=_count(summary, "added-data-files"),
                   deleted_data_files=_count(summary, "deleted-data-files"),
                   added_delete_files=_count(summary, "added-delete-files"),
                   removed_delete_files=_count(summary, "removed-delete-files"),
                   added_position_deletes=_count(summary, "added-position-deletes"),
                   added_equality_deletes=_count(summary, "added-equality-deletes"),
                   total_records=_count(summary, "total-records"), reset=reset)

    @property
    def committed_at(self) -> str:
        """The commit time, ISO-8601 in UTC with milliseconds."""
        moment = dt.datetime.fromtimestamp(self.timestamp_ms / 1000, dt.timezone.utc)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object, as `meltwater watch --format json` prints it."""
        return {"snapshot_id": self.snapshot_id, "parent_id": self.parent_id,
                "sequence_number": self.sequence_number, "operation": self.operation,
                "timestamp_ms": self.timestamp_ms, "committed_at": self.committed_at,
                "added_records": self.added_records, "deleted_records": self.deleted_records,
                "added_data_files": self.added_data_files,
                "deleted_data_files": self.deleted_data_files,
                "added_delete_files": self.added_delete_files,
                "removed_delete_files": self.removed_delete_files,
                "added_position_deletes": self.added_position_deletes,
                "added_equality_deletes": self.added_equality_deletes,
                "total_records": self.total_records, "reset": self.reset,
                "metadata_location": self.metadata_location}


@dataclass(frozen=True)
class Cursor:
    """The last snapshot reported (None: before the table's first snapshot), with its
    sequence number and time once known: they still order it after it expired."""

    snapshot_id: int | None
    sequence_number: int | None = None
    timestamp_ms: int | None = None

    @classmethod
    def at(cls, snapshot: Snapshot) -> Cursor:
        """The cursor at a snapshot, keeping its sequence number and time for after it expires."""
        return cls(snapshot.snapshot_id, snapshot.sequence_number, snapshot.timestamp_ms)

    def known(self, metadata: TableMetadata) -> Cursor:
        """This cursor with the sequence number and time the metadata knows of it."""
        snapshot = (None if self.snapshot_id is None
                    else metadata.snapshots.get(self.snapshot_id))
        return self if snapshot is None else Cursor.at(snapshot)


@dataclass(frozen=True)
class NewCommits:
    """The commits to report, oldest first; `gap`: commits before them expired unseen;
    `reset`: the table left the cursor's lineage."""

    snapshots: tuple[Snapshot, ...]
    gap: bool = False
    reset: bool = False


def commits_after(metadata: TableMetadata, cursor: Cursor) -> NewCommits:
    """The main branch's commits after `cursor` (see the module doc for the cases)."""
    current = metadata.current_snapshot_id
    if current is None or current == cursor.snapshot_id:
        return NewCommits(())
    chain = metadata.ancestors(current)  # newest first, as far as history is retained
    after: list[Snapshot] = []
    for snapshot in chain:
        if snapshot.snapshot_id == cursor.snapshot_id:
            return NewCommits(tuple(reversed(after)))
        after.append(snapshot)
    if cursor.snapshot_id is not None and cursor.snapshot_id in metadata.snapshots:
        return _diverged(metadata, chain, cursor.snapshot_id)
    # the cursor is not in the table: it expired (or the table has no such snapshot)
    newer = [s for s in chain if _after(s, cursor, metadata.format_version)]
    if not newer:
        return NewCommits(())
    parent = newer[-1].parent_id
    if parent == cursor.snapshot_id:  # only the cursor itself expired
        return NewCommits(tuple(reversed(newer)))
    if parent is None or parent in metadata.snapshots:  # a lineage the cursor was not on
        return NewCommits(tuple(reversed(newer)), reset=True)
    return NewCommits(tuple(reversed(newer)), gap=True)


def _after(snapshot: Snapshot, cursor: Cursor, format_version: int) -> bool:
    """Whether a snapshot was committed after the cursor's (unknown: assume so)."""
    if format_version >= 2 and cursor.sequence_number is not None:
        return snapshot.sequence_number > cursor.sequence_number
    if cursor.timestamp_ms is not None:
        return snapshot.timestamp_ms > cursor.timestamp_ms
    return True


def _diverged(metadata: TableMetadata, chain: list[Snapshot], cursor: int) -> NewCommits:
    shared = {s.snapshot_id for s in metadata.ancestors(cursor)}
    fresh: list[Snapshot] = []
    for snapshot in chain:
        if snapshot.snapshot_id in shared:
            break
        fresh.append(snapshot)
    if not fresh:  # rolled back to one of the cursor's ancestors: report where it went
        return NewCommits((chain[0],), reset=True)
    return NewCommits(tuple(reversed(fresh)), reset=True)


class EventQueue:
    """Events waiting for a consumer to collect them, at most `size` (0 keeps none): beyond
    it the oldest are dropped with a warning, so memory stays bounded when nobody collects.
    Not thread-safe: its owner (`SnapshotWatcher`) holds its lock around every call."""

    def __init__(self, size: int, location: str) -> None:
        self.size = size
        self._location = location  # what messages call the table
        self._pending: deque[SnapshotEvent] = deque()
        self._dropped = 0

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, events: list[SnapshotEvent]) -> None:
        """Queue events, dropping the oldest beyond `size`."""
        if self.size == 0:
            return
        self._pending.extend(events)
        overflow = len(self._pending) - self.size
        if overflow > 0:
            for _ in range(overflow):
                self._pending.popleft()
            self._dropped += overflow
            log.warning("watcher of %s: %d events were not collected by wait() and were "
                        "dropped (queue_size=%d); restart with after=<last snapshot handled> "
                        "to catch up", self._location, self._dropped, self.size)

    def take(self) -> list[SnapshotEvent]:
        """Every queued event, oldest first; the queue is empty after."""
        events = list(self._pending)
        self._pending.clear()
        return events
