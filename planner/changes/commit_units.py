"""Where one commit's change tasks may be cut apart: its units.

A rate-limited stream reads a huge commit in several parts. Carry-over removal cancels a
row DELETEd and re-INSERTed unchanged by the commit, so the two copies must be read in the
same part: a *unit* is a set of tasks no row can be shared across, and parts are cut only
between units. Rows are placed by partition: every partition field is a function of the
row, so two files of one spec in different partitions never hold the same row. Files of
different specs (partition evolution: a copy-on-write rewrite may write a row's new copy
under the new spec) are told apart only by the fields both specs share (same source
column, same transform) when their values differ: the spec forbids promoting a partition
source column when that would change a transform's value, so equal rows have equal values
there. With no such field (or with values of different kinds, which the spec's rules do
not allow) they are kept together. Tasks that apply one added equality delete file stay
together too, so its rows (`trust-payload`) are emitted once. A commit that only adds or
only removes rows cancels nothing, so each of its tasks is a unit of its own.

Units depend only on the commit's manifests and the table's specs, never on the stream's
options, so a checkpointed position (a task count in unit order) means the same tasks
whatever options a restarted query passes.

Update pairing matches a DELETE and an INSERT by key, and keys may cross partitions (an
update moving a row, or `_row_id`), so units are also grouped into *key groups*: units
that may hold a common key, judged the same way by the partition fields whose source is
an identifier field. Units of different key groups never pair; within one, the stream
holds rows back until the commit's last part (`meltwater.stream.engine.changes.held_changes`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeTask,
    DeletedRowsTask,
    EqualityDeletedRowsTask,
)
from meltwater.planner.spec.partitioning import PartitionSpec


def is_one_way(tasks: Sequence[ChangeTask]) -> bool:
    """Whether the tasks only add or only remove rows: then no row of one task can cancel
    or pair with a row of another (a DeletedRowsTask whose old deletes no longer all apply
    could also re-insert rows)."""
    if all(isinstance(t, AddedRowsTask) for t in tasks):
        return True
    return not any(isinstance(t, AddedRowsTask) for t in tasks) and all(
        not isinstance(t, (DeletedRowsTask, EqualityDeletedRowsTask)) or not t.may_undelete
        for t in tasks)


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def union_all(self, members: Sequence[int]) -> None:
        for other in members[1:]:
            self.union(members[0], other)


@dataclass(frozen=True)
class CommitSplit:
    """What one part of a commit read in several parts must know of the whole commit to
    pair updates across parts (`meltwater.stream.engine.changes.held_changes`): plain,
    picklable data."""

    tasks: tuple[ChangeTask, ...]  # the commit's tasks, in planner order
    units: tuple[tuple[int, ...], ...]  # `CommitUnits.units`
    key_groups: tuple[int, ...]  # `CommitUnits.key_groups`
    own: tuple[int, ...]  # the units this part reads
    last: bool  # the part ends the commit: it emits every row held back

    def units_to_compare(self) -> list[int]:
        """The units whose keys this part must know: those of its own units' key groups
        (every key group, for the last part) that hold more than one unit. Empty: nothing
        can pair across the part's bounds."""
        sizes: dict[int, int] = {}
        for group in self.key_groups:
            sizes[group] = sizes.get(group, 0) + 1
        groups = self.key_groups if self.last else [self.key_groups[u] for u in self.own]
        wanted = {g for g in groups if sizes[g] > 1}
        return [u for u, group in enumerate(self.key_groups) if group in wanted]


@dataclass(frozen=True)
class CommitUnits:
    """A commit's units (planner task indices, each unit ascending, units ordered by their
    first task) and each unit's key group (equal numbers may share a key)."""

    units: tuple[tuple[int, ...], ...]
    key_groups: tuple[int, ...]
    one_way: bool

    @property
    def order(self) -> tuple[int, ...]:
        """Planner task indices in unit order: what stream positions count."""
        return tuple(i for unit in self.units for i in unit)

    @property
    def bounds(self) -> tuple[int, ...]:
        """Positions where a part may start or end: 0, each unit's end."""
        ends = [0]
        for unit in self.units:
            ends.append(ends[-1] + len(unit))
        return tuple(ends)


def commit_units(tasks: Sequence[ChangeTask], specs: dict[int, PartitionSpec],
                 identifier_ids: Collection[int] = ()) -> CommitUnits:
    """The units of a commit's tasks (in planner order) and their key groups."""
    n = len(tasks)
    if n <= 1 or is_one_way(tasks):
        return CommitUnits(tuple((i,) for i in range(n)), tuple(range(n)), True)
    rows = _UnionFind(n)
    groups: dict[tuple[int, tuple[Any, ...]], list[int]] = {}
    for index, task in enumerate(tasks):
        for key in _partition_keys(task):
            groups.setdefault(key, []).append(index)
    for members in groups.values():
        rows.union_all(members)
    _join_groups(rows, groups, specs, None)
    # The tasks an equality delete the commit changed reaches stay together, so its rows
    # (`trust-payload`) are emitted once.
    rows.union_all([index for index, task in enumerate(tasks)
                    if isinstance(task, EqualityDeletedRowsTask)
                    or (isinstance(task, DeletedRowsTask) and task.equality is not None)])
    # Key groups: a coarser relation over the same groups, only key-sourced fields count.
    keys = _UnionFind(n)
    for index in range(n):
        keys.union(index, rows.find(index))
    for members in groups.values():
        keys.union_all(members)
    _join_groups(keys, groups, specs, frozenset(identifier_ids))
    roots: dict[int, list[int]] = {}
    for index in range(n):
        roots.setdefault(rows.find(index), []).append(index)
    units = tuple(sorted(tuple(members) for members in roots.values()))
    key_roots: dict[int, int] = {}
    key_groups = tuple(key_roots.setdefault(keys.find(unit[0]), len(key_roots))
                       for unit in units)
    return CommitUnits(units, key_groups, False)


def _partition_keys(task: ChangeTask) -> list[tuple[int, tuple[Any, ...]]]:
    """The (spec, partition) keys of the data files a task reads."""
    if isinstance(task, EqualityDeletedRowsTask):
        return list(dict.fromkeys(ref.file.partition_key for ref in task.candidates))
    return [task.data_file.partition_key]


def _join_groups(found: _UnionFind, groups: dict[tuple[int, tuple[Any, ...]], list[int]],
                 specs: dict[int, PartitionSpec], sources: frozenset[int] | None) -> None:
    """Union the (spec, partition) groups that may hold a common row (`sources` None) or
    a common key (fields whose source is in `sources`)."""
    by_spec: dict[int, list[tuple[tuple[Any, ...], int]]] = {}
    for (spec_id, partition), members in groups.items():
        by_spec.setdefault(spec_id, []).append((partition, members[0]))
    spec_ids = sorted(by_spec)
    for i, first in enumerate(spec_ids):
        for second in spec_ids[i:]:
            if first == second and sources is None:
                continue  # one spec: equal partitions are one group already, others differ
            common = _common_fields(specs.get(first), specs.get(second), sources)
            if common is None:  # an unknown spec: nothing can be told apart
                found.union_all([m for s in (first, second) for _, m in by_spec[s]])
                continue
            if any(pair[side] >= len(partition) for spec_id, side in ((first, 0), (second, 1))
                   for partition, _ in by_spec[spec_id] for pair in common):
                found.union_all([m for s in (first, second) for _, m in by_spec[s]])
                continue  # a partition tuple shorter than its spec: nothing is told apart
            if first != second:
                # A field whose values differ in kind between the specs (a source column
                # promoted, say date to timestamp) tells nothing apart: leave it out.
                common = [pair for pair in common if len({
                    type(partition[pair[side]]) for spec_id, side in ((first, 0), (second, 1))
                    for partition, _ in by_spec[spec_id]
                    if partition[pair[side]] is not None}) <= 1]
            buckets: dict[tuple[Any, ...], list[int]] = {}
            for spec_id, side in ((first, 0), (second, 1)):
                for partition, member in by_spec[spec_id]:
                    value = tuple(partition[pair[side]] for pair in common)
                    buckets.setdefault(value, []).append(member)
            for members in buckets.values():
                found.union_all(members)


def _common_fields(first: PartitionSpec | None, second: PartitionSpec | None,
                   sources: frozenset[int] | None) -> list[tuple[int, int]] | None:
    """Positions (in each spec) of the fields both specs compute the same way from the
    same column: equal rows have equal values there."""
    if first is None or second is None:
        return None
    common = []
    for i, a in enumerate(first.fields):
        if a.transform == "void" or (sources is not None and a.source_id not in sources):
            continue
        for j, b in enumerate(second.fields):
            if (b.source_id, b.transform) == (a.source_id, a.transform):
                common.append((i, j))
                break
    return common
