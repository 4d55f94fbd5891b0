"""The commit parts a micro-batch between two offsets reads (`segment_part`), cut only
between units; what an offset means and why cutting a commit never changes its rows is
`stream_offsets`'.
"""


from __future__ import annotations

import dataclasses

from meltwater.planner.changes.change_tasks import ChangeCommit, CommitChanges
from meltwater.planner.changes.commit_units import CommitSplit
from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.errors import OffsetError
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.watch.plan_cache import PlannedCommit
from meltwater.stream.watch.stream_lineage import Segment
from meltwater.stream.watch.stream_offsets import StreamOffset


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
