"""Rate limits never change the change feed: for every Iceberg Java corpus history, a stream
limited to 1, 2, 3 or 7 files (rows, bytes) per micro-batch emits, over all its
micro-batches, exactly the rows of the unlimited stream, with and without update pairing.

`ChangeStream` is driven the way the Spark source's driver drives it (initial_offset,
latest_offset, offsets through JSON, parts, pack_parts, forget) and each Spark partition is
read with `read_parts`, the function the source's executors call; no Spark is needed. The
unlimited stream is the reference here: it is checked against Iceberg Java elsewhere
(test_changes_interop.py, test_spark_stream.py).

A micro-batch (start, end) reads the same rows whatever budget produced it (that is what
replays rely on, and `test_a_restarted_driver_replays_the_same_rows` checks it), so reads
are cached by their offsets across the budgets of one history: that keeps the matrix fast.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pyarrow as pa
import pytest

from corpus import WRITERS_2026
from corpus.pyiceberg_corpus import PYICEBERG_SCENARIOS
from meltwater.planner.changes.change_tasks import AddedRowsTask, ChangeCommit, DeletedDataFileTask
from meltwater.planner.changes.commit_units import commit_units, is_one_way
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.changes.micro_batch import UNLIMITED, Budget, pack_parts
from meltwater.planner.errors import InvalidRangeError, OffsetError
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.partitioning import PartitionField, PartitionSpec
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.changes import held_changes
from meltwater.stream.engine.changes.change_schema import METADATA_COLUMNS
from meltwater.stream.engine.changes.held_changes import read_parts
from meltwater.stream.watch.stream_offsets import StreamOffset
from watch_tests.stream_feed import Feed, rows_of, stream_of

SCENARIOS = ("mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
             "position_deletes_with_rows", "maintenance", "evolution", "format_v1",
             "v3_deletion_vectors", "random_mix", "file_formats", "column_evolution",
             "small_pages", *WRITERS_2026,
             *PYICEBERG_SCENARIOS)
PAIRING = {"compute-updates": "true", "identifier-columns": "id"}
# (scenario, mode): plain, pairing by `id`, and pairing by the table's own keys where it
# has them (identifier fields; v3 row lineage).
CASES = ([(name, "plain") for name in SCENARIOS] + [(name, "pairs") for name in SCENARIOS]
         + [("equality_deletes", "own-keys"), ("v3_deletion_vectors", "own-keys"),
            ("column_evolution", "own-keys")])
MODES = {"plain": {}, "pairs": PAIRING, "own-keys": {"compute-updates": "true"}}
BUDGETS = [Budget(**{f"max_{kind}": limit}) for kind in ("files", "rows", "bytes")
           for limit in (1, 2, 3, 7)]


def _differences(got: Counter, want: Counter) -> str:
    extra, missing = got - want, want - got
    return (f"{sum(extra.values())} unexpected rows {list(extra)[:3]}, "
            f"{sum(missing.values())} missing {list(missing)[:3]}")


def test_every_corpus_history_is_covered(corpus):
    assert set(SCENARIOS) == set(corpus.scenarios)


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_limited_stream_equals_the_unlimited_feed(corpus, name, mode):
    feed = Feed(corpus.scenarios[name].location, MODES[mode])
    want, count = feed.rows(UNLIMITED)
    assert count <= 1 and (count == 0 or want), name
    for budget in BUDGETS:
        got, _ = feed.rows(budget)
        assert got == want, f"{name} {mode} {budget}: {_differences(got, want)}"


def _split_two_way_commits(feed: Feed, budget: Budget) -> set[int]:
    """Commits that both remove and add rows and that the budget split."""
    table = load_table(feed.location)
    planner = IncrementalPlanner(table)
    split = set()
    for _, _, parts in feed.batches(budget):
        for part in parts:
            sid = part.changes.commit.snapshot_id
            if not part.whole and not is_one_way(
                    planner.plan_commit(table.metadata.snapshots[sid], 0).tasks):
                split.add(sid)
    return split


def test_carry_over_never_straddles_a_cut(corpus):
    """Copy-on-write commits rewrite rows unchanged: two files per micro-batch splits
    commits that both remove and add files, and no rewritten row may show as a DELETE in
    one micro-batch and an INSERT in another (cutting anywhere emitted 118 such pairs)."""
    feed = Feed(corpus.scenarios["cow_partitioned"].location, {})
    budget = Budget(max_files=2)
    assert _split_two_way_commits(feed, budget), "no commit removing and adding was split"
    got, _ = feed.rows(budget)
    want, _ = feed.rows(UNLIMITED)
    assert got == want, _differences(got, want)


def _shared_keys_seen(monkeypatch) -> list[int]:
    seen: list[int] = []
    shared_keys = held_changes._shared_keys

    def counting(keys_by_unit, ids):
        shared, holders = shared_keys(keys_by_unit, ids)
        seen.append(len(shared[0]) if shared else 0)
        return shared, holders

    monkeypatch.setattr(held_changes, "_shared_keys", counting)
    return seen


def test_updates_moving_rows_across_partitions_pair_across_parts(corpus, monkeypatch):
    """random_mix's MERGEs update `ts`, moving rows to another days(ts) partition: the
    DELETE and the INSERT of one id land in different units, so a one-file budget puts
    them in different micro-batches; they must still pair, as in the unlimited feed."""
    seen = _shared_keys_seen(monkeypatch)
    feed = Feed(corpus.scenarios["random_mix"].location, PAIRING)
    budget = Budget(max_files=1)
    got, _ = feed.rows(budget)
    want, _ = feed.rows(UNLIMITED)
    assert got == want, _differences(got, want)
    assert sum(seen) > 0, "no update crossed units: the case is not exercised"
    pairs = Counter(dict(r)["_change_type"] for r in got.elements())
    assert pairs["UPDATE_BEFORE"] == pairs["UPDATE_AFTER"] > 0


def test_a_restarted_driver_replays_the_same_rows(corpus):
    """Each micro-batch of a split commit, replayed by a fresh driver (nothing cached, as
    after kill -9), plans the same parts and reads the same rows, held rows included."""
    location = corpus.scenarios["random_mix"].location
    feed = Feed(location, PAIRING)
    io = PyArrowFileIO()
    replayed = 0
    for start, end, parts in feed.batches(Budget(max_files=1)):
        if all(part.pairing is None for part in parts):
            continue
        again = stream_of(location, PAIRING)
        assert again.parts(start, end) == parts
        assert rows_of(read_parts(parts, io, again.options)) == rows_of(
            read_parts(again.parts(start, end), io, again.options))
        replayed += 1
        if replayed == 4:
            break
    assert replayed == 4


# -- units ---------------------------------------------------------------------------------


def _commit_tasks(location: str, label_part: str, corpus_name: str, corpus):
    scenario = corpus.scenarios[corpus_name]
    truth = next(s for s in scenario.snapshots if label_part in s.label)
    table = load_table(location)
    snapshot = table.metadata.snapshots[truth.snapshot_id]
    return table, IncrementalPlanner(table).plan_commit(snapshot, 0).tasks


def test_units_follow_partitions_and_keep_spec_changes_together(corpus):
    # a copy-on-write MERGE: each unit is one partition's removed and added files
    location = corpus.scenarios["cow_partitioned"].location
    table, tasks = _commit_tasks(location, "COW merge", "cow_partitioned", corpus)
    units = commit_units(tasks, table.metadata.specs)
    assert not units.one_way and len(units.units) > 1
    for unit in units.units:
        assert len({(tasks[i].data_file.spec_id, tasks[i].data_file.partition)
                    for i in unit}) == 1
    assert sorted(units.order) == list(range(len(tasks)))
    # an update across partition specs: the old rows' files are unpartitioned (spec 0),
    # their new copies partitioned by truncate(2, full_name) (spec 1); no field tells the
    # specs' files apart, so the whole commit is one unit
    location = corpus.scenarios["evolution"].location
    table, tasks = _commit_tasks(location, "MOR update across specs", "evolution", corpus)
    assert {t.data_file.spec_id for t in tasks} == {0, 1}
    assert len(commit_units(tasks, table.metadata.specs).units) == 1


def _task(spec_id: int, partition: tuple, added: bool):
    file = DataFile(FileContent.DATA, f"/t/{spec_id}-{partition}-{added}.parquet", "PARQUET",
                    spec_id, partition, 1, 10)
    commit = ChangeCommit(0, 1, 1, 0, "overwrite")
    return (AddedRowsTask(commit, file, 1) if added
            else DeletedDataFileTask(commit, file, 1))


def test_units_across_specs_judged_by_shared_fields():
    """Spec 1 partitions by category, spec 2 by category and bucket(id), spec 3 by
    bucket(id) only: category tells spec 1 and 2 files apart, nothing tells spec 3 files
    from spec 1 ones; with `id` as key, bucket(id) separates key groups."""
    category = PartitionField(2, 1000, "identity", "category")
    bucket = PartitionField(1, 1001, "bucket[4]", "id_bucket")
    specs = {1: PartitionSpec(1, (category,)), 2: PartitionSpec(2, (category, bucket)),
             3: PartitionSpec(3, (bucket,))}
    tasks = [_task(1, ("a",), False), _task(2, ("a", 0), True), _task(2, ("b", 1), True),
             _task(1, ("b",), False), _task(1, ("c",), False), _task(2, ("c", 3), True)]
    units = commit_units(tasks, specs, identifier_ids=(1,))
    assert units.units == ((0, 1), (2, 3), (4, 5))
    assert len(set(units.key_groups)) == 1  # spec 1 has no bucket(id): any key anywhere
    units = commit_units([*tasks, _task(3, (2,), True)], specs, identifier_ids=(1,))
    assert units.units == ((0, 1, 2, 3, 4, 5, 6),)
    only_two = [_task(2, ("a", 0), False), _task(2, ("a", 1), True), _task(2, ("b", 0), True)]
    units = commit_units(only_two, specs, identifier_ids=(1,))
    assert units.units == ((0,), (1,), (2,))
    assert units.key_groups[0] == units.key_groups[2] != units.key_groups[1]
    # values of another kind in each spec (metadata the spec's rules do not allow, as
    # promoting a partition source) tell nothing apart: kept together, never guessed
    day = PartitionField(4, 1002, "identity", "day")
    promoted = {5: PartitionSpec(5, (day,)), 6: PartitionSpec(6, (day, bucket))}
    tasks = [_task(5, (19723,), False), _task(6, ("2024-01-01", 0), True)]
    assert commit_units(tasks, promoted).units == ((0, 1),)
    tasks = [_task(5, (19723,), False), _task(6, (19724, 0), True)]
    assert commit_units(tasks, promoted).units == ((0,), (1,))


# -- checkpoints of the previous offset version ----------------------------------------------


def _legacy(offset: StreamOffset) -> dict:
    return {**offset.to_json(), "version": 1}


def test_version_1_offsets_are_read(corpus):
    """Checkpoints written before units (offset version 1, positions in planner order,
    cut anywhere) resume: a micro-batch ending mid-commit replays as it was read, and the
    next one finishes that commit whole, so every task is read exactly once."""
    location = corpus.scenarios["cow_partitioned"].location
    stream = stream_of(location, {})
    start = stream.initial_offset()
    whole = stream.latest_offset(start)
    by_commit = {}
    for part in stream.parts(start, whole):
        by_commit[part.changes.commit.snapshot_id] = part
    commit, part = next((sid, p) for sid, p in by_commit.items()
                        if not commit_units(p.changes.tasks, load_table(location)
                                            .metadata.specs).one_way)
    before = part.changes.commit.ordinal - 1
    previous = next(p for p in by_commit.values() if p.changes.commit.ordinal == before)
    begin = StreamOffset.from_json(_legacy(StreamOffset(
        previous.changes.commit.snapshot_id, previous.task_count, True, False, before)))
    middle = StreamOffset.from_json(
        {"version": 1, "snapshot_id": commit, "position": 1, "complete": False,
         "scan_all_files": False, "ordinal": part.changes.commit.ordinal})
    assert middle.legacy and not begin.legacy
    assert json.dumps(middle.to_json()) == json.dumps(_legacy(middle))  # round trip
    fresh = stream_of(location, {})
    planner_order = IncrementalPlanner(load_table(location)).plan_commit(
        fresh.load().metadata.snapshots[commit], part.changes.commit.ordinal).tasks
    first = fresh.parts(begin, middle)
    assert [p.changes.tasks for p in first] == [
        tuple(replace(t, commit=first[0].changes.commit) for t in planner_order[:1])]
    end = fresh.latest_offset(middle, Budget(max_files=1))  # the rest, whole
    assert (end.snapshot_id, end.complete, end.version) == (commit, True, 2)
    rest = fresh.parts(middle, end)
    read = [t.data_file.file_path for p in first + rest for t in p.changes.tasks]
    assert sorted(read) == sorted(t.data_file.file_path for t in planner_order)
    assert fresh.latest_offset(begin) != begin  # a complete version 1 offset resumes too
    assert fresh.latest_offset(end, UNLIMITED).version == 2


def test_unknown_or_misplaced_offsets_are_refused(corpus):
    with pytest.raises(OffsetError, match=r"unknown version 3.*start a new checkpoint"):
        StreamOffset.from_json({"version": 3, "snapshot_id": 1, "position": 0,
                                "complete": True, "ordinal": 0})
    # a version 2 position inside a unit: COW merge's first unit is its tasks 0 and 2
    location = corpus.scenarios["cow_partitioned"].location
    table, tasks = _commit_tasks(location, "COW merge", "cow_partitioned", corpus)
    assert commit_units(tasks, table.metadata.specs).bounds[:2] == (0, 2)
    merge = next(s for s in corpus.scenarios["cow_partitioned"].snapshots
                 if "COW merge" in s.label)
    inside = StreamOffset(merge.snapshot_id, 1, False, False, 4)
    stream = stream_of(location, {})
    with pytest.raises(OffsetError, match="not between two of its commit's units"):
        stream.latest_offset(inside, UNLIMITED)
    with pytest.raises(OffsetError, match="not between two of its commit's units"):
        stream.parts(replace(inside, position=0), inside)


def test_an_offset_off_the_tables_lineage_is_refused(corpus):
    """A checkpoint at a snapshot main no longer descends from (a rollback; here a branch's
    commit) is refused, in the stream's words, rather than read as if main's history came
    after it: the planner's lineage walk, which batch ranges share."""
    scenario = corpus.scenarios["mor_partitioned"]
    branch = next(s for s in scenario.snapshots if s.label == "append on branch audit")
    stream = stream_of(scenario.location, {})
    head = stream.load().metadata.current_snapshot_id
    offset = StreamOffset(branch.snapshot_id, 0, True, False, 3)
    refusal = (rf"the stream's snapshot {branch.snapshot_id} is not an ancestor of snapshot "
               rf"{head} \(was the table rolled back\?\); start a new checkpoint")
    with pytest.raises(InvalidRangeError, match=refusal):
        stream.latest_offset(offset, UNLIMITED)
    with pytest.raises(InvalidRangeError, match=refusal):
        stream.report_latest(offset)


def test_pack_parts_never_splits_a_part_holding_rows_back(corpus):
    feed = Feed(corpus.scenarios["random_mix"].location, PAIRING)
    held = [p for _, _, parts in feed.batches(Budget(max_files=7)) for p in parts
            if p.pairing is not None]
    assert held
    for part in held:
        assert not part.one_way
        assert pack_parts([part], target_bytes=1) == [[part]]


def test_batches_are_arrow_in_the_stream_schema(corpus):
    feed = Feed(corpus.scenarios["mor_partitioned"].location, PAIRING)
    stream = stream_of(feed.location, PAIRING)
    for _, _, parts in feed.batches(Budget(max_files=2))[:3]:
        for batch in read_parts(parts, feed.io, stream.options):
            assert isinstance(batch, pa.RecordBatch)
            assert list(batch.schema.names[-5:]) == list(METADATA_COLUMNS)
