"""What one micro-batch of a change stream reads: budgets, costs, commit parts, packing.

The Spark-free, I/O-free half of a streaming source's reading. How far a micro-batch goes
is a `Budget` of files, rows and bytes spent by each change task's `task_cost`; what it
reads is a list of `CommitPart`s, slices of commits cut only between units
(`meltwater.planner.changes.commit_units`), which `pack_parts` groups into Spark
partitions of about equal bytes. Where a stream is, its offset, is the stream's own
(`meltwater.stream.watch.stream_offsets`, which explains offsets and splitting in full);
`meltwater.stream.watch.change_stream` walks a table's history with both.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass

from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeTask,
    CommitChanges,
    DeletedRowsTask,
    EqualityDeletedRowsTask,
)
from meltwater.planner.changes.commit_units import CommitSplit, is_one_way
from meltwater.planner.scans.splitting import (
    DEFAULT_OPEN_FILE_COST,
    DEFAULT_TARGET_SIZE,
    pack_in_order,
)
from meltwater.planner.scans.tasks import DeleteFileRef
from meltwater.planner.spec.types import Schema

# -- budgets -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """What reading some tasks costs: data files, their rows, and bytes with deletes."""

    files: int = 0
    rows: int = 0
    bytes: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.files + other.files, self.rows + other.rows,
                    self.bytes + other.bytes)


def _delete_bytes(refs: Sequence[DeleteFileRef]) -> int:
    seen: dict[tuple[str, int | None], int] = {}
    for ref in refs:
        file = ref.file
        size = file.content_size_in_bytes or file.file_size_in_bytes
        seen[file.key] = size
    return sum(seen.values())


def task_cost(task: ChangeTask) -> Cost:
    """The files a task reads, the rows it may change (a data file's rows; the keys of an
    equality change), and the bytes it may read (with those of its delete files)."""
    if isinstance(task, EqualityDeletedRowsTask):
        # Found by key: its rows are about its keys, not the rows of the files it may
        # reach, of which it reads the key columns and the row groups where a key matched
        # (with many keys, most of them: their bytes bound it).
        changed = task.equality.added + task.equality.removed
        return Cost(len(changed), sum(ref.file.record_count for ref in changed),
                    sum(ref.file.file_size_in_bytes for ref in task.candidates)
                    + _delete_bytes(changed))
    deletes: Sequence[DeleteFileRef]
    if isinstance(task, DeletedRowsTask):
        deletes = task.deletes_before + task.deletes_after
    elif isinstance(task, AddedRowsTask):
        deletes = task.deletes
    else:
        deletes = task.existing_deletes
    data = task.data_file
    return Cost(1, data.record_count, data.file_size_in_bytes + _delete_bytes(deletes))



@dataclass(frozen=True)
class Budget:
    """How much one micro-batch may read; None: no limit of that kind."""

    max_files: int | None = None
    max_rows: int | None = None
    max_bytes: int | None = None

    def fits(self, cost: Cost) -> bool:
        """Whether reading something of this cost stays within every limit."""
        return ((self.max_files is None or cost.files <= self.max_files)
                and (self.max_rows is None or cost.rows <= self.max_rows)
                and (self.max_bytes is None or cost.bytes <= self.max_bytes))


UNLIMITED = Budget()


# -- commit parts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitPart:
    """Tasks [first_task, first_task + len(changes.tasks)) of one commit's `task_count`
    (positions in unit order; the tasks themselves in planner order), with the schema to
    reconstruct them in and, for a part of a commit whose updates may pair across parts,
    the `pairing` context to hold them back with: everything an executor needs, picklable."""

    changes: CommitChanges
    projection: Schema
    first_task: int
    task_count: int
    pairing: CommitSplit | None = None
    # (share, shares): only the rows of one share of the commit's changed keys (see
    # `key_shares`); None: every row
    share: tuple[int, int] | None = None

    @property
    def whole(self) -> bool:
        """Whether the part holds all of its commit's tasks."""
        return self.first_task == 0 and len(self.changes.tasks) == self.task_count

    @property
    def one_way(self) -> bool:
        """Whether the tasks only add or only remove rows and hold nothing back for a
        later part: then no row of one task can cancel or pair with a row of another, and
        the part splits freely."""
        return self.pairing is None and is_one_way(self.changes.tasks)

    @property
    def cost(self) -> Cost:
        """What reading the part's tasks costs."""
        total = Cost()
        for task in self.changes.tasks:
            total += task_cost(task)
        return total

    @property
    def shareable(self) -> bool:
        """Whether the part may be read in shares of its keys (`key_shares`): a whole
        commit whose rows change only by equality deletes of one set of key columns and
        by added files, as upsert and CDC jobs commit, so every row a key's changes are
        compared with has that key."""
        tasks = self.changes.tasks
        found = [t for t in tasks if isinstance(t, EqualityDeletedRowsTask)]
        if not self.whole or self.pairing is not None or self.share is not None \
                or len(found) != 1 or self.changes.spanned:
            return False
        change = found[0].equality
        ids = {tuple(r.file.equality_ids or ()) for r in change.added + change.removed}
        top = {f.field_id for f in self.projection.fields}
        return (len(ids) == 1 and set(next(iter(ids))) <= top
                and all(isinstance(t, (AddedRowsTask, EqualityDeletedRowsTask)) for t in tasks))

    def key_shares(self, count: int) -> list[CommitPart]:
        """The part as `count` parts each reading one share of the commit's keys
        (`meltwater.stream.engine.changes.equality_changes.KeyShare`: a key goes with the largest
        older file holding it, the files dealt to the shares by size, so each file's rows
        are read whole by one share). Every reader shares the keys alike, so each key's
        rows, deleted and added, are in one share, where carry-over removal and update
        pairing compare them; the shares together are the commit. Each share reads every
        candidate's key columns and only its own rows."""
        return [dataclasses.replace(self, share=(index, count)) for index in range(count)]

    def split(self, target_bytes: int) -> list[CommitPart]:
        """Consecutive pieces of about `target_bytes` (only for `one_way` parts)."""
        pieces: list[CommitPart] = []
        tasks = self.changes.tasks
        begin, size = 0, 0
        for index, task in enumerate(tasks):
            weight = task_cost(task).bytes
            if index > begin and size + weight > target_bytes:
                pieces.append(self._slice(begin, index))
                begin, size = index, 0
            size += weight
        pieces.append(self._slice(begin, len(tasks)))
        return pieces

    def _slice(self, begin: int, end: int) -> CommitPart:
        return CommitPart(CommitChanges(self.changes.commit, self.changes.tasks[begin:end]),
                          self.projection, self.first_task + begin, self.task_count)


def pack_parts(parts: Sequence[CommitPart], target_bytes: int = DEFAULT_TARGET_SIZE,
               parallelism: int | None = None) -> list[list[CommitPart]]:
    """Group a micro-batch's parts into partitions of about equal bytes, in order.

    A part is never split unless it is `one_way`: carry-over removal and update pairing
    need its tasks together. An upsert commit is not cut into `key_shares` here, as a
    batch change read cuts it: a stream's executors would each keep the lookups of
    whichever shares reached them, and each share pays them again (bench/README.md has
    the service's commit-to-mirror latency both ways).
    A micro-batch smaller than `parallelism` targets is spread over at least `parallelism`
    partitions (as Spark sizes file splits), or one core would read nearly all of it; the
    packing itself is `splitting.pack_in_order`.
    """
    costs = [part.cost.bytes for part in parts]  # a part's cost sums its tasks': once
    total = sum(costs)
    cores = parallelism or max(2, os.cpu_count() or 2)
    target = min(target_bytes, max(DEFAULT_OPEN_FILE_COST, -(-total // cores)))
    pieces: list[CommitPart] = []
    weights: list[int] = []
    for part, cost in zip(parts, costs, strict=True):
        if part.one_way and cost > target and len(part.changes.tasks) > 1:
            for piece in part.split(target):
                pieces.append(piece)
                weights.append(piece.cost.bytes)
        else:
            pieces.append(part)
            weights.append(cost)
    count = min(len(pieces), max(1, -(-total // target)))
    return [[pieces[i] for i in group]
            for group in pack_in_order(weights, target_bytes, count)]
