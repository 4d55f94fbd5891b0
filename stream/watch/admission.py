"""How far a change stream's next micro-batch goes: commits admitted against its budget.

`latest_offset(start, budget)` walks the lineage from `start` to the newest snapshot
(`meltwater.stream.watch.stream_lineage`) and plans commits one at a time until the budget
(files, rows, bytes; `meltwater.planner.changes.micro_batch.Budget`) is spent. A commit that fits
the budget is kept whole (the batch ends before it rather than splitting it); only a
commit bigger than the budget is split, between its units, and a batch always takes at
least one unit, even one bigger than the budget, so a stream never stalls. A commit whose
schema the stream does not take (`schema-change=fail`) ends the batch before it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from meltwater.planner.changes.micro_batch import Budget, Cost, task_cost
from meltwater.planner.table.metadata import Snapshot
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.watch.offset_parts import unit_bounds
from meltwater.stream.watch.plan_cache import PlannedCommit
from meltwater.stream.watch.stream_lineage import Segment
from meltwater.stream.watch.stream_offsets import StreamOffset


def admit(start: StreamOffset, segments: Sequence[Segment], budget: Budget, *,
          plan: Callable[[Segment], PlannedCommit],
          schema_ok: Callable[[Snapshot, bool], bool],
          source: TableSource) -> StreamOffset:
    """The end of the micro-batch from `start` over `segments` (the snapshots after it,
    oldest first): as many whole commits as fit `budget`, or a first commit cut between
    units. `plan` plans a segment; `schema_ok(snapshot, admitted)` says whether a commit's
    schema lets the batch go on (False: end it before)."""
    end = start
    if not start.complete and (not segments or segments[0].ordinal != start.ordinal):
        end = dataclasses.replace(start, complete=True)  # its expired rest is skipped
    spent = Cost()
    admitted = False
    for segment in segments:
        planned = plan(segment)
        tasks = planned.tasks
        if not segment.scan and not schema_ok(segment.snapshot, admitted):
            break
        # A version 1 offset's unfinished commit is finished in one part, as it read it.
        order = range(len(tasks)) if segment.legacy else planned.units.order
        bounds = ((segment.begin, len(tasks)) if segment.legacy
                  else unit_bounds(planned, segment.begin, source))
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
