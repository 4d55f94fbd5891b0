"""The newest state of a table as the service knows it: for lag and progress, not for reading.

A table addressed by location is backed by its `SnapshotWatcher`, so the service loop can
ask twice a second, per pipeline, without touching the file system: the watcher rereads
the metadata only when a commit lands. A catalog table is not polled here: its stream
already asks the catalog once a second, and a second poller would double what an idle
table costs the catalog. Its head is loaded again only when the stream's progress names a
snapshot the head does not know (`know`), so idle it costs nothing.

Lag is measured along the current snapshot's ancestry: the snapshots after the one the sink
reached, and the age of the oldest of them. A snapshot's parent and sequence number are
looked up as the sinks look them up (`meltwater.sinks.source_table`), in the head as it is:
only `know` reads a catalog table again.
"""

from __future__ import annotations

import logging
import time

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.table.fileio import FileIO
from meltwater.planner.table.metadata import Snapshot, TableMetadata
from meltwater.planner.table.table_source import TableSource, parse_table_source
from meltwater.sinks.source_table import SourceTable, parent_in, sequence_number_in
from meltwater.stream.watch.watcher import SnapshotWatcher

log = logging.getLogger("meltwater.service")


class TableHead:
    """A table's current metadata, as its watcher (or, for a catalog table, the last
    `know` that had to ask) last read it."""

    def __init__(self, table: str | TableSource, io: FileIO | None = None, *,
                 branch: str | None = None) -> None:
        self.source = table if isinstance(table, TableSource) else parse_table_source(table)
        self.branch = branch  # the branch the pipeline follows (None: main)
        self.location = str(self.source)
        self.watcher = None if self.source.is_catalog_table else SnapshotWatcher(
            self.source, io=io, queue_size=0)  # state only, no events
        self._catalog_table = SourceTable(self.source)  # a catalog table's, as `know` read it

    def start(self) -> TableHead:
        """Start watching the table (a catalog table: load it once); returns the head."""
        if self.watcher is not None:
            self.watcher.start()
        else:
            self._catalog_table.read()
        return self

    def close(self) -> None:
        """Stop watching the table."""
        if self.watcher is not None:
            self.watcher.stop()

    def metadata(self) -> TableMetadata | None:
        """The table's newest metadata the head has read; None before the first read."""
        if self.watcher is None:
            return self._catalog_table.last_read
        state = self.watcher.latest
        return None if state is None else state.metadata

    def know(self, snapshot_id: int | None) -> None:
        """Make sure the head has `snapshot_id` (one a stream reported): a catalog table is
        asked again now, a watched one is already current. A failing catalog is logged and
        the old head kept: the lag metric is stale until it answers."""
        if self.watcher is not None or snapshot_id is None:
            return
        try:
            self._catalog_table.snapshot(snapshot_id)  # read again if it does not hold it
        except MeltwaterError as error:
            log.warning("table %s: cannot refresh its head (%s)", self.location, error)

    def pending(self, reached: int | None) -> list[Snapshot]:
        """Snapshots of the followed branch's lineage after `reached`, oldest first (none
        while the branch does not exist)."""
        metadata = self.metadata()
        try:
            head = None if metadata is None else metadata.branch_head(self.branch)
        except MeltwaterError:
            return []
        if metadata is None or head is None:
            return []
        lineage = metadata.ancestors(head.snapshot_id)
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
        return parent_in(self.metadata(), snapshot_id)

    def sequence_number(self, snapshot_id: int | None) -> int | None:
        """The sequence number of a snapshot, if the newest metadata still holds it."""
        return sequence_number_in(self.metadata(), snapshot_id)
