"""The newest state of a table as the service knows it: for lag and progress, not for reading.

Re-reads the table's metadata only when its current metadata file changed, so the service
loop can ask every half second without reading a JSON document each time. Lag is measured
along the current snapshot's ancestry: the snapshots after the one the sink reached, and the
age of the oldest of them.
"""

from __future__ import annotations

import time

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.fileio import FileIO, PyArrowFileIO
from meltwater.planner.metadata import (
    Snapshot,
    TableMetadata,
    find_metadata_location,
    read_metadata,
)


class TableHead:
    """A table's current metadata, refreshed on demand."""

    def __init__(self, location: str, io: FileIO | None = None) -> None:
        self.location = location
        self.io = io or PyArrowFileIO()
        self._metadata_location: str | None = None
        self._metadata: TableMetadata | None = None

    def refresh(self) -> TableMetadata:
        location = find_metadata_location(self.location, self.io)
        if location != self._metadata_location or self._metadata is None:
            self._metadata = read_metadata(location, self.io)
            self._metadata_location = location
        return self._metadata

    def metadata(self) -> TableMetadata | None:
        try:
            return self.refresh()
        except MeltwaterError:
            return self._metadata  # a table mid-commit or gone: keep the last known state

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
        metadata = self.metadata()
        snapshot = None if metadata is None else metadata.snapshots.get(snapshot_id)
        return None if snapshot is None else snapshot.parent_id

    def sequence_number(self, snapshot_id: int | None) -> int | None:
        metadata = self.metadata()
        if metadata is None or snapshot_id is None:
            return None
        snapshot = metadata.snapshots.get(snapshot_id)
        return None if snapshot is None else snapshot.sequence_number
