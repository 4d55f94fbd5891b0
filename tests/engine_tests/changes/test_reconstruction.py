"""Change reconstruction: one commit's tasks -> INSERT / DELETE / UPDATE rows.

Files are small Iceberg-shaped Parquet files; tasks are built by hand the way incremental
planning emits them, so each change rule is checked on its own.
"""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine_tests.helpers import (
    F,
    GuardedIO,
    dv_blob,
    equality_deletes,
    position_deletes,
    position_deletes_with_rows,
    write_parquet,
    write_puffin,
)
from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    CommitChanges,
    DeletedDataFileTask,
    DeletedRowsTask,
    EqualityChange,
    EqualityDeletedRowsTask,
)
from meltwater.planner.expressions.tree import BoundPredicate, Op
from meltwater.planner.scans.tasks import DataFileRef, DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.types import (
    DOUBLE,
    LONG,
    STRING,
    ListType,
    NestedField,
    Schema,
    StructType,
)
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.changes.change_columns import change_schema
from meltwater.stream.engine.changes.change_schema import ChangeOptions
from meltwater.stream.engine.changes.reconstruction import reconstruct, reconstruct_range
from meltwater.stream.engine.decode.arrow_schema import field_id
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.scans.reader import read_with_delete_sets
from meltwater.stream.errors import ChangeOptionError, MissingIdentifierColumnError

IO = PyArrowFileIO()
SCHEMA = Schema((NestedField(1, "id", LONG), NestedField(2, "name", STRING)),
                identifier_field_ids=(1,))
ARROW = pa.schema([F("id", pa.int64(), 1), F("name", pa.string(), 2)])
ROW_FIELDS = [F("id", pa.int64(), 1), F("name", pa.string(), 2)]


def data(tmp_path, name: str, rows: list[tuple[int | None, str | None]], **options) -> DataFile:
    table = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows]}, schema=ARROW)
    return write_parquet(tmp_path / name, table, **options)


def ref(file: DataFile, seq: int = 2) -> DeleteFileRef:
    return DeleteFileRef(file, seq)


def commit(*tasks, ordinal: int = 0, snapshot_id: int = 100, seq: int = 3,
           ts: int = 1_700_000_000_000) -> CommitChanges:
    info = ChangeCommit(ordinal, snapshot_id, seq, ts, "overwrite")
    return CommitChanges(info, tuple(t(info) for t in tasks))


def added(file, *deletes):
    return lambda c: AddedRowsTask(c, file, c.sequence_number, tuple(deletes))


def _equality(refs) -> EqualityDeleteSet | None:
    """Equality delete refs as the set tasks share (all global: these tests' deletes are
    written unpartitioned)."""
    refs = tuple(sorted((r for r in refs if r.is_equality), key=lambda r: r.sequence_number))
    return EqualityDeleteSet(refs) if refs else None


def removed(file, *existing):
    positional = tuple(r for r in existing if not r.is_equality)
    return lambda c: DeletedDataFileTask(c, file, 1, positional, _equality(existing))


def deleted_rows(file, before, after, added_deletes=()):
    """The task the planner makes of a data file whose deletes went from `before` to
    `after` (equality deletes among them shared, never listed on the file): a
    DeletedRowsTask when its position deletes changed, else the commit's
    EqualityDeletedRowsTask with the file as its one candidate."""
    def build(c):
        positional = [tuple(r for r in refs if not r.is_equality) for refs in (before, after)]
        was, now = _equality(before), _equality(after)
        before_keys = {r.key for r in before if r.is_equality}
        after_keys = {r.key for r in after if r.is_equality}
        change = None
        if was is not None or now is not None:
            equality_refs = [r for r in (*before, *after) if r.is_equality]
            change = EqualityChange(
                was, now, tuple(r for r in after if r.is_equality and r.key not in before_keys),
                tuple(r for r in before if r.is_equality and r.key not in after_keys),
                frozenset(r.key for r in equality_refs))
        added_positional = tuple(r for r in added_deletes if not r.is_equality)
        if {r.key for r in positional[0]} != {r.key for r in positional[1]} or change is None \
                or not (change.added or change.removed):
            return DeletedRowsTask(c, file, 1, *positional, added_positional, change)
        return EqualityDeletedRowsTask(c, (DataFileRef(file, 1),), change, positional[0])
    return build


def run(changes: CommitChanges, projection: Schema = SCHEMA, io=IO, **options) -> pa.Table:
    batches = list(reconstruct(changes, projection, io, options=ChangeOptions(**options)))
    schema = change_schema(projection)
    for batch in batches:
        assert batch.schema.equals(schema, check_metadata=True)
    return pa.Table.from_batches(batches, schema=schema)


def rows(table: pa.Table) -> list[tuple]:
    return [(r["_change_type"], r["id"], r["name"]) for r in table.to_pylist()]


# -- the change rules --------------------------------------------------------------------------


def test_javadoc_s1_s2_s3_example_deletes_r2_only(tmp_path) -> None:
    f1 = data(tmp_path, "f1.parquet", [(1, "r1"), (2, "r2"), (3, "r3")])
    d1 = position_deletes(tmp_path / "d1.parquet", [(f1.file_path, 0)])
    d2 = position_deletes(tmp_path / "d2.parquet", [(f1.file_path, 1)])
    s3 = commit(deleted_rows(f1, [ref(d1)], [ref(d1), ref(d2, 3)], [ref(d2, 3)]),
                ordinal=2, snapshot_id=33, seq=3, ts=1_700_000_000_123)
    got = run(s3)
    assert rows(got) == [("DELETE", 2, "r2")]
    meta = got.to_pylist()[0]
    assert meta["_change_ordinal"] == 2
    assert meta["_commit_snapshot_id"] == 33
    assert meta["_commit_sequence_number"] == 3
    assert meta["_commit_timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000,
                                                    tzinfo=dt.timezone.utc)


def test_change_schema_has_metadata_columns_with_reserved_ids() -> None:
    schema = change_schema(SCHEMA)
    assert schema.names == ["id", "name", "_change_type", "_change_ordinal",
                            "_commit_snapshot_id", "_commit_sequence_number",
                            "_commit_timestamp"]
    assert [field_id(f) for f in schema] == [1, 2, 2147483543, 2147483542, 2147483541,
                                             None, None]
    assert schema.field("_change_ordinal").type == pa.int32()
    assert schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")


def test_added_file_inserts_its_rows_minus_same_commit_position_deletes(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b"), (3, "c")])
    d = position_deletes(tmp_path / "d.parquet", [(f.file_path, 1)])
    assert rows(run(commit(added(f, ref(d, 3))))) == [("INSERT", 1, "a"), ("INSERT", 3, "c")]


def test_removed_file_deletes_rows_live_before(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b"), (3, "c")])
    d = position_deletes(tmp_path / "d.parquet", [(f.file_path, 0)])
    assert rows(run(commit(removed(f, ref(d))))) == [("DELETE", 2, "b"), ("DELETE", 3, "c")]


def test_new_dv_replacing_old_dv_deletes_only_new_positions(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(i, f"n{i}") for i in range(8)])
    old = write_puffin(tmp_path / "old.puffin", dv_blob([1, 3]), f.file_path, 2)
    new = write_puffin(tmp_path / "new.puffin", dv_blob([1, 3, 4, 6]), f.file_path, 4)
    got = run(commit(deleted_rows(f, [ref(old)], [ref(new, 3)], [ref(new, 3)])))
    assert rows(got) == [("DELETE", 4, "n4"), ("DELETE", 6, "n6")]


def test_dv_dropping_a_position_reinserts_that_row(tmp_path) -> None:
    """Normal commits never undelete; if one did, the row is INSERTed, after the DELETEs."""
    f = data(tmp_path, "f.parquet", [(i, f"n{i}") for i in range(5)])
    old = write_puffin(tmp_path / "old.puffin", dv_blob([1, 2]), f.file_path, 2)
    new = write_puffin(tmp_path / "new.puffin", dv_blob([2, 4]), f.file_path, 2)
    got = run(commit(deleted_rows(f, [ref(old)], [ref(new, 3)], [ref(new, 3)])))
    assert rows(got) == [("DELETE", 4, "n4"), ("INSERT", 1, "n1")]


def test_row_deleted_twice_in_one_commit_is_one_delete(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b")])
    one = position_deletes(tmp_path / "1.parquet", [(f.file_path, 1)])
    two = position_deletes(tmp_path / "2.parquet", [(f.file_path, 1)])
    got = run(commit(deleted_rows(f, [], [ref(one, 3), ref(two, 3)],
                                  [ref(one, 3), ref(two, 3)])))
    assert rows(got) == [("DELETE", 2, "b")]


def test_equality_delete_of_a_key_without_live_row_gives_no_event(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b"), (3, "c")])
    gone = position_deletes(tmp_path / "p.parquet", [(f.file_path, 1)])  # id 2, before
    keys = pa.table({"id": pa.array([2, 3, 9], pa.int64())},
                    schema=pa.schema([F("id", pa.int64(), 1)]))
    eq = equality_deletes(tmp_path / "eq.parquet", keys, (1,))
    got = run(commit(deleted_rows(f, [ref(gone)], [ref(gone), ref(eq, 3)], [ref(eq, 3)])))
    assert rows(got) == [("DELETE", 3, "c")]


def test_null_equality_keys_delete_rows_with_null_keys(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, None), (2, "b"), (None, "c")])
    keys = pa.table({"name": pa.array([None], pa.string())},
                    schema=pa.schema([F("name", pa.string(), 2)]))
    eq = equality_deletes(tmp_path / "eq.parquet", keys, (2,))
    got = run(commit(deleted_rows(f, [], [ref(eq, 3)], [ref(eq, 3)])))
    assert rows(got) == [("DELETE", 1, None)]


def test_equality_key_outside_the_projection_is_still_resolved(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b")])
    keys = pa.table({"name": ["b"]}, schema=pa.schema([F("name", pa.string(), 2)]))
    eq = equality_deletes(tmp_path / "eq.parquet", keys, (2,))
    ids_only = Schema((NestedField(1, "id", LONG),))
    got = run(commit(deleted_rows(f, [], [ref(eq, 3)], [ref(eq, 3)])), ids_only)
    assert got.select(["_change_type", "id"]).to_pylist() == [
        {"_change_type": "DELETE", "id": 2}]


# -- reading only what changed -------------------------------------------------------------------


def test_read_with_delete_sets_masks_each_set_and_reads_only_changed_row_groups(
        tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(i, f"n{i}") for i in range(100)], row_group_size=10)
    before = position_deletes(tmp_path / "b.parquet", [(f.file_path, 3)])
    after = position_deletes(tmp_path / "a.parquet", [(f.file_path, 3), (f.file_path, 57)])
    got = list(read_with_delete_sets(f, SCHEMA, IO, [[ref(before)], [ref(after)]],
                                     batch_size=4, deletes=DeleteLoader(IO),
                                     positions_of_interest=pa.array([57], pa.int64())))
    # Row group 50..59 only, read in batches of 4: only the batch holding 57 is yielded.
    assert [b.first for b in got] == [54]
    item = got[0]
    assert item.batch.column("id").to_pylist() == [54, 55, 56, 57]
    assert item.live[0] is None
    assert item.live[1].to_pylist() == [True, True, True, False]
    everything = list(read_with_delete_sets(f, SCHEMA, IO, [[ref(before)], []],
                                            batch_size=1000))
    assert [b.first for b in everything] == [0]  # one batch per run of row groups
    assert everything[0].live[0].to_pylist()[:5] == [True, True, True, False, True]
    assert everything[0].live[1] is None
    assert list(read_with_delete_sets(f, SCHEMA, IO, [[]], positions_of_interest=pa.array(
        [], pa.int64()))) == []


def test_deleted_rows_read_only_the_row_groups_of_new_positions(tmp_path, monkeypatch) -> None:
    f = data(tmp_path, "f.parquet", [(i, f"n{i}") for i in range(1000)], row_group_size=100)
    d = position_deletes(tmp_path / "d.parquet", [(f.file_path, 555)])
    reads: list[int] = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        if self.metadata.num_rows == 1000:  # the data file, not the delete file
            reads.extend(kwargs.get("row_groups") or [])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    got = run(commit(deleted_rows(f, [], [ref(d, 3)], [ref(d, 3)])))
    assert rows(got) == [("DELETE", 555, "n555")]
    assert reads == [5]


# -- the payload fast path -----------------------------------------------------------------------


def test_payload_rows_are_emitted_without_opening_the_data_file(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(i, f"n{i}") for i in range(5)])
    before = position_deletes(tmp_path / "before.parquet", [(f.file_path, 3)])
    one = position_deletes_with_rows(tmp_path / "one.parquet", [
        (f.file_path, 3, {"id": 3, "name": "n3"}),  # already deleted before
        (f.file_path, 1, {"id": 1, "name": "n1"}),
        ("elsewhere.parquet", 0, {"id": 99, "name": "x"}),
    ], ROW_FIELDS)
    two = position_deletes_with_rows(tmp_path / "two.parquet", [  # position 1 again
        (f.file_path, 1, {"id": 1, "name": "n1"}),
        (f.file_path, 4, {"id": 4, "name": "n4"}),
    ], ROW_FIELDS)
    io = GuardedIO(IO, {f.file_path})
    got = run(commit(deleted_rows(f, [ref(before)], [ref(before), ref(one, 3), ref(two, 3)],
                                  [ref(one, 3), ref(two, 3)])), io=io)
    assert rows(got) == [("DELETE", 1, "n1"), ("DELETE", 4, "n4")]


def test_payload_rows_matching_older_equality_deletes_are_dropped(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b"), (3, "c")])
    keys = pa.table({"name": ["b"]}, schema=pa.schema([F("name", pa.string(), 2)]))
    eq = equality_deletes(tmp_path / "eq.parquet", keys, (2,))
    pos = position_deletes_with_rows(tmp_path / "pos.parquet", [
        (f.file_path, 1, {"id": 2, "name": "b"}), (f.file_path, 2, {"id": 3, "name": "c"})],
        ROW_FIELDS)
    io = GuardedIO(IO, {f.file_path})
    ids_only = Schema((NestedField(1, "id", LONG),))  # the key column is not projected
    got = run(commit(deleted_rows(f, [ref(eq)], [ref(eq), ref(pos, 3)], [ref(pos, 3)])),
              ids_only, io=io)
    assert got.select(["_change_type", "id"]).to_pylist() == [
        {"_change_type": "DELETE", "id": 3}]


def test_payload_projected_by_field_id_to_the_end_schema(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b")])
    pos = position_deletes_with_rows(tmp_path / "pos.parquet",
                                     [(f.file_path, 0, {"id": 1, "name": "a"})], ROW_FIELDS)
    evolved = Schema((NestedField(2, "label", STRING), NestedField(1, "key", LONG)))
    got = run(commit(deleted_rows(f, [], [ref(pos, 3)], [ref(pos, 3)])), evolved,
              io=GuardedIO(IO, {f.file_path}))
    assert got.select(["label", "key", "_change_type"]).to_pylist() == [
        {"label": "a", "key": 1, "_change_type": "DELETE"}]


def test_payload_without_a_projected_column_falls_back_to_reading_data(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b")])
    partial = position_deletes_with_rows(tmp_path / "pos.parquet",
                                         [(f.file_path, 1, {"id": 2})], ROW_FIELDS[:1])
    io = GuardedIO(IO, set())
    got = run(commit(deleted_rows(f, [], [ref(partial, 3)], [ref(partial, 3)])), io=io)
    assert rows(got) == [("DELETE", 2, "b")]
    assert f.file_path in io.opened


def test_position_deletes_without_payload_read_the_data_file(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b")])
    d = position_deletes(tmp_path / "d.parquet", [(f.file_path, 0)])
    io = GuardedIO(IO, {f.file_path})
    with pytest.raises(AssertionError, match="must not be read"):
        run(commit(deleted_rows(f, [], [ref(d, 3)], [ref(d, 3)])), io=io)


# -- equality deletes: resolve (default) or trust the payload --------------------------------------


def _full_row_eq(tmp_path, keys: list[tuple[int, str]]) -> DataFile:
    table = pa.table({"id": [k[0] for k in keys], "name": [k[1] for k in keys]}, schema=ARROW)
    return equality_deletes(tmp_path / "eq.parquet", table, (1,))


def test_trust_payload_emits_full_row_equality_deletes_without_reading_data(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b")])
    g = data(tmp_path, "g.parquet", [(3, "c")])
    eq = _full_row_eq(tmp_path, [(2, "b"), (9, "zz")])
    changes = commit(deleted_rows(f, [], [ref(eq, 3)], [ref(eq, 3)]),
                     deleted_rows(g, [], [ref(eq, 3)], [ref(eq, 3)]))
    io = GuardedIO(IO, {f.file_path, g.file_path})
    trusted = run(changes, io=io, equality_deletes="trust-payload")
    # Emitted once per commit, as written: even the key no row had (the writer's promise).
    assert rows(trusted) == [("DELETE", 2, "b"), ("DELETE", 9, "zz")]
    assert rows(run(changes)) == [("DELETE", 2, "b")]  # resolve: the no-op delete vanishes


def test_trust_payload_does_not_double_count_rows_also_deleted_by_position(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b"), (3, "c")])
    eq = _full_row_eq(tmp_path, [(2, "b")])
    pos = position_deletes(tmp_path / "p.parquet", [(f.file_path, 1), (f.file_path, 2)])
    changes = commit(deleted_rows(f, [], [ref(eq, 3), ref(pos, 3)], [ref(eq, 3), ref(pos, 3)]))
    got = run(changes, equality_deletes="trust-payload")
    assert sorted(rows(got)) == [("DELETE", 2, "b"), ("DELETE", 3, "c")]


def test_trust_payload_needs_every_projected_column(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(1, "a"), (2, "b")])
    keys = pa.table({"id": pa.array([2, 9], pa.int64())},
                    schema=pa.schema([F("id", pa.int64(), 1)]))
    eq = equality_deletes(tmp_path / "eq.parquet", keys, (1,))
    got = run(commit(deleted_rows(f, [], [ref(eq, 3)], [ref(eq, 3)])),
              equality_deletes="trust-payload")
    assert rows(got) == [("DELETE", 2, "b")]


def test_options_are_validated() -> None:
    with pytest.raises(ChangeOptionError, match="trust-payload"):
        ChangeOptions(equality_deletes="trust")
    with pytest.raises(ChangeOptionError, match="delta"):
        ChangeOptions(change_type_names="spark")


# -- carry-over, updates, names, net ------------------------------------------------------------


def _copy_on_write_update(tmp_path):
    old = data(tmp_path, "old.parquet", [(1, "a"), (2, "b"), (3, "c")])
    new = data(tmp_path, "new.parquet", [(1, "a"), (2, "B"), (3, "c")])
    return commit(removed(old), added(new))


def test_copy_on_write_carry_over_is_removed_by_default(tmp_path) -> None:
    changes = _copy_on_write_update(tmp_path)
    assert rows(run(changes)) == [("DELETE", 2, "b"), ("INSERT", 2, "B")]
    raw = rows(run(changes, keep_carryover=True))
    assert raw == [("DELETE", 1, "a"), ("DELETE", 2, "b"), ("DELETE", 3, "c"),
                   ("INSERT", 1, "a"), ("INSERT", 2, "B"), ("INSERT", 3, "c")]


def test_update_pairing_and_delta_names(tmp_path) -> None:
    changes = _copy_on_write_update(tmp_path)
    assert rows(run(changes, compute_updates=True, identifier_field_ids=(1,))) == [
        ("UPDATE_BEFORE", 2, "b"), ("UPDATE_AFTER", 2, "B")]
    assert rows(run(changes, compute_updates=True, identifier_field_ids=(1,),
                    change_type_names="delta")) == [
        ("update_preimage", 2, "b"), ("update_postimage", 2, "B")]
    assert rows(run(changes, change_type_names="delta")) == [
        ("delete", 2, "b"), ("insert", 2, "B")]
    assert [r[0] for r in rows(run(changes, change_type_names="delta",
                                   keep_carryover=True))] == ["delete"] * 3 + ["insert"] * 3


def test_update_pairing_needs_the_identifier_column(tmp_path) -> None:
    changes = _copy_on_write_update(tmp_path)
    names_only = Schema((NestedField(2, "name", STRING),))
    with pytest.raises(MissingIdentifierColumnError, match="field id 1"):
        run(changes, names_only, compute_updates=True, identifier_field_ids=(1,))


def test_carry_over_with_nested_columns_and_nan(tmp_path) -> None:
    point = pa.struct([F("x", pa.float64(), 11), F("y", pa.float64(), 12)])
    arrow = pa.schema([F("id", pa.int64(), 1), F("p", point, 2),
                       F("tags", pa.list_(F("element", pa.string(), 13)), 3),
                       F("v", pa.float64(), 4)])
    schema = Schema((
        NestedField(1, "id", LONG),
        NestedField(2, "p", StructType((NestedField(11, "x", DOUBLE),
                                        NestedField(12, "y", DOUBLE)))),
        NestedField(3, "tags", ListType(13, STRING)),
        NestedField(4, "v", DOUBLE),
    ))
    nan = math.nan
    before = [{"id": 1, "p": {"x": nan, "y": 1.0}, "tags": ["a", None], "v": nan},
              {"id": 2, "p": None, "tags": None, "v": None},
              {"id": 3, "p": {"x": None, "y": None}, "tags": [], "v": 0.5}]
    after = [dict(before[0]), dict(before[1]), {**before[2], "tags": ["changed"]}]
    old = write_parquet(tmp_path / "old.parquet", pa.Table.from_pylist(before, schema=arrow))
    new = write_parquet(tmp_path / "new.parquet", pa.Table.from_pylist(after, schema=arrow))
    got = run(commit(removed(old), added(new)), schema)
    assert [(r["_change_type"], r["id"], r["tags"]) for r in got.to_pylist()] == [
        ("DELETE", 3, []), ("INSERT", 3, ["changed"])]


def test_append_only_commit_streams_in_batches(tmp_path) -> None:
    f = data(tmp_path, "f.parquet", [(i, "x") for i in range(10)])
    info = ChangeCommit(0, 1, 1, 0, "append")
    changes = CommitChanges(info, (AddedRowsTask(info, f, 1),))
    sizes = [b.num_rows for b in reconstruct(changes, SCHEMA, IO, batch_size=4)]
    assert sizes == [4, 4, 2]


def test_compared_commit_is_emitted_in_batch_size_chunks(tmp_path) -> None:
    old = data(tmp_path, "old.parquet", [(i, "x") for i in range(10)])
    new = data(tmp_path, "new.parquet", [(i, "y") for i in range(10)])
    sizes = [b.num_rows for b in reconstruct(commit(removed(old), added(new)), SCHEMA, IO,
                                             batch_size=8)]
    assert sum(sizes) == 20 and max(sizes) <= 8


def test_row_filter_keeps_changes_whose_row_matches(tmp_path) -> None:
    changes = _copy_on_write_update(tmp_path)
    name_is_b = BoundPredicate(Op.EQ, 2, STRING, ("b",), "name")
    batches = reconstruct(changes, SCHEMA, IO, row_filter=name_is_b,
                          options=ChangeOptions(compute_updates=True, identifier_field_ids=(1,)))
    got = pa.Table.from_batches(list(batches), schema=change_schema(SCHEMA))
    assert rows(got) == [("DELETE", 2, "b")]


def test_net_changes_over_a_range(tmp_path) -> None:
    one = data(tmp_path, "1.parquet", [(1, "a"), (2, "b")])
    two = data(tmp_path, "2.parquet", [(3, "c")])
    gone_a = position_deletes(tmp_path / "d.parquet", [(one.file_path, 0)])
    new_b = data(tmp_path, "3.parquet", [(2, "B")])
    gone_b = position_deletes(tmp_path / "e.parquet", [(one.file_path, 1)])
    commits = [
        commit(added(one), ordinal=0, snapshot_id=1, seq=1),
        commit(added(two), deleted_rows(one, [], [ref(gone_a)], [ref(gone_a)]),
               ordinal=1, snapshot_id=2, seq=2),
        commit(added(new_b), deleted_rows(one, [ref(gone_a)], [ref(gone_a), ref(gone_b, 3)],
                                          [ref(gone_b, 3)]), ordinal=2, snapshot_id=3, seq=3),
    ]
    every = list(reconstruct_range(commits, SCHEMA, IO))
    assert sum(b.num_rows for b in every) == 2 + 2 + 2
    net = pa.Table.from_batches(list(reconstruct_range(commits, SCHEMA, IO,
                                                       options=ChangeOptions(net=True))))
    assert sorted(rows(net)) == [("INSERT", 2, "B"), ("INSERT", 3, "c")]
    by_id = {r["id"]: r["_commit_snapshot_id"] for r in net.to_pylist()}
    assert by_id == {2: 3, 3: 2}  # metadata of each row's last change


def test_net_changes_pair_updates_across_commits(tmp_path) -> None:
    one = data(tmp_path, "1.parquet", [(1, "a")])
    two = data(tmp_path, "2.parquet", [(1, "A")])
    three = data(tmp_path, "3.parquet", [(1, "AA")])
    commits = [commit(removed(one), added(two), ordinal=0, snapshot_id=5),
               commit(removed(two), added(three), ordinal=1, snapshot_id=6)]
    options = ChangeOptions(net=True, compute_updates=True, identifier_field_ids=(1,))
    net = pa.Table.from_batches(list(reconstruct_range(commits, SCHEMA, IO, options=options)))
    assert rows(net) == [("UPDATE_BEFORE", 1, "a"), ("UPDATE_AFTER", 1, "AA")]
    empty = list(reconstruct_range([], SCHEMA, IO, options=options))
    assert empty == []
