"""A table's change stream: the three questions of a micro-batch source, without Spark.

`ChangeStream` answers them for the Spark source (`meltwater.stream.spark.stream_reader`)
and coordinates the modules that each decide one thing:

- `initial_offset()`: where a new query starts (`StreamRead.start`, resolved by the
  planner's range resolver as a batch range from it would be, or `starting`);
- `latest_offset(start, budget)`: how far the next micro-batch goes, reloading only the
  table's metadata file (`watched_table`: the table and its watcher) and walking the
  lineage from the newest snapshot back to `start` (`stream_lineage`), planning commits one
  at a time (`plan_cache`) until the budget (files, rows, bytes) is spent (`admission`);
- `parts(start, end)`: the commit parts of a micro-batch, identical for the same offsets
  (planning is a function of immutable manifests), so a replayed batch reads the same rows
  (`stream_offsets`, which also says what an offset means and why splitting a commit
  never changes its rows).

The stream's schema is fixed when it starts (`stream_schema`, "Schema changes").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from meltwater.planner.changes.change_range import RangeBound, resolve_start
from meltwater.planner.changes.micro_batch import UNLIMITED, Budget, CommitPart
from meltwater.planner.scans.splitting import SplitOptions
from meltwater.planner.table.fileio import FileIO
from meltwater.planner.table.table_loading import Table
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.engine.changes.change_schema import ChangeOptions, RowOptions
from meltwater.stream.watch.admission import admit
from meltwater.stream.watch.offset_parts import segment_part
from meltwater.stream.watch.plan_cache import PlanCache, PlannedCommit
from meltwater.stream.watch.stream_lineage import Segment, StreamLineage
from meltwater.stream.watch.stream_modes import SchemaChange, Starting
from meltwater.stream.watch.stream_offsets import StreamOffset
from meltwater.stream.watch.stream_schema import StreamSchema
from meltwater.stream.watch.watched_table import WatchedTable

if TYPE_CHECKING:
    from meltwater.stream.watch.watcher import SnapshotWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamRead:
    """A streaming change read: where it starts, how much a micro-batch takes, and what it
    does when history expired or the schema changed. Built by the Spark
    source from its options (`meltwater.stream.spark.options.stream_read`)."""

    source: TableSource  # the table, by location or catalog identifier
    start: RangeBound | None = None  # where the stream starts; None: as `starting` says
    starting: Starting = Starting.EARLIEST
    snapshot_as_inserts: bool = False
    max_files: int | None = None
    max_rows: int | None = None
    max_bytes: int | None = None
    skip_expired: bool = False
    schema_change: SchemaChange = SchemaChange.PROJECT
    split_size: int | None = None  # bytes per partition (else read.split.target-size)
    watch_wait_ms: int = 0  # latestOffset waits this long for a commit when nothing is new
    rows: RowOptions = field(default_factory=RowOptions)  # net changes: batch reads only
    key_index_dir: str | None = None  # where executors keep the table's key index
    branch: str | None = None  # the branch followed; None: main


class ChangeStream:
    """A table's change stream: offsets, admission control and micro-batch parts.

    `columns` are the output columns (table columns and change metadata columns), as the
    Spark schema names them. Holds a cache of planned commits for the micro-batches in
    flight; `forget(offset)` drops what is behind a committed offset. `watch=False` loads
    the table from the file system on every `load()` instead of watching it.
    """

    def __init__(self, read: StreamRead, columns: Sequence[str], *,
                 io: FileIO | None = None, watch: bool = True) -> None:
        self.read = read
        self.columns = tuple(columns)
        self._watched = WatchedTable(read.source, io, watch=watch, branch=read.branch)
        self._schema: StreamSchema | None = None
        self._plans = PlanCache()
        self._lineage = StreamLineage(read.source, self._plans, skip_expired=read.skip_expired)

    # -- the table -------------------------------------------------------------------------

    def load(self) -> Table:
        """The table at its newest metadata (`WatchedTable.load`); the first load fixes
        the stream's schema."""
        table = self._watched.load()
        if self._schema is None:
            self._schema = StreamSchema.fix(table, self.columns, self.read.rows,
                                            self.read.source)
        return table

    @property
    def io(self) -> FileIO:
        """The FileIO the table was last loaded with (a catalog's freshest credentials)."""
        return self._watched.io

    @property
    def watcher(self) -> SnapshotWatcher | None:
        """The table's watcher, started on first use (`WatchedTable.watcher`)."""
        return self._watched.watcher

    @property
    def target(self) -> int | None:
        """Trigger.AvailableNow: the snapshot the stream stops at (`pin_target`)."""
        return self._watched.target

    @property
    def pinned(self) -> bool:
        """Whether the stream stops at `target` (Trigger.AvailableNow)."""
        return self._watched.pinned

    def wait_for_change(self, timeout: float) -> bool:
        """Block until the watcher sees something since the last `load()`, or `timeout`
        seconds; whether it did (True at once when nothing is loaded or watched)."""
        return self._watched.wait_for_change(timeout)

    def close(self) -> None:
        """Stop watching the table."""
        self._watched.close()

    def pin_target(self) -> None:
        """Trigger.AvailableNow: stop at the newest snapshot there is now, never watching
        (`WatchedTable.pin`)."""
        self._watched.pin()
        self.load()  # the pinned table: fixes the stream's schema if nothing did yet

    @property
    def schema(self) -> StreamSchema:
        """What the stream fixed when it started (schema, columns, change options), loaded on
        first use."""
        if self._schema is None:
            self.load()
        assert self._schema is not None
        return self._schema

    @property
    def options(self) -> ChangeOptions:
        """The change options the stream's rows are shaped by."""
        return self.schema.options

    def split_target(self) -> int:
        """Bytes per partition: option `split-size`, else the table's
        `read.split.target-size`, as Iceberg's reads."""
        if self.read.split_size is not None:
            return self.read.split_size
        table = self._watched.loaded or self.load()
        return SplitOptions.of_table(table.metadata.properties).target_size

    # -- where a stream starts ---------------------------------------------------------------

    def initial_offset(self) -> StreamOffset:
        """Where a new query starts: after the snapshot its start bound resolves to (by the
        planner's range resolver, so a start is read and refused as a batch range from it
        to the head would be), else at the oldest retained commit (`earliest`) or after the
        current snapshot (`latest`); with `snapshot_as_inserts`, at that snapshot's
        contents."""
        table = self.load()
        metadata = table.metadata
        read = self.read
        current = metadata.branch_head(read.branch)
        start: int | None
        if read.start is not None:
            start = resolve_start(table, read.start, skip_expired=read.skip_expired)
        elif current is None:
            return StreamOffset(None, complete=True)
        elif read.starting == Starting.LATEST:
            start = current.snapshot_id
        else:  # earliest: the oldest retained ancestor's commit is the first read
            oldest = metadata.ancestors(current.snapshot_id)[-1]
            if oldest.parent_id is not None:
                log.warning("table %s: the history before snapshot %s has expired; the stream "
                            "starts with that snapshot's changes (starting-snapshot-as-inserts"
                            "=true starts with its contents instead)", read.source,
                            oldest.snapshot_id)
            if read.snapshot_as_inserts:
                return StreamOffset(oldest.snapshot_id, scan_all_files=True, ordinal=0)
            return StreamOffset(oldest.snapshot_id, ordinal=0)
        if start is None:
            return StreamOffset(None, complete=True)
        if read.snapshot_as_inserts and start in metadata.snapshots:
            return StreamOffset(start, scan_all_files=True, ordinal=0)
        return StreamOffset(start, complete=True)

    # -- how far a micro-batch goes ----------------------------------------------------------

    def latest_offset(self, start: StreamOffset, budget: Budget = UNLIMITED) -> StreamOffset:
        """The end of the next micro-batch from `start`: `start` itself if nothing is new
        (after waiting up to `watch-wait-ms` for a commit)."""
        end = self._latest_offset(start, budget)
        if end != start or self.read.watch_wait_ms <= 0 or self.pinned:
            return end
        deadline = time.monotonic() + self.read.watch_wait_ms / 1000
        while end == start:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not self._watched.watching:
                time.sleep(left)  # nothing watches (a metadata file): just do not spin
                break
            if not self._watched.wait_for_change(left):
                break
            end = self._latest_offset(start, budget)
        return end

    def _latest_offset(self, start: StreamOffset, budget: Budget) -> StreamOffset:
        table = self.load()
        metadata = table.metadata
        head = metadata.branch_head(self.read.branch)
        target = self.target if self.pinned else (None if head is None else head.snapshot_id)
        if target is None or (start.complete and start.snapshot_id == target):
            return start
        fail = self.read.schema_change == SchemaChange.FAIL
        return admit(start, self._lineage.segments(table, start, target), budget,
                     plan=lambda segment: self._plan(table, segment),
                     schema_ok=lambda snapshot, admitted: self.schema.admits(
                         metadata, snapshot, admitted=admitted, fail=fail),
                     source=self.read.source)

    def report_latest(self, last: StreamOffset | None) -> StreamOffset | None:
        """The offset at the end of the newest snapshot, for progress reports."""
        if last is None:
            return None
        table = self.load()
        current = table.metadata.branch_head(self.read.branch)
        if current is None or (last.complete and last.snapshot_id == current.snapshot_id):
            return last
        segments = self._lineage.segments(table, last, current.snapshot_id)
        if not segments:
            return last
        final = segments[-1]
        tasks = self._plan(table, final).tasks
        return StreamOffset(current.snapshot_id, len(tasks), True, final.scan, final.ordinal)

    # -- what a micro-batch reads ------------------------------------------------------------

    def parts(self, start: StreamOffset, end: StreamOffset) -> list[CommitPart]:
        """The commit parts of the micro-batch (start, end]: deterministic for the offsets."""
        if start == end:
            return []
        table = self._watched.loaded if self._knows(end) else self.load()
        assert table is not None
        segments = self._lineage.segments(table, start, end.snapshot_id,
                                          end_ordinal=end.ordinal)
        parts = []
        for segment in segments:
            projection = self.schema.projection(table.metadata, segment.snapshot)
            part = segment_part(self._plan(table, segment), segment, end, projection,
                                pairs_updates=self.options.pairs_updates,
                                source=self.read.source)
            if part is not None:
                parts.append(part)
        return parts

    def forget(self, end: StreamOffset) -> None:
        """Drop planned commits a committed offset is past."""
        self._plans.forget(end)

    def _knows(self, offset: StreamOffset) -> bool:
        loaded = self._watched.loaded
        return (loaded is not None and offset.snapshot_id is not None
                and offset.snapshot_id in loaded.metadata.snapshots)

    def _plan(self, table: Table, segment: Segment) -> PlannedCommit:
        """The segment's commit (or scan), planned once (`PlanCache`)."""
        schema = self.schema
        return self._plans.plan(table, segment.snapshot, scan=segment.scan,
                                ordinal=segment.ordinal, options=schema.options,
                                appends_only=schema.appends_only)
