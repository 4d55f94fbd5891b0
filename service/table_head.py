"""The newest state of a table as the service knows it: for lag and progress, not for reading.

Backed by the table's `SnapshotWatcher`, so the service loop can ask twice a second, per
pipeline, without touching the file system: the watcher rereads the metadata only when a
commit lands. Lag is measured along the current snapshot's ancestry: the snapshots after
the one the sink reached, and the age of the oldest of them.
"""

from __future__ import annotations

import time

from meltwater.planner.fileio import FileIO
from meltwater.planner.metadata import Snapshot, TableMetadata
from meltwater.stream.watch.watcher import SnapshotWatcher


class TableHead:
    """A table's current metadata, as its watcher last read it."""

    def __init__(self, location: str, io: FileIO | None = None) -> None:
        self.location = location
        self.watcher = SnapshotWatcher(location, io=io, queue_size=0)  # state only, no events

    def start(self) -> TableHead:
        """Start watching the table; returns the head."""
        self.watcher.start()
        return self

    def close(self) -> None:
        """Stop watching the table."""
        self.watcher.stop()

    def metadata(self) -> TableMetadata | None:
        """The table's newest metadata the watcher has read; None before the first read."""
        state = self.watcher.latest
        return None if state is None else state.metadata

    def pending(self, reached: int | None) -> list[Snapshot]:
        """Snapshots of the current lineage after `reached`, oldest first."""
        metadata = self.metadata()
        if metadata is None or metadata.current_snapshot_id is None:
            return []
        lineage = metadata.ancestors(metadata.current_snapshot_id)
        after = []
        for snapshot in lineage:
            if snapshot.snapshot_id == reached:
                break
            after.append(snapshot)
        return after[::-1]

    def lag(self, reached: int | None) -> tuple[int, float]:
        """(snapshots not yet in the sink, seconds since the oldest of them committed)."""
        pending = self.pending(reached)
        if not pending:
            return 0, 0.0
        return len(pending), max(0.0, time.time() - pending[0].timestamp_ms / 1000)

    def parent_of(self, snapshot_id: int) -> int | None:
        """The parent of a snapshot, if the newest metadata still holds it."""
        metadata = self.metadata()
        snapshot = None if metadata is None else metadata.snapshots.get(snapshot_id)
        return None if snapshot is None else snapshot.parent_id

    def sequence_number(self, snapshot_id: int | None) -> int | None:
        """The sequence number of a snapshot, if the newest metadata still holds it."""
        metadata = self.metadata()
        if metadata is None or snapshot_id is None:
            return None
        snapshot = metadata.snapshots.get(snapshot_id)
        return None if snapshot is None else snapshot.sequence_number
