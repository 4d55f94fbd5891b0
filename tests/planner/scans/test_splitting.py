"""planner/scans/splitting.py: a table's `read.split.*` properties, cutting files at their split
offsets, bin-packing tasks by weight (open-file cost included), and packing in order for
micro-batches.

Tasks are built by hand: every expectation is worked out from the offsets, sizes and
weights in the test itself, by the rules Iceberg Java's TableScanUtil states (a task weighs
max(its bytes, files it opens * open-file cost); a task goes to the first open group it
fits, among at most `lookback` open groups).
"""

from __future__ import annotations

import pytest

from meltwater.planner.scans.splitting import (
    DEFAULT_LOOKBACK,
    DEFAULT_OPEN_FILE_COST,
    DEFAULT_TARGET_SIZE,
    SplitOptions,
    pack_in_order,
    pack_tasks,
    plan_task_groups,
    split_task,
    task_weight,
)
from meltwater.planner.scans.tasks import DeleteFileRef, FileScanTask
from meltwater.planner.spec.files import DataFile, FileContent

MB = 1024 * 1024


def data_file(name: str, size: int, *, offsets: tuple[int, ...] | None = None,
              file_format: str = "PARQUET", records: int = 100) -> DataFile:
    return DataFile(FileContent.DATA, f"/t/data/{name}", file_format, 0, (), records, size,
                    split_offsets=offsets)


def delete_file(name: str, size: int) -> DeleteFileRef:
    return DeleteFileRef(DataFile(FileContent.POSITION_DELETES, f"/t/data/{name}", "PARQUET",
                                  0, (), 1, size), 2)


def task(name: str, size: int, *, deletes: int = 0, delete_size: int = 1, **kwargs) -> FileScanTask:
    return FileScanTask(data_file(name, size, **kwargs), 1,
                        tuple(delete_file(f"{name}-d{i}", delete_size) for i in range(deletes)))


def names(groups) -> list[list[str]]:
    return [[t.data_file.file_path.rsplit("/", 1)[1] for t in g.tasks] for g in groups]


# -- splitting -------------------------------------------------------------------------------


def test_a_big_parquet_file_is_cut_at_its_row_groups():
    """Row groups start at 4 (after the magic bytes) and every 30 MB after; the file ends at
    250 MB. With a 64 MB target a piece takes whole row groups until it reaches the target."""
    offsets = (4, 30 * MB, 60 * MB, 90 * MB, 120 * MB, 150 * MB, 180 * MB, 210 * MB)
    whole = task("big.parquet", 250 * MB, offsets=offsets)
    pieces = split_task(whole, 64 * MB)
    starts = [p.start for p in pieces]
    ends = [p.start + p.length for p in pieces]
    # Contiguous, from the first row group to the end of the file, cut only at offsets.
    assert starts[0] == 4 and ends[-1] == 250 * MB
    assert ends[:-1] == starts[1:]
    assert set(starts) <= set(offsets)
    # Each piece but the last holds at least the target; none could have stopped earlier.
    for piece in pieces[:-1]:
        assert piece.length >= 64 * MB
        inner = [o for o in offsets if piece.start < o < piece.start + piece.length]
        assert all(o - piece.start < 64 * MB for o in inner)
    assert [(p.start, p.length) for p in pieces] == [
        (4, 90 * MB - 4), (90 * MB, 90 * MB), (180 * MB, 70 * MB)]
    assert all(p.length < whole.data_file.file_size_in_bytes for p in pieces)
    # Everything else about the task is kept: the file, its deletes, its sequence number.
    assert all((p.data_file, p.deletes, p.sequence_number)
               == (whole.data_file, whole.deletes, whole.sequence_number) for p in pieces)


@pytest.mark.parametrize("whole", [
    task("small.parquet", 10 * MB, offsets=(4, 5 * MB)),  # no bigger than the target
    task("big.orc", 250 * MB, offsets=(3, 100 * MB), file_format="ORC"),  # only Parquet splits
    task("big.avro", 250 * MB, offsets=(4, 100 * MB), file_format="AVRO"),
    task("none.parquet", 250 * MB),  # no offsets recorded
    task("one.parquet", 250 * MB, offsets=(4,)),  # a single row group
    task("unsorted.parquet", 250 * MB, offsets=(4, 100 * MB, 50 * MB)),
    task("repeated.parquet", 250 * MB, offsets=(4, 100 * MB, 100 * MB)),
    task("beyond.parquet", 250 * MB, offsets=(4, 100 * MB, 250 * MB)),  # at the file's end
    task("negative.parquet", 250 * MB, offsets=(-1, 100 * MB)),
], ids=lambda t: t.data_file.file_path.rsplit("/", 1)[1])
def test_files_that_cannot_be_split_stay_whole(whole):
    assert split_task(whole, 64 * MB) == [whole]


# -- weights and bin-packing -----------------------------------------------------------------


def test_a_task_weighs_its_bytes_or_the_cost_of_opening_its_files():
    cost = 4 * MB
    assert task_weight(task("a", 100 * MB), cost) == 100 * MB
    assert task_weight(task("b", 1), cost) == cost  # one file to open
    # 3 delete files: 4 files to open, 16 MB, more than its 1 MB + 3 bytes
    assert task_weight(task("c", MB, deletes=3), cost) == 4 * cost
    assert task_weight(task("d", 20 * MB, deletes=1, delete_size=2 * MB), cost) == 22 * MB


def test_first_fit_over_the_open_groups():
    """Weights 60, 50, 40, 30, 20 (MB) into 100 MB groups: 40 joins 60 (the first group it
    fits), 30 joins 50, 20 fits only the second group."""
    tasks = [task(f"w{w}", w * MB) for w in (60, 50, 40, 30, 20)]
    groups = pack_tasks(tasks, target_size=100 * MB, lookback=10, open_file_cost=MB)
    assert names(groups) == [["w60", "w40"], ["w50", "w30", "w20"]]
    assert [g.size_in_bytes for g in groups] == [100 * MB, 100 * MB]


def test_lookback_closes_the_oldest_group():
    """With one group open, a task that does not fit closes it (and the rest of the plan can
    no longer go there): the same weights give three groups."""
    tasks = [task(f"w{w}", w * MB) for w in (60, 50, 40, 30, 20)]
    groups = pack_tasks(tasks, target_size=100 * MB, lookback=1, open_file_cost=MB)
    assert names(groups) == [["w60"], ["w50", "w40"], ["w30", "w20"]]


def test_the_open_file_cost_keeps_tiny_files_apart():
    """1000 files of 1 KB weigh 4 MB each: 32 to a 128 MB group, so 32 groups (31 full and
    one of the remaining 8) instead of one group reading all 1000."""
    tasks = [task(f"f{i:04}", 1024) for i in range(1000)]
    groups = pack_tasks(tasks, target_size=128 * MB, open_file_cost=4 * MB)
    assert sorted(len(g.tasks) for g in groups) == [8] + [32] * 31
    without = pack_tasks(tasks, target_size=128 * MB, open_file_cost=0)
    assert len(without) == 1


def test_packing_keeps_every_task_once_and_in_order_within_a_group():
    weights = [7, 93, 12, 55, 1, 64, 30, 30, 30, 99, 2, 48, 71, 5, 40]
    tasks = [task(f"t{i:02}", w * MB) for i, w in enumerate(weights)]
    groups = pack_tasks(tasks, target_size=100 * MB, lookback=3, open_file_cost=MB)
    listed = [t for g in groups for t in g.tasks]
    assert sorted(t.data_file.file_path for t in listed) == sorted(
        t.data_file.file_path for t in tasks)
    for group in groups:
        positions = [tasks.index(t) for t in group.tasks]
        assert positions == sorted(positions)
        assert group.size_in_bytes <= 100 * MB


def test_a_task_bigger_than_the_target_gets_a_group_of_its_own():
    tasks = [task("small", 10 * MB), task("huge", 500 * MB), task("small2", 10 * MB)]
    groups = pack_tasks(tasks, target_size=100 * MB, open_file_cost=MB)
    assert names(groups) == [["small", "small2"], ["huge"]]


def test_plan_task_groups_splits_then_packs():
    """A 200 MB file with 30 MB row groups, for a 100 MB target, is cut into a piece of
    120 MB (from offset 4) and one of 80 MB (from 120 MB); a 10 MB file fits beside the
    second piece only."""
    offsets = (4, 30 * MB, 60 * MB, 90 * MB, 120 * MB, 150 * MB, 180 * MB)
    tasks = [task("big.parquet", 200 * MB, offsets=offsets), task("small.parquet", 10 * MB)]
    groups = plan_task_groups(tasks, target_size=100 * MB, lookback=10,
                              open_file_cost=DEFAULT_OPEN_FILE_COST)
    assert names(groups) == [["big.parquet"], ["big.parquet", "small.parquet"]]
    assert [(t.start, t.length) for t in groups[0].tasks] == [(4, 120 * MB - 4)]
    assert [(t.start, t.length) for t in groups[1].tasks] == [(120 * MB, 80 * MB), (0, None)]


# -- packing in order ------------------------------------------------------------------------


def _check_in_order(groups: list[list[int]], n: int) -> None:
    assert [i for g in groups for i in g] == list(range(n))
    assert all(g for g in groups)


def test_in_order_packing_balances_instead_of_filling():
    """41 commits of 3.6 MB into at most 73 MB and 3 groups: filling in order would give
    20, 20 and 1 commits (the lone one a Spark task running after the others); balanced,
    the groups differ by at most one commit."""
    weights = [3_600_000] * 41
    groups = pack_in_order(weights, 73_000_000, 3)
    _check_in_order(groups, 41)
    assert len(groups) == 3
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1
    assert all(sum(weights[i] for i in g) <= 73_000_000 for g in groups)


def test_in_order_packing_never_passes_the_maximum_but_for_a_single_item():
    weights = [10, 80, 15, 15, 200, 5, 5, 60, 40]
    groups = pack_in_order(weights, 100, 4)
    _check_in_order(groups, len(weights))
    for group in groups:
        assert len(group) == 1 or sum(weights[i] for i in group) <= 100
    assert [4] in groups  # 200 alone


def test_in_order_packing_spreads_a_heavy_item_without_starving_the_rest():
    """A heavy first item takes its own group and the share of the others is recomputed:
    the remaining 8 items of 10 split 4 and 4, not 7 and 1."""
    weights = [90] + [10] * 8
    groups = pack_in_order(weights, 1000, 3)
    _check_in_order(groups, 9)
    assert groups == [[0], [1, 2, 3, 4], [5, 6, 7, 8]]


def test_in_order_packing_edges():
    assert pack_in_order([], 100, 4) == []
    assert pack_in_order([5], 100, 4) == [[0]]
    assert pack_in_order([5, 5, 5], 100, 1) == [[0, 1, 2]]


# -- the table's read.split.* properties, read one way for scans and streams ---------------


def test_split_options_come_from_the_table_properties():
    assert SplitOptions.of_table({}) == SplitOptions(DEFAULT_TARGET_SIZE, DEFAULT_LOOKBACK,
                                                     DEFAULT_OPEN_FILE_COST)
    given = SplitOptions.of_table({"read.split.target-size": "1048576",
                                   "read.split.planning-lookback": "3",
                                   "read.split.open-file-cost": " 1024 "})
    assert given == SplitOptions(1_048_576, 3, 1024)


def test_a_property_that_is_not_a_positive_whole_number_is_ignored():
    for bad in ("0", "-5", "12MB", "1.5", ""):
        options = SplitOptions.of_table({"read.split.target-size": bad,
                                         "read.split.open-file-cost": bad})
        assert options == SplitOptions(), bad
