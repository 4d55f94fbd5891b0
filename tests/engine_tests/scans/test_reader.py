"""Reading tasks: field-id projection, schema evolution, splits, deletes, residuals, formats,
and every snapshot of the Iceberg Java corpus against what Iceberg Java reads."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import fastavro
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from corpus.compare import assert_same_rows
from engine_tests.helpers import (
    F,
    dv_blob,
    equality_deletes,
    position_deletes,
    task,
    write_parquet,
    write_puffin,
)
from engine_tests.iceberg_tasks import plan_tasks, snapshot_schema
from meltwater.planner.expressions.tree import BoundPredicate, Op
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.types import (
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.decode import formats as formats_module
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.scans.reader import read_task

IO = PyArrowFileIO()
INT, LONG = PrimitiveType("int"), PrimitiveType("long")
FLOAT, DOUBLE = PrimitiveType("float"), PrimitiveType("double")
STRING = PrimitiveType("string")


def read(t, projection: Schema, **options) -> pa.Table:
    batches = list(read_task(t, projection, IO, **options))
    for batch in batches:
        assert batch.schema.equals(to_arrow_schema(projection))
    return pa.Table.from_batches(batches, schema=to_arrow_schema(projection))


def _ids_file(tmp_path, n: int = 10, name: str = "data.parquet", **options) -> DataFile:
    schema = pa.schema([F("id", pa.int64(), 1), F("name", pa.string(), 2)])
    table = pa.table({"id": range(n), "name": [f"n{i}" for i in range(n)]}, schema=schema)
    return write_parquet(tmp_path / name, table, **options)


ID_NAME = Schema((NestedField(1, "id", LONG), NestedField(2, "name", STRING)))


def test_evolved_schema_rename_add_promote_and_default(tmp_path) -> None:
    old = pa.schema([F("a", pa.int32(), 1), F("f", pa.float32(), 2),
                     F("dec", pa.decimal128(5, 2), 3)])
    data = write_parquet(tmp_path / "old.parquet", pa.table(
        {"a": [1, None], "f": [1.5, 2.5], "dec": [Decimal("1.25"), None]}, schema=old))
    projection = Schema((
        NestedField(3, "amount", PrimitiveType("decimal(10,2)")),
        NestedField(1, "renamed", LONG),
        NestedField(4, "added", STRING),
        NestedField(5, "with_default", INT, initial_default=42),
        NestedField(2, "f", DOUBLE),
    ))
    got = read(task(data), projection)
    assert got.to_pylist() == [
        {"amount": Decimal("1.25"), "renamed": 1, "added": None, "with_default": 42, "f": 1.5},
        {"amount": None, "renamed": None, "added": None, "with_default": 42, "f": 2.5},
    ]


def test_nested_structs_lists_and_maps_are_matched_by_id(tmp_path) -> None:
    file_schema = pa.schema([
        F("s", pa.struct([F("old_x", pa.int32(), 11), F("y", pa.string(), 12)]), 10),
        F("l", pa.list_(F("element", pa.struct([F("v", pa.float32(), 22)]), 21)), 20),
        F("m", pa.map_(F("key", pa.string(), 31, False), F("value", pa.int32(), 32)), 30),
    ])
    rows = [{"s": {"old_x": 1, "y": "a"}, "l": [{"v": 1.0}, None], "m": [("k", 1)]},
            {"s": None, "l": None, "m": None},
            {"s": {"old_x": None, "y": "c"}, "l": [], "m": []}]
    data = write_parquet(tmp_path / "n.parquet", pa.Table.from_pylist(rows, schema=file_schema))
    projection = Schema((
        NestedField(10, "s", StructType((NestedField(13, "new", STRING),
                                         NestedField(11, "x", LONG)))),
        NestedField(20, "l", ListType(21, StructType((
            NestedField(22, "v", DOUBLE), NestedField(23, "w", INT))))),
        NestedField(30, "m", MapType(31, STRING, 32, LONG)),
    ))
    got = read(task(data), projection)
    assert got.to_pylist() == [
        {"s": {"new": None, "x": 1}, "l": [{"v": 1.0, "w": None}, None], "m": [("k", 1)]},
        {"s": None, "l": None, "m": None},
        {"s": {"new": None, "x": None}, "l": [], "m": []},
    ]


def test_split_reads_only_its_row_groups_and_keeps_file_positions(tmp_path) -> None:
    data = _ids_file(tmp_path, 100, row_group_size=25)
    meta = pq.ParquetFile(data.file_path).metadata
    starts = [meta.row_group(i).column(0).data_page_offset for i in range(4)]
    for i in range(4):
        if meta.row_group(i).column(0).has_dictionary_page:
            starts[i] = meta.row_group(i).column(0).dictionary_page_offset
    deletes = position_deletes(tmp_path / "pos.parquet",
                               [(data.file_path, 3), (data.file_path, 30), (data.file_path, 74)])
    split = task(data, deletes, start=starts[1], length=starts[3] - starts[1])
    got = read(split, ID_NAME).column("id").to_pylist()
    assert got == [i for i in range(25, 75) if i not in (30, 74)]
    whole = read(task(data, deletes), ID_NAME).column("id").to_pylist()
    assert whole == [i for i in range(100) if i not in (3, 30, 74)]


@pytest.mark.parametrize("rows_per_group", [20_000, 1_000])
def test_dictionary_encoded_strings_read_as_plain_strings(tmp_path, monkeypatch,
                                                          rows_per_group) -> None:
    """Dictionary pages in every row group: read as dictionaries and expanded, where row
    groups are large enough (else as plain strings). A tiny dictionary page limit makes
    later pages fall back to plain encoding mid-chunk; a column written without a
    dictionary is read as it is."""
    schema = pa.schema([F("id", pa.int64(), 1), F("tag", pa.string(), 2),
                        F("note", pa.string(), 3), F("raw", pa.binary(), 4)])
    n = 3 * rows_per_group
    table = pa.table({
        "id": range(n),
        "tag": [None if i % 7 == 0 else f"t{i % 5}" if i % rows_per_group < 500
                else f"unique {i}" for i in range(n)],
        "note": [f"note {i}" for i in range(n)],
        "raw": [None if i % 11 == 0 else bytes([i % 3]) * 4 for i in range(n)],
    }, schema=schema)
    data = write_parquet(tmp_path / "dict.parquet", table, row_group_size=rows_per_group,
                         use_dictionary=["tag", "raw"], dictionary_pagesize_limit=64,
                         data_page_size=256)
    metadata = pq.ParquetFile(data.file_path).metadata
    assert all(metadata.row_group(g).column(c).has_dictionary_page
               for g in range(3) for c in (1, 3))
    assert not metadata.row_group(0).column(2).has_dictionary_page
    decoded = []
    expand = formats_module._dictionaries_decoded
    monkeypatch.setattr(formats_module, "_dictionaries_decoded",
                        lambda batch: decoded.append(batch.num_rows) or expand(batch))
    projection = Schema((NestedField(1, "id", LONG), NestedField(2, "tag", STRING),
                         NestedField(3, "note", STRING),
                         NestedField(4, "raw", PrimitiveType("binary"))))
    deletes = position_deletes(tmp_path / "pos.parquet", [(data.file_path, 5)])
    got = read(task(data, deletes), projection, batch_size=7000)
    assert got.to_pylist() == [row for row in table.to_pylist() if row["id"] != 5]
    assert sum(decoded) == (n if rows_per_group >= 16_384 else 0)


def test_batches_are_bounded_by_batch_size(tmp_path) -> None:
    data = _ids_file(tmp_path, 1000)
    sizes = [b.num_rows for b in read_task(task(data), ID_NAME, IO, batch_size=128)]
    assert max(sizes) <= 128 and sum(sizes) == 1000


def test_deletion_vector_applies_to_its_data_file(tmp_path) -> None:
    data = _ids_file(tmp_path, 10)
    dv = write_puffin(tmp_path / "dv.puffin", dv_blob([0, 9, 4]), data.file_path, 3)
    assert read(task(data, dv), ID_NAME).column("id").to_pylist() == [1, 2, 3, 5, 6, 7, 8]


def test_equality_key_outside_the_projection_is_read_then_dropped(tmp_path) -> None:
    data = _ids_file(tmp_path, 6)
    eq = equality_deletes(tmp_path / "eq.parquet",
                          pa.table({"id": [1, 4]}, schema=pa.schema([F("id", pa.int32(), 1)])),
                          (1,))
    names = Schema((NestedField(2, "name", STRING),))
    got = read(task(data, eq), names)
    assert got.column_names == ["name"]
    assert got.column("name").to_pylist() == ["n0", "n2", "n3", "n5"]


def test_null_equality_key_deletes_rows_of_a_column_the_file_lacks(tmp_path) -> None:
    data = _ids_file(tmp_path, 3)
    eq = equality_deletes(tmp_path / "eq.parquet",
                          pa.table({"c": [None]}, schema=pa.schema([F("c", pa.string(), 7)])),
                          (7,))
    projection = Schema((*ID_NAME.fields, NestedField(7, "c", STRING)))
    assert read(task(data, eq), projection).num_rows == 0


def test_residual_filter_with_a_column_outside_the_projection(tmp_path) -> None:
    data = _ids_file(tmp_path, 10)
    residual = BoundPredicate(Op.GT_EQ, 1, LONG, (7,), "id")
    names = Schema((NestedField(2, "name", STRING),))
    got = read(dataclasses.replace(task(data), residual=residual), names)
    assert got.column("name").to_pylist() == ["n7", "n8", "n9"]


def test_all_deletes_and_residual_together(tmp_path) -> None:
    data = _ids_file(tmp_path, 20)
    pos = position_deletes(tmp_path / "pos.parquet", [(data.file_path, 2), ("other", 3)])
    eq = equality_deletes(tmp_path / "eq.parquet",
                          pa.table({"name": ["n5", "n11"]},
                                   schema=pa.schema([F("name", pa.string(), 2)])), (2,))
    residual = BoundPredicate(Op.LT, 1, LONG, (12,), "id")
    got = read(dataclasses.replace(task(data, pos, eq), residual=residual), ID_NAME)
    assert got.column("id").to_pylist() == [0, 1, 3, 4, 6, 7, 8, 9, 10]


def test_one_loader_reads_a_shared_delete_file_once(tmp_path) -> None:
    first = _ids_file(tmp_path, 5, "first.parquet")
    second = write_parquet(tmp_path / "second.parquet", pa.table(
        {"id": [7, 8]}, schema=pa.schema([F("id", pa.int64(), 1)])))
    pos = position_deletes(tmp_path / "pos.parquet",
                           [(first.file_path, 0), (second.file_path, 1)])
    loader = DeleteLoader(IO)
    projection = Schema((NestedField(1, "id", LONG),))
    got = [read(task(f, pos), projection, deletes=loader).column("id").to_pylist()
           for f in (first, second)]
    assert got == [[1, 2, 3, 4], [7]]
    assert loader.reads == 1


def test_orc_without_iceberg_ids_is_matched_by_name(tmp_path) -> None:
    path = tmp_path / "d.orc"
    orc.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int32()), "name": ["a", "b", "c"]}),
                    str(path))
    data = DataFile(FileContent.DATA, str(path), "ORC", 0, (), 3, path.stat().st_size)
    pos = position_deletes(tmp_path / "pos.parquet", [(str(path), 1)])
    got = read(task(data, pos), ID_NAME)
    assert got.to_pylist() == [{"id": 1, "name": "a"}, {"id": 3, "name": "c"}]


def test_avro_data_file_with_field_ids(tmp_path) -> None:
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "old_id", "type": "int", "field-id": 1},
        {"name": "name", "type": ["null", "string"], "field-id": 2},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string",
                                           "element-id": 4}], "field-id": 3},
    ]}
    path = tmp_path / "d.avro"
    with path.open("wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), [
            {"old_id": 1, "name": "a", "tags": ["x"]}, {"old_id": 2, "name": None, "tags": None}])
    data = DataFile(FileContent.DATA, str(path), "AVRO", 0, (), 2, path.stat().st_size)
    projection = Schema((NestedField(1, "id", LONG), NestedField(2, "name", STRING),
                         NestedField(3, "tags", ListType(4, STRING))))
    assert read(task(data), projection, batch_size=1).to_pylist() == [
        {"id": 1, "name": "a", "tags": ["x"]}, {"id": 2, "name": None, "tags": None}]


@pytest.mark.parametrize("dictionary_reads", ["by row-group size", "always"])
def test_every_corpus_snapshot_reads_as_iceberg_java_reads_it(corpus, monkeypatch,
                                                              dictionary_reads) -> None:
    """"always": the corpus's row groups are small, so dictionary reads are forced to check
    them on Iceberg Java's own dictionary-encoded files (and counted, to be sure they ran)."""
    decoded = []
    if dictionary_reads == "always":
        monkeypatch.setattr(formats_module, "_DICTIONARY_MIN_GROUP_ROWS", 0)
        expand = formats_module._dictionaries_decoded
        monkeypatch.setattr(formats_module, "_dictionaries_decoded",
                            lambda batch: decoded.append(batch.num_rows) or expand(batch))
    checked = 0
    for name, scenario in corpus.scenarios.items():
        for snapshot in scenario.snapshots:
            if snapshot.expired:
                continue
            schema = snapshot_schema(scenario.metadata_location, snapshot.snapshot_id)
            loader = DeleteLoader(IO)
            batches = [b for t in plan_tasks(scenario.metadata_location, snapshot.snapshot_id)
                       for b in read_task(t, schema, IO, batch_size=7, deletes=loader)]
            got = pa.Table.from_batches(batches, schema=to_arrow_schema(schema))
            assert_same_rows(got, snapshot.rows(), f"{name} {snapshot.label!r}")
            checked += 1
    assert checked >= 80
    assert (sum(decoded) > 0) == (dictionary_reads == "always")
