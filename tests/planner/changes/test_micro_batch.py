"""planner/changes/micro_batch.py: what a task costs against a budget, commit parts and how
they are packed into Spark partitions (offsets: watch_tests/test_stream_offsets.py).

Tasks are built by hand with sizes chosen so that every expectation can be worked out in
the test. Reading a whole stream under budgets, resuming from version 1 checkpoints
included, is checked against the corpus in watch_tests/test_rate_limits.py.
"""

from __future__ import annotations

import pytest

from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    CommitChanges,
    DeletedDataFileTask,
    DeletedRowsTask,
)
from meltwater.planner.changes.commit_units import CommitSplit
from meltwater.planner.changes.micro_batch import (
    UNLIMITED,
    Budget,
    CommitPart,
    Cost,
    pack_parts,
    task_cost,
)
from meltwater.planner.scans.tasks import DeleteFileRef
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.types import Schema

MB = 1024 * 1024
COMMIT = ChangeCommit(0, 7001, 3, 1_700_000_000_000, "overwrite")
SCHEMA = Schema(())


def data(name: str, size: int, records: int = 10) -> DataFile:
    return DataFile(FileContent.DATA, f"/t/data/{name}", "PARQUET", 0, (), records, size)


def position_delete(name: str, size: int) -> DeleteFileRef:
    return DeleteFileRef(DataFile(FileContent.POSITION_DELETES, f"/t/data/{name}", "PARQUET",
                                  0, (), 2, size), 3)


def deletion_vector(puffin: str, offset: int, length: int, puffin_size: int) -> DeleteFileRef:
    return DeleteFileRef(DataFile(FileContent.POSITION_DELETES, f"/t/data/{puffin}", "PUFFIN",
                                  0, (), 2, puffin_size, content_offset=offset,
                                  content_size_in_bytes=length), 3)


def added(name: str, size: int, records: int = 10, commit: ChangeCommit = COMMIT
          ) -> AddedRowsTask:
    return AddedRowsTask(commit, data(name, size, records), 3)


def removed(name: str, size: int, commit: ChangeCommit = COMMIT) -> DeletedDataFileTask:
    return DeletedDataFileTask(commit, data(name, size), 2)


def part(*tasks, first_task: int = 0, task_count: int | None = None,
         pairing: CommitSplit | None = None) -> CommitPart:
    commit = tasks[0].commit
    return CommitPart(CommitChanges(commit, tasks), SCHEMA, first_task,
                      len(tasks) if task_count is None else task_count, pairing)


def paths(groups) -> list[list[list[str]]]:
    return [[[t.data_file.file_path.rsplit("/", 1)[1] for t in p.changes.tasks] for p in g]
            for g in groups]


# -- costs and budgets -----------------------------------------------------------------------


def test_a_task_costs_its_data_file_and_the_delete_files_it_reads():
    d1, d2 = position_delete("d1", 3 * MB), position_delete("d2", 5 * MB)
    assert task_cost(added("a", 10 * MB, 100)) == Cost(1, 100, 10 * MB)
    assert task_cost(AddedRowsTask(COMMIT, data("b", 10 * MB, 7), 3, (d1,))) == Cost(
        1, 7, 13 * MB)
    assert task_cost(DeletedDataFileTask(COMMIT, data("c", MB, 5), 2, (d1, d2))) == Cost(
        1, 5, 9 * MB)
    # Before and after share d1: it is read once.
    rows = DeletedRowsTask(COMMIT, data("e", 2 * MB, 50), 2, (d1,), (d1, d2), (d2,))
    assert task_cost(rows) == Cost(1, 50, 10 * MB)


def test_a_deletion_vector_costs_its_blob_not_its_puffin_file():
    """Two DVs in one 9 MB Puffin file, at different offsets: each costs its own blob."""
    first = deletion_vector("dv.puffin", 4, 1000, 9 * MB)
    second = deletion_vector("dv.puffin", 1004, 3000, 9 * MB)
    task = DeletedRowsTask(COMMIT, data("f", MB, 10), 2, (first,), (first, second), (second,))
    assert task_cost(task) == Cost(1, 10, MB + 4000)


def test_costs_add_up():
    assert Cost(1, 10, 100) + Cost(2, 5, 50) == Cost(3, 15, 150)
    assert sum((Cost(1, 1, 1) for _ in range(4)), Cost()) == Cost(4, 4, 4)


@pytest.mark.parametrize(("budget", "fits", "over"), [
    (Budget(max_files=3), Cost(3, 10**9, 10**12), Cost(4, 0, 0)),
    (Budget(max_rows=100), Cost(10**6, 100, 10**12), Cost(0, 101, 0)),
    (Budget(max_bytes=MB), Cost(10**6, 10**9, MB), Cost(0, 0, MB + 1)),
    (Budget(2, 20, 200), Cost(2, 20, 200), Cost(2, 20, 201)),
])
def test_a_budget_limits_each_kind_it_names(budget, fits, over):
    assert budget != UNLIMITED
    assert budget.fits(fits)
    assert not budget.fits(over)


def test_the_unlimited_budget_fits_anything():
    assert Budget() == UNLIMITED
    assert UNLIMITED.fits(Cost(10**9, 10**18, 10**18))


# -- commit parts ----------------------------------------------------------------------------


def test_a_part_knows_whether_it_is_its_whole_commit():
    tasks = [added(f"a{i}", MB) for i in range(4)]
    assert part(*tasks).whole
    assert not part(*tasks[:2], task_count=4).whole
    assert not part(*tasks[2:], first_task=2, task_count=4).whole
    assert part(*tasks).cost == Cost(4, 40, 4 * MB)


def test_only_parts_that_add_only_or_remove_only_are_one_way():
    assert part(added("a", MB), added("b", MB)).one_way
    assert part(removed("a", MB), removed("b", MB)).one_way
    assert not part(added("a", MB), removed("b", MB)).one_way  # a rewrite: may carry over
    held = CommitSplit((), (), (), (0,), last=False)
    assert not part(added("a", MB), added("b", MB), pairing=held).one_way


def test_splitting_a_part_keeps_its_tasks_in_order_and_its_commit_positions():
    """Tasks of 3, 3, 3, 5, 1, 1, 8 MB cut for 6 MB: 3+3 | 3 (3+5 would pass) | 5+1 | 1 | 8."""
    sizes = [3, 3, 3, 5, 1, 1, 8]
    whole = part(*[added(f"t{i}", s * MB) for i, s in enumerate(sizes)], first_task=10,
                 task_count=30)
    pieces = whole.split(6 * MB)
    assert [[t.data_file.file_size_in_bytes // MB for t in p.changes.tasks] for p in pieces] \
        == [[3, 3], [3], [5, 1], [1], [8]]
    assert [p.first_task for p in pieces] == [10, 12, 13, 15, 16]
    assert {p.task_count for p in pieces} == {30}
    assert [t for p in pieces for t in p.changes.tasks] == list(whole.changes.tasks)
    assert all(p.changes.commit == COMMIT and p.projection == SCHEMA for p in pieces)


def test_a_small_batch_is_spread_over_the_cores():
    """One one-way commit of 8 tasks of 4 MB on 4 cores: the target drops from 128 MB to
    32 MB / 4 = 8 MB, so 4 partitions of 2 tasks each, in order."""
    commit = part(*[added(f"t{i}", 4 * MB) for i in range(8)])
    groups = pack_parts([commit], parallelism=4)
    assert paths(groups) == [[["t0", "t1"]], [["t2", "t3"]], [["t4", "t5"]], [["t6", "t7"]]]
    assert [g[0].first_task for g in groups] == [0, 2, 4, 6]


def test_a_part_that_may_carry_over_or_pair_is_never_split():
    rewrite = part(added("new", 300 * MB), removed("old", 300 * MB), added("n2", 300 * MB))
    assert pack_parts([rewrite], target_bytes=1) == [[rewrite]]
    assert pack_parts([rewrite], parallelism=64) == [[rewrite]]
    held = part(added("a", 300 * MB), added("b", 300 * MB),
                pairing=CommitSplit((), (), (), (0,), last=False))
    assert pack_parts([held], target_bytes=1, parallelism=8) == [[held]]


def test_packing_keeps_commit_order_across_parts():
    """A rewrite (kept whole), a one-way commit of six 40 MB appends and a small append:
    with a 64 MB target the appends are cut 1 per piece, and reading the partitions in
    order reads the commits' tasks in order."""
    first = ChangeCommit(0, 1, 1, 1, "overwrite")
    second = ChangeCommit(1, 2, 2, 2, "append")
    third = ChangeCommit(2, 3, 3, 3, "append")
    parts = [part(added("r-new", 50 * MB, commit=first), removed("r-old", 50 * MB, commit=first)),
             part(*[added(f"a{i}", 40 * MB, commit=second) for i in range(6)]),
             part(added("s", MB, commit=third))]
    groups = pack_parts(parts, target_bytes=64 * MB, parallelism=2)
    read = [t.data_file.file_path.rsplit("/", 1)[1]
            for g in groups for p in g for t in p.changes.tasks]
    assert read == ["r-new", "r-old", *[f"a{i}" for i in range(6)], "s"]
    pieces = [p for g in groups for p in g]
    assert [p.changes.commit.ordinal for p in pieces] == sorted(
        p.changes.commit.ordinal for p in pieces)
    assert pieces[0] is parts[0]  # the rewrite whole
    assert [p.first_task for p in pieces if p.changes.commit == second] == list(range(6))
    for group in groups:  # no partition passes the target but for a single part
        assert len(group) == 1 or sum(p.cost.bytes for p in group) <= 64 * MB


def test_nothing_to_read_packs_into_nothing():
    assert pack_parts([]) == []
