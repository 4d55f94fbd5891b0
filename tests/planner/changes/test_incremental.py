"""planner/changes/incremental.py at the planner level: the change tasks of Iceberg Java's commits,
checked against what Iceberg Java recorded and what the manifests say, without reading rows
through meltwater.

Iceberg Java's javadoc of `DeletedRowsScanTask` gives the example: snapshot S1 holds data
files F1, F2, F3; S2 adds a position delete file D1 deleting records of F2; S3 adds an
equality delete file D2 removing records of F1, F2 and F3. The changes of (S1, S3] are then

    DeletedRowsScanTask(file=F2, added-deletes=[D1], existing-deletes=[],   snapshot=S2)
    DeletedRowsScanTask(file=F1, added-deletes=[D2], existing-deletes=[],   snapshot=S3)
    DeletedRowsScanTask(file=F2, added-deletes=[D2], existing-deletes=[D1], snapshot=S3)
    DeletedRowsScanTask(file=F3, added-deletes=[D2], existing-deletes=[],   snapshot=S3)

meltwater's `DeletedRowsTask` says the same with `added_deletes` and `deletes_before` (the
existing deletes), plus `deletes_after`, the deletes that apply once the commit is made.

The expectations come from sources other than meltwater: Iceberg Java's record of each
snapshot (`tests/corpus`: its summary, what it read at each snapshot), the data files read
with pyarrow, and the manifests read with pyiceberg (`_Manifests`), to which the spec's rule
for file-scoped position deletes is applied (a delete file whose `file_path` bounds name one
data file applies to that file if its sequence number is not older).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeTask,
    DeletedDataFileTask,
    DeletedRowsTask,
    EqualityDeletedRowsTask,
)
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.table.table_loading import load_table

FILE_PATH_ID = 2147483546  # the `file_path` column of position delete files (spec)


@dataclass(frozen=True)
class _Entry:
    """A manifest entry as pyiceberg reads it."""

    status: str  # ADDED, EXISTING, DELETED
    snapshot_id: int
    sequence_number: int
    content: int  # 0 data, 1 position deletes, 2 equality deletes
    path: str
    referenced: str | None  # the one data file a position delete's bounds name


@cache
def _entries(metadata_location: str, snapshot_id: int) -> tuple[_Entry, ...]:
    """Every entry of a snapshot's manifests (deleted ones too), read by pyiceberg."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    found = []
    for manifest in table.metadata.snapshot_by_id(snapshot_id).manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            file = entry.data_file
            low = (file.lower_bounds or {}).get(FILE_PATH_ID)
            high = (file.upper_bounds or {}).get(FILE_PATH_ID)
            referenced = low.decode() if int(file.content) == 1 and low and low == high else None
            found.append(_Entry(entry.status.name, entry.snapshot_id,
                                entry.sequence_number or 0, int(file.content), file.file_path,
                                referenced))
    return tuple(found)


class _Manifests:
    """What a commit did and which deletes applied to each data file, by pyiceberg."""

    def __init__(self, metadata_location: str, snapshot_id: int, parent_id: int | None):
        self.snapshot_id = snapshot_id
        self.now = _entries(metadata_location, snapshot_id)
        self.before = _entries(metadata_location, parent_id) if parent_id is not None else ()

    def own(self, status: str, content: int) -> set[str]:
        return {e.path for e in self.now if e.status == status and e.content == content
                and e.snapshot_id == self.snapshot_id}

    def live_data(self) -> list[_Entry]:
        return [e for e in self.now if e.content == 0 and e.status != "DELETED"]

    @staticmethod
    def applying(entries: Iterable[_Entry], data: _Entry) -> frozenset[str]:
        return frozenset(e.path for e in entries if e.status != "DELETED" and e.content == 1
                         and e.referenced == data.path
                         and e.sequence_number >= data.sequence_number)

    def file_scoped_only(self) -> bool:
        return all(e.content == 0 or (e.content == 1 and e.referenced is not None)
                   for e in (*self.now, *self.before))


def _paths(refs) -> frozenset[str]:
    return frozenset(r.file.file_path for r in refs)


def _plan(location: str, snapshot_id: int, **kwargs) -> tuple[ChangeTask, ...]:
    table = load_table(location)
    return IncrementalPlanner(table).plan_commit(table.metadata.snapshot(snapshot_id), 0,
                                                 **kwargs).tasks


def _by_label(scenario, label: str):
    (snapshot,) = [s for s in scenario.snapshots if s.label == label]
    return snapshot


def _ids_by_file(paths: Iterable[str]) -> dict[str, set[int]]:
    """The `id` values each data file holds, read straight from the Parquet file."""
    return {p: set(pq.read_table(p.removeprefix("file:"), columns=["id"])["id"].to_pylist())
            for p in paths}


def _removed_ids(scenario, snapshot) -> set[int]:
    """Ids Iceberg Java read at the parent snapshot and not at this one."""
    before = set(scenario.snapshot(snapshot.parent_id).rows()["id"].to_pylist())
    return before - set(snapshot.rows()["id"].to_pylist())


# -- the javadoc's example -------------------------------------------------------------------


def test_deleted_rows_tasks_follow_the_javadoc_example(corpus):
    """mor_partitioned has the example's shape: after two appends (S1), Spark's
    merge-on-read DELETE of ids divisible by 7 adds position deletes to data files (S2),
    then an UPDATE of ids ending in 3 adds position deletes to data files of which some
    already have S2's (F2) and some do not (F1, F3).

    Two differences from the javadoc: D2 is a position delete here (Spark writes no
    equality deletes; the next test has those), and Iceberg 1.10's Spark writer folds a
    file's previous file-scoped position deletes into its new delete file and removes the
    old one in the same commit, so after S3 only D2 applies to F2 (it repeats D1's
    positions)."""
    scenario = corpus.scenarios["mor_partitioned"]
    s2 = _by_label(scenario, "MOR delete ids divisible by 7")
    s3 = _by_label(scenario, "MOR update")
    assert s3.parent_id == s2.snapshot_id
    files = _ids_by_file(e.path for e in _Manifests(
        scenario.metadata_location, s2.snapshot_id, s2.parent_id).live_data())
    removed = _removed_ids(scenario, s2)
    assert removed == {i for i in range(1, 121) if i % 7 == 0}  # Iceberg Java's read

    # S2: a task for each file holding a deleted id, its D1 added, nothing existing.
    m2 = _Manifests(scenario.metadata_location, s2.snapshot_id, s2.parent_id)
    tasks2 = _plan(scenario.location, s2.snapshot_id)
    assert all(isinstance(t, DeletedRowsTask) for t in tasks2)
    hit = {path for path, ids in files.items() if ids & removed}
    assert {t.data_file.file_path for t in tasks2} == hit
    d1 = {}
    for task in tasks2:
        assert task.deletes_before == ()
        assert _paths(task.added_deletes) == _paths(task.deletes_after)
        (d1[task.data_file.file_path],) = _paths(task.added_deletes)
    assert set(d1.values()) == m2.own("ADDED", 1)  # every delete file S2 added, once
    assert len(d1) == int(s2.summary["added-position-delete-files"])

    # S3: the UPDATE's position deletes; F2s carry D1 as their existing delete.
    m3 = _Manifests(scenario.metadata_location, s3.snapshot_id, s3.parent_id)
    tasks3 = [t for t in _plan(scenario.location, s3.snapshot_id)
              if isinstance(t, DeletedRowsTask)]
    live = set(s2.rows()["id"].to_pylist())  # what Iceberg Java read before the UPDATE
    updated = {path for path, ids in files.items() if any(i % 10 == 3 for i in ids & live)}
    assert {t.data_file.file_path for t in tasks3} == updated
    f2 = [t for t in tasks3 if t.data_file.file_path in d1]
    f1_f3 = [t for t in tasks3 if t.data_file.file_path not in d1]
    assert f2 and f1_f3, "the corpus no longer has the javadoc's shape"
    for task in f2:
        assert _paths(task.deletes_before) == {d1[task.data_file.file_path]}
    for task in f1_f3:
        assert task.deletes_before == ()
    d2 = m3.own("ADDED", 1)
    for task in tasks3:
        (added,) = _paths(task.added_deletes)
        assert added in d2
        assert _paths(task.deletes_after) == {added}
    assert m3.own("DELETED", 1) == {d1[t.data_file.file_path] for t in f2}  # folded into D2
    # The UPDATE's new rows: one AddedRowsTask per data file Iceberg Java says it added.
    appended = [t for t in _plan(scenario.location, s3.snapshot_id)
                if isinstance(t, AddedRowsTask)]
    assert {t.data_file.file_path for t in appended} == m3.own("ADDED", 0)
    assert len(appended) == s3.added_data_files


def test_an_equality_delete_reaches_files_with_and_without_existing_deletes(corpus):
    """The javadoc's D2 is an equality delete: one task of the commit names the files it
    may reach, shares the deletes (never listed per file) and the position deletes live
    before. In equality_global a global equality delete (ids 3, 25, 33) reaches data files
    of both partition specs, none with deletes yet; in equality_deletes an equality delete
    of id 2 reaches the file that Spark's position delete of id 1 hit two commits before
    (the javadoc's F2, D1 existing)."""
    scenario = corpus.scenarios["equality_global"]
    snapshot = _by_label(scenario, "global equality delete (spec 0) of ids 3, 25, 33")
    manifests = _Manifests(scenario.metadata_location, snapshot.snapshot_id,
                           snapshot.parent_id)
    (d2,) = manifests.own("ADDED", 2)
    live = {e.path for e in manifests.live_data()}
    removed = _removed_ids(scenario, snapshot)
    assert removed == {3, 25, 33}
    holding = {p for p, ids in _ids_by_file(live).items() if ids & removed}
    (task,) = _plan(scenario.location, snapshot.snapshot_id)
    assert isinstance(task, EqualityDeletedRowsTask)
    candidates = {ref.file.file_path for ref in task.candidates}
    assert holding <= candidates <= live
    assert {ref.file.spec_id for ref in task.candidates
            if ref.file.file_path in holding} == {0, 1}
    assert _paths(task.equality.added) == {d2} and task.equality.removed == ()
    assert all(task.positional_for(ref) == ()
               for ref in task.candidates)

    scenario = corpus.scenarios["equality_deletes"]
    spark_delete = _by_label(scenario, "Spark MOR position delete")
    snapshot = _by_label(scenario, "equality delete of an already deleted key (no-op)")
    (d1,) = _Manifests(scenario.metadata_location, spark_delete.snapshot_id,
                       spark_delete.parent_id).own("ADDED", 1)
    manifests = _Manifests(scenario.metadata_location, snapshot.snapshot_id,
                           snapshot.parent_id)
    (d2,) = manifests.own("ADDED", 2)
    (f2,) = [p for p, ids in _ids_by_file(e.path for e in manifests.live_data()).items()
             if 1 in ids]  # the file Spark's delete of id 1 hit
    (task,) = _plan(scenario.location, snapshot.snapshot_id)
    assert isinstance(task, EqualityDeletedRowsTask)
    (ref,) = [r for r in task.candidates if r.file.file_path == f2]
    assert _paths(task.equality.added) == {d2}
    assert d1 in _paths(task.positional_for(ref))
    assert d2 not in _paths(task.equality.before.applying_to(ref.sequence_number, ref.file))
    assert d2 in _paths(task.equality.after.applying_to(ref.sequence_number, ref.file))
    assert _removed_ids(scenario, snapshot) == set()  # id 2 was gone already


# -- every commit, against the manifests -----------------------------------------------------

# Histories whose delete files are all file-scoped position deletes (the default of Spark
# 3.5 with Iceberg 1.10), so the spec's rule above says which apply to which data file.
FILE_SCOPED = ["mor_partitioned", "cow_partitioned", "evolution", "column_evolution",
               "format_v1", "random_mix"]


@pytest.mark.parametrize("name", FILE_SCOPED)
def test_commit_tasks_are_what_the_manifests_say_changed(corpus, name):
    """For every commit: an AddedRowsTask per data file it added, a DeletedDataFileTask per
    data file it removed (with the deletes that applied before), and a DeletedRowsTask for
    exactly the data files whose applicable deletes changed, before and after as the
    manifests of the parent and of the commit say."""
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    checked = 0
    for snapshot in scenario.snapshots:
        if snapshot.snapshot_id not in table.metadata.snapshots \
                or snapshot.operation == "replace":
            continue
        m = _Manifests(scenario.metadata_location, snapshot.snapshot_id, snapshot.parent_id)
        assert m.file_scoped_only(), f"{name}: {snapshot.label}: a delete is not file-scoped"
        tasks = _plan(scenario.location, snapshot.snapshot_id)
        where = f"{name}: {snapshot.label}"
        added = {t.data_file.file_path: t for t in tasks if isinstance(t, AddedRowsTask)}
        assert set(added) == m.own("ADDED", 0), where
        live_now = {e.path: e for e in m.live_data()}
        for path, task in added.items():
            assert _paths(task.deletes) == m.applying(m.now, live_now[path]), where
        removed = {t.data_file.file_path: t for t in tasks if isinstance(t, DeletedDataFileTask)}
        assert set(removed) == m.own("DELETED", 0), where
        live_before = {e.path: e for e in m.before if e.content == 0 and e.status != "DELETED"}
        for path, task in removed.items():
            assert _paths(task.existing_deletes) == m.applying(m.before, live_before[path]), where
        expected = {}
        for path, entry in live_now.items():
            if path in added:
                continue
            was, now = m.applying(m.before, entry), m.applying(m.now, entry)
            if was != now:
                expected[path] = (was, now, now - was)
        got = {t.data_file.file_path: (_paths(t.deletes_before), _paths(t.deletes_after),
                                       _paths(t.added_deletes))
               for t in tasks if isinstance(t, DeletedRowsTask)}
        assert got == expected, where
        assert len(tasks) == len(added) + len(removed) + len(got), where
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("name", ["mor_partitioned", "cow_partitioned", "equality_deletes",
                                  "equality_global", "position_deletes_with_rows",
                                  "maintenance", "evolution", "column_evolution",
                                  "format_v1", "v3_deletion_vectors", "random_mix",
                                  "file_formats", "staged_upserts", "staged_upserts_v2",
                                  "mixed_row_deltas", "mixed_row_deltas_v3",
                                  "write_audit_publish"])
def test_commits_as_iceberg_java_recorded_them(corpus, name):
    """Every retained commit of every history: its tasks carry the commit's sequence
    number, time and operation; it adds and removes as many data files as Iceberg Java
    counted (`replace` commits change no rows and yield nothing); planned appends-only,
    only append commits yield tasks, one per data file added."""
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    planner = IncrementalPlanner(table)
    planned = 0
    for ordinal, truth in enumerate(scenario.snapshots):
        if truth.snapshot_id not in table.metadata.snapshots:
            assert truth.expired
            continue
        snapshot = table.metadata.snapshot(truth.snapshot_id)
        changes = planner.plan_commit(snapshot, ordinal)
        commit = changes.commit
        assert (commit.snapshot_id, commit.sequence_number, commit.timestamp_ms,
                commit.operation, commit.ordinal) == (
            truth.snapshot_id, truth.sequence_number, truth.timestamp_ms, truth.operation,
            ordinal)
        assert all(t.commit == commit for t in changes.tasks)
        kinds = [type(t) for t in changes.tasks]
        if truth.operation == "replace":
            assert changes.tasks == (), truth.label
        else:
            assert kinds.count(AddedRowsTask) == truth.added_data_files, truth.label
            assert kinds.count(DeletedDataFileTask) == truth.removed_data_files, truth.label
        appends = planner.plan_commit(snapshot, ordinal, appends_only=True).tasks
        if truth.operation == "append":
            assert [type(t) for t in appends] == [AddedRowsTask] * truth.added_data_files
        else:
            assert appends == (), truth.label
        planned += 1
    assert planned == sum(not s.expired for s in scenario.snapshots) > 0


def test_a_planner_filter_prunes_by_partition_and_metrics(corpus):
    """mor_partitioned is partitioned by category: planned with `category = 'a'`, every
    task of the first append is a file whose rows are all category a (read with pyarrow),
    and those are all the files of category a that append wrote."""
    from meltwater.planner.expressions.filter_parser import parse_filter
    from meltwater.planner.expressions.tree import bind

    scenario = corpus.scenarios["mor_partitioned"]
    table = load_table(scenario.location)
    first = _by_label(scenario, "append ids 1..60")
    snapshot = table.metadata.snapshot(first.snapshot_id)
    row_filter = bind(parse_filter("category = 'a'"), table.metadata.schema)
    tasks = IncrementalPlanner(table, row_filter).plan_commit(snapshot, 0).tasks
    everything = IncrementalPlanner(table).plan_commit(snapshot, 0).tasks
    category_a = set()
    for task in everything:
        values = pq.read_table(task.data_file.file_path.removeprefix("file:"),
                               columns=["category"])["category"]
        if pc.all(pc.equal(values, "a")).as_py():
            category_a.add(task.data_file.file_path)
    assert category_a and len(category_a) < len(everything)
    assert {t.data_file.file_path for t in tasks} == category_a


def test_a_stream_keeps_no_manifest_its_table_dropped(corpus):
    """A stream's planner reads each commit's manifests once, and the manifest cache kept
    them all (its bound, 2M entries, is gigabytes): every manifest a compaction or a merge
    took out of the table stayed in memory for the life of the service. Advanced commit by
    commit, the cache holds only manifests the newest commit's manifest list names (read
    with fastavro)."""
    import fastavro

    from meltwater.planner.table.manifests import ManifestCache

    scenario = corpus.scenarios["maintenance"]
    table = load_table(scenario.location)
    cache = ManifestCache()
    planner = IncrementalPlanner(table, cache=cache)
    dropped = 0
    listed_before: set[str] = set()
    retained = [s for s in scenario.snapshots if s.snapshot_id in table.metadata.snapshots]
    for ordinal, truth in enumerate(retained):
        snapshot = table.metadata.snapshot(truth.snapshot_id)
        planner.plan_commit(snapshot, ordinal)
        with open(snapshot.manifest_list.removeprefix("file:"), "rb") as listing:
            listed = {m["manifest_path"] for m in fastavro.reader(listing)}
        dropped += bool(listed_before - listed)
        listed_before = listed
        cached = {key[0] for key in cache._items}
        assert cached <= listed, f"{truth.label}: {len(cached - listed)} dropped manifests cached"
    assert dropped >= 1  # the history has commits that take manifests out
