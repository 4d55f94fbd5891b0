"""Streaming offsets and how a change stream advances through a table's history.

A stream's position is a `StreamOffset`, stored by Spark in the query's checkpoint as JSON,
the way Iceberg's own `StreamingOffset` is::

    {"version": 2, "snapshot_id": 5140426932827412781, "position": 3, "complete": false,
     "scan_all_files": false, "ordinal": 2}

reads "every commit before snapshot 5140... along the table's lineage, and the first 3
tasks of that snapshot's commit, have been read". The tasks are the incremental planner's
change tasks of the commit (`IncrementalPlanner.plan_commit`) in *unit order*
(`meltwater.planner.commit_units`), a function of the commit's immutable manifests and the
table's specs, so one huge commit can be spread over several micro-batches. `complete`
marks the commit as read whole (then `position` is its task count, or 0 for the exclusive
start of the stream), so an offset never needs the next snapshot, which may not exist yet.
`scan_all_files` means the positions index the snapshot's *contents* (a table scan,
emitted as INSERTs) instead of its commit: the `starting-snapshot-as-inserts` mode.
`ordinal` is `_change_ordinal` of that snapshot's rows: commits are numbered from 0 in the
order the stream reads them, so a stream started at snapshot S emits the same ordinals as
`meltwater.stream.changes(table, from_snapshot_id=S)`. The table's location lives in the
query's options, not the offset.

Version 1 offsets (before units) counted tasks in the planner's order and cut anywhere.
They are still read: a complete one, or one at position 0, means the same in both orders;
one mid-commit replays its micro-batch as version 1 read it, and the next micro-batch
finishes that commit whole, in one part, so every task is read exactly once. A version 2
position that is not between two units (a checkpoint from another meltwater) is refused,
saying to start a new checkpoint.

`ChangeStream` answers the three questions of a micro-batch source without Spark:

- `initial_offset()`: where a new query starts (`StreamRead.start`, resolved by the
  planner's range resolver as a batch range from it would be, or `starting`);
- `latest_offset(start, budget)`: how far the next micro-batch goes, reloading only the
  table's metadata file and walking the lineage from the newest snapshot back to `start`,
  planning commits one at a time until the budget (files, rows, bytes) is spent. A commit
  that fits the budget is kept whole (the batch ends before it rather than splitting it);
  only a commit bigger than the budget is split, between its units, and a batch always
  takes at least one unit, even one bigger than the budget, so a stream never stalls;
- `parts(start, end)`: the commit parts of a micro-batch, identical for the same offsets
  (planning is a function of immutable manifests), so a replayed batch reads the same rows.

**Splitting a commit never changes its rows.** The union of a limited stream's
micro-batches is the unlimited feed, row for row:

- Carry-over removal compares a commit's DELETEs with its INSERTs, and the two copies of
  a row rewritten unchanged are in one unit (a partition, across specs whatever no shared
  partition field tells apart; see `meltwater.planner.commit_units`), so cutting between
  units never separates them. A commit that only adds or only removes rows cancels
  nothing: each of its tasks is a unit, and the Spark source also spreads such commits
  over partitions.
- Update pairing matches a DELETE and an INSERT by key, and a key may cross units (an
  update moving a row to another partition, pairing by `_row_id`). A part of such a commit
  carries the commit's tasks (`CommitPart.pairing`); it holds back the rows whose key
  another unit also has, and the commit's last part emits them, paired over the whole
  commit (`meltwater.stream.engine.held_changes`). The held rows are *recomputed*, not stored:
  each part re-reads the key columns of its units' key group, the last part the rows it
  emits, all from immutable files. A checkpoint therefore holds nothing but the offset
  (bounded, whatever the commit), a replayed micro-batch emits exactly the same rows, and
  a driver killed mid-batch loses or duplicates nothing: Spark replays the batch's
  offsets, which determine its rows. The price is reading: every part of such a commit
  reads the key columns of its key group, the last part also the held units' rows.

**Schema changes.** The stream's columns are fixed when it starts (the Spark schema);
commits are read in their own schema by field id, so renamed columns keep the stream's
name and dropped ones read as null. A column added after the stream started is projected
away with a warning, or with `schema-change=fail` the stream stops before the first such
commit, after emitting everything before it, and says how to restart with the new schema.

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

**Expired history.** Snapshots that expired before the stream read them fail the stream,
naming them, unless `skip-expired-snapshots=true` skips them with a warning. Nothing else
is ever skipped: a table that vanishes or a file that cannot be read fails the micro-batch,
and since offsets only advance when Spark commits a batch, a restart resumes where it was.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from meltwater.planner.change_range import RangeBound, RangeRequest, resolve_start
from meltwater.planner.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    ChangeTask,
    CommitChanges,
)
from meltwater.planner.commit_units import CommitSplit, CommitUnits, commit_units
from meltwater.planner.errors import (
    ExpiredSnapshotsError,
    InvalidRangeError,
    MeltwaterError,
    NoSuchTableError,
    OffsetError,
    StreamError,
)
from meltwater.planner.fileio import FileIO, PyArrowFileIO
from meltwater.planner.incremental import IncrementalPlanner
from meltwater.planner.metadata import Snapshot, TableMetadata
from meltwater.planner.micro_batch import (
    UNLIMITED,
    Budget,
    CommitPart,
    Cost,
    StreamOffset,
    task_cost,
)
from meltwater.planner.scan import TableScan
from meltwater.planner.splitting import SplitOptions
from meltwater.planner.table_loading import Table, locate_table, read_metadata
from meltwater.planner.table_source import TableSource
from meltwater.planner.types import Schema
from meltwater.stream.engine.change_feed import change_feed
from meltwater.stream.engine.change_schema import (
    LINEAGE_FIELDS,
    LINEAGE_IDS,
    METADATA_COLUMNS,
    ChangeOptions,
    RowOptions,
)
from meltwater.stream.errors import SchemaChangedError

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
    starting: str = "earliest"  # or "latest": only commits after the query starts
    snapshot_as_inserts: bool = False
    max_files: int | None = None
    max_rows: int | None = None
    max_bytes: int | None = None
    skip_expired: bool = False
    schema_change: str = "project"
    split_size: int | None = None  # bytes per partition (else read.split.target-size)
    watch_wait_ms: int = 0  # latestOffset waits this long for a commit when nothing is new
    rows: RowOptions = field(default_factory=RowOptions)  # net changes: batch reads only


# -- the stream --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Segment:
    """One snapshot's tasks the walk reaches: the commit (or the initial scan)."""

    snapshot: Snapshot
    scan: bool
    ordinal: int
    begin: int  # first task not yet read
    legacy: bool = False  # `begin` counts planner order (a version 1 offset mid-commit)


@dataclass(frozen=True)
class _Planned:
    """A commit (or scan) the walk planned: its tasks in planner order and its units."""

    ordinal: int
    snapshot: Snapshot
    tasks: tuple[ChangeTask, ...]
    units: CommitUnits


@dataclass
class _StreamSchema:
    """What the stream fixed when it started: its schema, columns and change options."""

    schema: Schema  # the table schema when the stream started (+ v3 lineage fields)
    columns: tuple[str, ...]  # the table columns the stream emits
    options: ChangeOptions
    appends_only: bool
    last_column_id: int  # columns with greater ids were added after the stream started
    known: frozenset[int]  # the snapshots there were when it started (others came after)


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
        self.io = io or PyArrowFileIO(read.source.io_properties)
        # a metadata file never changes: nothing to watch
        self.watch = watch and not (read.source.location or "").endswith(".json")
        self._watcher: SnapshotWatcher | None = None
        self._stop_watcher: weakref.finalize | None = None
        self._token: int | None = None  # the watcher's token when _table was loaded
        self._table: Table | None = None
        self._stream: _StreamSchema | None = None
        # (snapshot id, scan?) -> the planned commits of the micro-batches in flight
        self._planned: dict[tuple[int, bool], _Planned] = {}
        self._warned: set[Any] = set()
        self.target: int | None = None  # AvailableNow: the snapshot to stop at
        self.pinned = False

    # -- the table -------------------------------------------------------------------------

    def load(self) -> Table:
        """The table at its newest metadata: the one loaded last while the watcher saw
        nothing, else the version hint, then the metadata file unless it is the one already
        loaded (metadata files never change)."""
        if self.pinned and self._table is not None:
            return self._table
        watcher = self.watcher
        if (self._table is not None and watcher is not None and self._token is not None
                and not watcher.changed_since(self._token)):
            # the watcher asks a catalog table's catalog every look: its FileIO carries the
            # freshest credentials there are
            self.io = self._table.io = watcher.io
            return self._table
        token = None if watcher is None else watcher.token  # before looking: no gap
        try:
            source = self.read.source
            located = locate_table(source, None if source.is_catalog_table else self.io)
            self.io = located.io  # a catalog's answer carries fresh credentials
            location = located.metadata_location
            if self._table is not None and self._table.metadata_location == location:
                self._table.io = self.io
                self._token = token
                return self._table
            seen = None if watcher is None else watcher.latest
            metadata = (seen.metadata if seen is not None and seen.metadata_location == location
                        else read_metadata(location, self.io))
            table = Table(location, metadata, self.io, source)
        except NoSuchTableError as error:
            raise NoSuchTableError(f"{error}: the table the stream reads has vanished; its "
                                "checkpoint keeps the last committed offset, so restoring "
                                "the table and restarting the query resumes there") from None
        if self._stream is None:
            self._stream = self._fix_schema(table)
        self._table = table
        self._token = token
        return table

    @property
    def watcher(self) -> SnapshotWatcher | None:
        """The table's watcher, started on first use (None when not watching, or while the
        table cannot be watched: then `load()` reads the file system each time)."""
        if self._watcher is None and self.watch:
            from meltwater.stream.watch.watcher import SnapshotWatcher  # watchdog: only to watch

            watcher = SnapshotWatcher(self.read.source, io=self.io, queue_size=0)
            try:
                watcher.start()
            except MeltwaterError:
                return None  # no table (yet): load() says so, and the next load tries again
            self._watcher = watcher
            # stop it with the stream, even if nobody calls close()
            self._stop_watcher = weakref.finalize(self, watcher.stop)
        return self._watcher

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

    def _fix_schema(self, table: Table) -> _StreamSchema:
        metadata = table.metadata
        current = metadata.current_snapshot_id
        feed = change_feed(table, RangeRequest.empty_at(current), self.read.rows)
        names = {f.name for f in feed.schema.fields}
        columns = tuple(c for c in self.columns if c not in METADATA_COLUMNS)
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise StreamError(f"columns {', '.join(unknown)} of the stream's schema are not "
                              f"columns of table {self.read.source} (it has "
                              f"{', '.join(sorted(names))})")
        return _StreamSchema(feed.schema, columns, feed.options, feed.appends_only,
                             metadata.last_column_id, frozenset(metadata.snapshots))

    @property
    def stream(self) -> _StreamSchema:
        """What the stream fixed when it started (schema, columns, change options), loaded on
        first use."""
        if self._stream is None:
            self.load()
        assert self._stream is not None
        return self._stream

    def pin_target(self) -> None:
        """Trigger.AvailableNow: stop at the newest snapshot there is now.

        A pinned stream never looks past its target, so it needs no watcher (nor the
        watchdog import and threads, which every AvailableNow query would pay again) and
        keeps the metadata it pinned: the snapshots up to the target never change."""
        self.watch = False
        self.close()
        self.target = self.load().metadata.current_snapshot_id
        self.pinned = True

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
        current = metadata.current_snapshot
        start: int | None
        if read.start is not None:
            start = resolve_start(table, read.start, skip_expired=read.skip_expired)
        elif current is None:
            return StreamOffset(None, complete=True)
        elif read.starting == "latest":
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
            if self._watcher is None or self._token is None:
                time.sleep(left)  # nothing watches (a metadata file): just do not spin
                break
            if not self._watcher.wait_changed(self._token, left):
                break
            end = self._latest_offset(start, budget)
        return end

    def _latest_offset(self, start: StreamOffset, budget: Budget) -> StreamOffset:
        table = self.load()
        metadata = table.metadata
        target = self.target if self.pinned else metadata.current_snapshot_id
        if target is None or (start.complete and start.snapshot_id == target):
            return start
        segments = self._segments(table, start, target)
        end = start
        if not start.complete and (not segments or segments[0].ordinal != start.ordinal):
            end = dataclasses.replace(start, complete=True)  # its expired rest is skipped
        spent = Cost()
        admitted = False
        for segment in segments:
            planned = self._plan(table, segment)
            tasks = planned.tasks
            if not segment.scan and not self._schema_ok(metadata, segment.snapshot, admitted):
                break
            # A version 1 offset's unfinished commit is finished in one part, as it read it.
            order = (range(len(tasks)) if segment.legacy
                     else planned.units.order)
            bounds = ((segment.begin, len(tasks)) if segment.legacy
                      else self._bounds(planned, segment.begin))
            cost = spent
            for index in order[segment.begin:]:
                cost += task_cost(tasks[index])
            if budget.fits(cost) or segment.legacy:
                spent = cost
                admitted = admitted or segment.begin < len(tasks)
                end = StreamOffset(segment.snapshot.snapshot_id, len(tasks), True,
                                   segment.scan, segment.ordinal)
                continue
            if admitted:
                break  # keep the commit whole: it starts the next micro-batch
            # Too big for one micro-batch: cut between units, at least one unit.
            stop = segment.begin
            for bound in bounds[1:]:
                unit = Cost()
                for index in order[stop:bound]:
                    unit += task_cost(tasks[index])
                if stop > segment.begin and not budget.fits(spent + unit):
                    break
                spent += unit
                stop = bound
            end = StreamOffset(segment.snapshot.snapshot_id, stop, stop == len(tasks),
                               segment.scan, segment.ordinal)
            break
        return end

    def _bounds(self, planned: _Planned, begin: int) -> tuple[int, ...]:
        """The unit bounds from `begin` on; `begin` must be one."""
        bounds = planned.units.bounds
        if begin not in bounds:
            raise OffsetError(
                f"table {self.read.source}: the checkpoint's position {begin} in snapshot "
                f"{planned.snapshot.snapshot_id} is not between two of its commit's units "
                "(was it written by another meltwater version?); start a new checkpoint")
        return bounds[bounds.index(begin):]

    def report_latest(self, last: StreamOffset | None) -> StreamOffset | None:
        """The offset at the end of the newest snapshot, for progress reports."""
        if last is None:
            return None
        table = self.load()
        current = table.metadata.current_snapshot
        if current is None or (last.complete and last.snapshot_id == current.snapshot_id):
            return last
        segments = self._segments(table, last, current.snapshot_id)
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
        table = self._table if self._knows(end) else self.load()
        assert table is not None
        segments = self._segments(table, start, end.snapshot_id, end_ordinal=end.ordinal)
        parts = []
        for segment in segments:
            planned = self._plan(table, segment)
            tasks = planned.tasks
            stop = len(tasks)
            ends_here = segment.snapshot.snapshot_id == end.snapshot_id and not end.complete
            if ends_here:
                stop = end.position
            if stop <= segment.begin:
                continue
            snapshot = segment.snapshot
            projection = self._projection(table.metadata, snapshot)
            commit = ChangeCommit(segment.ordinal, snapshot.snapshot_id,
                                  snapshot.sequence_number, snapshot.timestamp_ms,
                                  "scan" if segment.scan else snapshot.operation)
            if segment.legacy or (ends_here and end.legacy):
                # a micro-batch a version 1 offset ends: replayed as version 1 read it
                chosen = tuple(dataclasses.replace(t, commit=commit)
                               for t in tasks[segment.begin:stop])
                parts.append(CommitPart(CommitChanges(commit, chosen), projection,
                                        segment.begin, len(tasks)))
                continue
            parts.append(self._part(planned, commit, projection, segment.begin, stop))
        return parts

    def _part(self, planned: _Planned, commit: ChangeCommit, projection: Schema,
              begin: int, stop: int) -> CommitPart:
        """Positions [begin, stop) of a commit in unit order, as one part."""
        units = planned.units
        bounds = self._bounds(planned, begin)
        if stop not in bounds:
            self._bounds(planned, stop)  # raises, naming the position
        tasks = tuple(dataclasses.replace(t, commit=commit) for t in planned.tasks)
        indices = sorted(units.order[begin:stop])
        changes = CommitChanges(commit, tuple(tasks[i] for i in indices))
        split = None
        if stop - begin < len(tasks) and not units.one_way and self.options.pairs_updates:
            own = tuple(range(units.bounds.index(begin), units.bounds.index(stop)))
            split = CommitSplit(tasks, units.units, units.key_groups, own,
                                stop == len(tasks))
            if not split.units_to_compare():
                split = None  # nothing pairs across its bounds: a plain part
        return CommitPart(changes, projection, begin, len(tasks), split)

    def forget(self, end: StreamOffset) -> None:
        """Drop planned commits a committed offset is past."""
        for key, planned in list(self._planned.items()):
            ordinal = planned.ordinal
            if ordinal < end.ordinal or (ordinal == end.ordinal and end.complete):
                del self._planned[key]

    @property
    def options(self) -> ChangeOptions:
        """The change options the stream's rows are shaped by."""
        return self.stream.options

    def split_target(self) -> int:
        """Bytes per partition: option `split-size`, else the table's
        `read.split.target-size`, as Iceberg's reads."""
        if self.read.split_size is not None:
            return self.read.split_size
        table = self._table or self.load()
        return SplitOptions.of_table(table.metadata.properties).target_size

    # -- walking the lineage -----------------------------------------------------------------

    def _knows(self, offset: StreamOffset) -> bool:
        return (self._table is not None and offset.snapshot_id is not None
                and offset.snapshot_id in self._table.metadata.snapshots)

    def _segments(self, table: Table, start: StreamOffset, target: int | None, *,
                  end_ordinal: int | None = None) -> list[_Segment]:
        """The snapshots from `start` to `target`, oldest first: `start`'s own when it is
        unfinished, then every commit after it along `target`'s lineage."""
        metadata = table.metadata
        segments: list[_Segment] = []
        if not start.complete and start.snapshot_id is not None:
            cached = self._planned.get((start.snapshot_id, start.scan_all_files))
            snapshot = (cached.snapshot if cached is not None
                        else metadata.snapshots.get(start.snapshot_id))
            if snapshot is not None:
                segments.append(_Segment(snapshot, start.scan_all_files, start.ordinal,
                                         start.position, start.legacy))
            else:
                self._expired_start(start)  # raises unless expired snapshots are skipped
        if target is None or target == start.snapshot_id:
            return segments
        after = self._after(metadata, start.snapshot_id, target)
        first = start.ordinal + 1
        if end_ordinal is not None:
            first = end_ordinal - len(after) + 1
        segments.extend(_Segment(s, False, first + i, 0) for i, s in enumerate(after))
        return segments

    def _after(self, metadata: TableMetadata, start: int | None, target: int) -> list[Snapshot]:
        """The commits after `start` up to and including `target`, oldest first."""
        if target not in metadata.snapshots:
            raise ExpiredSnapshotsError(f"snapshot {target} of table {self.read.source} has "
                                   "expired before the stream read it")
        chain = metadata.ancestors(target)
        commits: list[Snapshot] = []
        for snapshot in chain:
            if snapshot.snapshot_id == start:
                break
            commits.append(snapshot)
        else:
            oldest = chain[-1]
            if start is not None and start in metadata.snapshots:
                raise InvalidRangeError(f"table {self.read.source}: the stream's snapshot "
                                        f"{start} is not an ancestor of snapshot {target} (was "
                                        "the table rolled back?); start a new checkpoint to "
                                        "follow the new history")
            if oldest.parent_id is not None and oldest.parent_id != start:
                since = "the table's first snapshot" if start is None else f"snapshot {start}"
                message = (f"table {self.read.source}: the snapshots after {since} up to "
                           f"{oldest.parent_id} have expired before the stream read them")
                if not self.read.skip_expired:
                    raise ExpiredSnapshotsError(f"{message}; set skip-expired-snapshots=true "
                                                f"to skip them and go on from snapshot "
                                                f"{oldest.snapshot_id}")
                self._warn(("expired", start, oldest.parent_id),
                           f"{message}; skipping them (skip-expired-snapshots=true)")
            elif start is not None and oldest.parent_id is None:
                raise InvalidRangeError(f"table {self.read.source}: the stream's snapshot "
                                        f"{start} is not an ancestor of snapshot {target}")
        commits.reverse()
        return commits

    def _expired_start(self, start: StreamOffset) -> None:
        message = (f"table {self.read.source}: snapshot {start.snapshot_id} expired before "
                   f"the stream finished reading it ({start.position} of its tasks read)")
        if not self.read.skip_expired:
            raise ExpiredSnapshotsError(f"{message}; set skip-expired-snapshots=true to skip the "
                                   "rest of it")
        self._warn(("expired", start.snapshot_id), f"{message}; skipping the rest of it")

    def _plan(self, table: Table, segment: _Segment) -> _Planned:
        """The snapshot's change tasks (or scan tasks) and units, planned once and cached."""
        snapshot = segment.snapshot
        key = (snapshot.snapshot_id, segment.scan)
        cached = self._planned.get(key)
        if cached is not None:
            return cached
        commit = ChangeCommit(segment.ordinal, snapshot.snapshot_id, snapshot.sequence_number,
                              snapshot.timestamp_ms, "scan" if segment.scan else
                              snapshot.operation)
        if segment.scan:
            scan = TableScan(table, snapshot_id=snapshot.snapshot_id)
            files = sorted(scan.plan_files(), key=lambda t: t.data_file.file_path)
            tasks: tuple[ChangeTask, ...] = tuple(
                AddedRowsTask(commit, t.data_file, t.sequence_number, t.deletes) for t in files)
        else:
            planner = IncrementalPlanner(table)
            tasks = planner.plan_commit(snapshot, segment.ordinal,
                                        appends_only=self.stream.appends_only).tasks
        options = self.stream.options
        identifiers = options.identifier_field_ids if options.pairs_updates else None
        planned = _Planned(segment.ordinal, snapshot, tasks,
                           commit_units(tasks, table.metadata.specs, identifiers or ()))
        self._planned[key] = planned
        return planned

    # -- schemas -----------------------------------------------------------------------------

    def _commit_schema(self, metadata: TableMetadata, snapshot: Snapshot) -> Schema:
        schema = metadata.schema_for(snapshot)
        if metadata.format_version >= 3 and not any(f.field_id in LINEAGE_IDS
                                                    for f in schema.fields):
            schema = Schema(schema.fields + LINEAGE_FIELDS, schema.schema_id,
                            schema.identifier_field_ids)
        return schema

    def _projection(self, metadata: TableMetadata, snapshot: Snapshot) -> Schema:
        """The schema to reconstruct a commit in: the commit's own columns (whole rows, so
        carry-over removal and pairing see every column), named as the stream names them,
        plus stream columns the commit's schema lacks (read as null)."""
        stream = self.stream.schema
        own = self._commit_schema(metadata, snapshot)
        by_id = {f.field_id: f for f in stream.fields}
        taken = {f.name for f in stream.fields}
        fields = []
        for f in own.fields:
            if f.field_id in by_id:
                fields.append(dataclasses.replace(f, name=by_id[f.field_id].name))
            elif f.name in taken:  # a column re-added under a stream column's name
                fields.append(dataclasses.replace(f, name=f"_{f.name}_{f.field_id}"))
            else:
                fields.append(f)
        present = {f.field_id for f in own.fields}
        fields.extend(dataclasses.replace(f, required=False) for f in stream.fields
                      if f.field_id not in present)
        return Schema(tuple(fields), own.schema_id, stream.identifier_field_ids)

    def _schema_ok(self, metadata: TableMetadata, snapshot: Snapshot, admitted: bool) -> bool:
        """Check a commit's schema against the stream's; False: end the batch before it."""
        stream = self.stream
        if snapshot.snapshot_id in stream.known:
            return True  # committed before the stream started: its schema is history
        own = self._commit_schema(metadata, snapshot)
        if own.schema_id == stream.schema.schema_id:
            return True
        wanted = {f.field_id: f for f in stream.schema.fields if f.name in stream.columns}
        added = [f.name for f in own.fields
                 if f.field_id > stream.last_column_id and f.field_id not in LINEAGE_IDS]
        present = {f.field_id: f for f in own.fields}
        dropped = [f.name for i, f in wanted.items() if i not in present]
        retyped = [f.name for i, f in wanted.items()
                   if i in present and present[i].type != f.type]
        if not (added or dropped or retyped):
            return True
        what = "; ".join(part for part in (
            f"columns added: {', '.join(added)}" if added else "",
            f"columns dropped: {', '.join(dropped)}" if dropped else "",
            f"columns changing type: {', '.join(retyped)}" if retyped else "") if part)
        where = (f"table {self.read.source} changed its schema at snapshot "
                 f"{snapshot.snapshot_id} ({what})")
        if self.read.schema_change == "fail":
            if admitted:
                return False  # deliver what came before the change first
            raise SchemaChangedError(
                f"{where}, and the stream's schema is fixed when it starts "
                "(schema-change=fail): restart the query to read the new schema (its "
                f"checkpoint resumes at snapshot {snapshot.snapshot_id}), or set "
                "schema-change=project to project new columns away")
        self._warn(("schema", own.schema_id),
                   f"{where}; the stream keeps the schema it started with: new columns are "
                   "projected away, dropped ones read as null, retyped ones are cast "
                   "(restart the query to read the new schema)")
        return True

    def _warn(self, key: Any, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)
