"""What a change stream's offset means, and the commit parts between two offsets.

A stream's position is a `StreamOffset`, stored by Spark in the query's checkpoint as JSON,
the way Iceberg's own `StreamingOffset` is::

    {"version": 2, "snapshot_id": 5140426932827412781, "position": 3, "complete": false,
     "scan_all_files": false, "ordinal": 2}

reads "every commit before snapshot 5140... along the table's lineage, and the first 3
tasks of that snapshot's commit, have been read". The tasks are the incremental planner's
change tasks of the commit (`IncrementalPlanner.plan_commit`) in *unit order*
(`meltwater.planner.changes.commit_units`), a function of the commit's immutable manifests and the
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

**Splitting a commit never changes its rows.** The union of a limited stream's
micro-batches is the unlimited feed, row for row:

- Carry-over removal compares a commit's DELETEs with its INSERTs, and the two copies of
  a row rewritten unchanged are in one unit (a partition, across specs whatever no shared
  partition field tells apart; see `meltwater.planner.changes.commit_units`), so cutting between
  units never separates them. A commit that only adds or only removes rows cancels
  nothing: each of its tasks is a unit, and the Spark source also spreads such commits
  over partitions.
- Update pairing matches a DELETE and an INSERT by key, and a key may cross units (an
  update moving a row to another partition, pairing by `_row_id`). A part of such a commit
  carries the commit's tasks (`CommitPart.pairing`); it holds back the rows whose key
  another unit also has, and the commit's last part emits them, paired over the whole
  commit (`meltwater.stream.engine.changes.held_changes`). The held rows are *recomputed*,
  not stored: each part re-reads the key columns of its units' key group, the last part the rows it
  emits, all from immutable files. A checkpoint therefore holds nothing but the offset
  (bounded, whatever the commit), a replayed micro-batch emits exactly the same rows, and
  a driver killed mid-batch loses or duplicates nothing: Spark replays the batch's
  offsets, which determine its rows. The price is reading: every part of such a commit
  reads the key columns of its key group, the last part also the held units' rows.
"""

from __future__ import annotations

import dataclasses

from meltwater.planner.changes.change_tasks import ChangeCommit, CommitChanges
from meltwater.planner.changes.commit_units import CommitSplit
from meltwater.planner.changes.micro_batch import CommitPart, StreamOffset
from meltwater.planner.errors import OffsetError
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.watch.plan_cache import PlannedCommit
from meltwater.stream.watch.stream_lineage import Segment


def unit_bounds(planned: PlannedCommit, begin: int, source: TableSource) -> tuple[int, ...]:
    """The unit bounds of a planned commit from `begin` on; `begin` must be one (an offset
    of this version only ever stops between units)."""
    bounds = planned.units.bounds
    if begin not in bounds:
        raise OffsetError(
            f"table {source}: the checkpoint's position {begin} in snapshot "
            f"{planned.snapshot.snapshot_id} is not between two of its commit's units "
            "(was it written by another meltwater version?); start a new checkpoint")
    return bounds[bounds.index(begin):]


def segment_part(planned: PlannedCommit, segment: Segment, end: StreamOffset,
                 projection: Schema, *, pairs_updates: bool,
                 source: TableSource) -> CommitPart | None:
    """The part of a segment's commit a micro-batch ending at `end` reads (None: nothing):
    from the segment's first unread task up to `end`'s position when the micro-batch ends
    inside this commit, else to the commit's end."""
    tasks = planned.tasks
    snapshot = segment.snapshot
    stop = len(tasks)
    ends_here = snapshot.snapshot_id == end.snapshot_id and not end.complete
    if ends_here:
        stop = end.position
    if stop <= segment.begin:
        return None
    commit = ChangeCommit(segment.ordinal, snapshot.snapshot_id, snapshot.sequence_number,
                          snapshot.timestamp_ms, "scan" if segment.scan else snapshot.operation)
    if segment.legacy or (ends_here and end.legacy):
        # a micro-batch a version 1 offset ends: replayed as version 1 read it
        chosen = tuple(dataclasses.replace(t, commit=commit)
                       for t in tasks[segment.begin:stop])
        return CommitPart(CommitChanges(commit, chosen), projection, segment.begin,
                          len(tasks))
    return _unit_part(planned, commit, projection, segment.begin, stop,
                      pairs_updates=pairs_updates, source=source)


def _unit_part(planned: PlannedCommit, commit: ChangeCommit, projection: Schema,
               begin: int, stop: int, *, pairs_updates: bool,
               source: TableSource) -> CommitPart:
    """Positions [begin, stop) of a commit in unit order, as one part."""
    units = planned.units
    unit_bounds(planned, begin, source)
    if stop not in units.bounds:
        unit_bounds(planned, stop, source)  # raises, naming the position
    tasks = tuple(dataclasses.replace(t, commit=commit) for t in planned.tasks)
    indices = sorted(units.order[begin:stop])
    changes = CommitChanges(commit, tuple(tasks[i] for i in indices))
    split = None
    if stop - begin < len(tasks) and not units.one_way and pairs_updates:
        own = tuple(range(units.bounds.index(begin), units.bounds.index(stop)))
        split = CommitSplit(tasks, units.units, units.key_groups, own, stop == len(tasks))
        if not split.units_to_compare():
            split = None  # nothing pairs across its bounds: a plain part
    return CommitPart(changes, projection, begin, len(tasks), split)
