"""Every Iceberg type through a mirror and back, in SQLite and PostgreSQL, edge values included.

Each type is written as a value column and, where it can be a key, as the key column that
deletes and updates find rows by; the SQL type the mirror declares is checked against the
table in `meltwater.sinks.sql_schema`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from mirror_read import fetch, read_mirror

from corpus.compare import row_multiset
from meltwater.planner.spec.types import (
    INT,
    LONG,
    STRING,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)
from meltwater.sinks import Mirror
from meltwater.sinks.errors import InvalidKeyColumnError, UnsupportedTypeError
from meltwater.stream.engine.decode.arrow_schema import to_arrow_type

UTC = dt.timezone.utc
NAN, INF = float("nan"), float("inf")
U1, U2 = uuid.UUID("0a0b0c0d-1111-4222-8333-444455556666"), uuid.UUID(int=0)

# Iceberg type -> (values including edge cases, SQLite declared type, PostgreSQL type)
PRIMITIVES: dict[str, tuple[list, str, str]] = {
    "boolean": ([True, False, None], "INTEGER", "boolean"),
    "int": ([0, -2**31, 2**31 - 1, None], "INTEGER", "integer"),
    "long": ([0, -2**63, 2**63 - 1, None], "INTEGER", "bigint"),
    "float": ([1.5, -72.0048828125, NAN, INF, -INF, 3.4028234663852886e38,
               1.401298464324817e-45, None], "REAL", "real"),
    "double": ([0.1, NAN, INF, -INF, 1.7976931348623157e308, 5e-324, -1e-300, None],
               "REAL", "double precision"),
    "decimal(10,2)": ([Decimal("-12.50"), Decimal("0.00"), Decimal("99999999.99"), None],
                      "TEXT", "numeric(10,2)"),
    "decimal(38,10)": ([Decimal("1E-10"), Decimal("-0.0000001"),
                        Decimal("9999999999999999999999999999.9999999999"), None],
                       "TEXT", "numeric(38,10)"),
    "date": ([dt.date(1970, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31),
              dt.date(2024, 2, 29), None], "TEXT", "date"),
    "time": ([dt.time(0, 0), dt.time(23, 59, 59, 999999), dt.time(12, 34, 56, 1), None],
             "TEXT", "time without time zone"),
    "timestamp": ([dt.datetime(1970, 1, 1), dt.datetime(2024, 1, 1, 8, 37, 10, 820371),
                   dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), None],
                  "TEXT", "timestamp without time zone"),
    "timestamptz": ([dt.datetime(1970, 1, 1, tzinfo=UTC),
                     dt.datetime(2024, 1, 1, 8, 37, 10, 820371, tzinfo=UTC),
                     dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None],
                    "TEXT", "timestamp with time zone"),
    "string": (["", "héllo 😀", 'quote" comma, newline\n', "tab\t\\ back\\slash", "NULL",
                None], "TEXT", "text"),
    "uuid": ([U1.bytes, U2.bytes, None], "TEXT", "uuid"),
    "binary": ([b"", b"\x00\xff", bytes(range(256)), b"\\x00", None], "BLOB", "bytea"),
    "fixed[4]": ([b"abcd", b"\x00\x00\x00\x00", b"\xff\n,\"", None], "BLOB", "bytea"),
}
KEY_TYPES = ["boolean", "int", "long", "decimal(10,2)", "decimal(38,10)", "date", "time",
             "timestamp", "timestamptz", "string", "uuid", "binary", "fixed[4]"]

_INNER = StructType((NestedField(10, "d", PrimitiveType("decimal(5,2)")),
                     NestedField(11, "t", PrimitiveType("timestamptz")),
                     NestedField(12, "b", PrimitiveType("binary")),
                     NestedField(13, "f", PrimitiveType("double")),
                     NestedField(14, "u", PrimitiveType("uuid")),
                     NestedField(15, "day", PrimitiveType("date"))))
NESTED: dict[str, tuple[IcebergType, list]] = {
    "struct": (StructType((NestedField(3, "x", INT), NestedField(4, "y", STRING))),
               [{"x": 1, "y": "a"}, {"x": None, "y": None}, None]),
    "list": (ListType(3, INT), [[1, 2], [], [None], None]),
    "map_string_keys": (MapType(3, STRING, 4, INT), [[("a", 1), ("b", None)], [], None]),
    "map_int_keys": (MapType(3, INT, 4, STRING), [[(1, "a"), (-2, None)], None]),
    "struct_of_everything": (_INNER, [
        {"d": Decimal("-1.25"), "t": dt.datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=UTC),
         "b": b"\x00\x01", "f": NAN, "u": U1.bytes, "day": dt.date(2020, 2, 2)},
        {"d": None, "t": None, "b": None, "f": -INF, "u": None, "day": None}, None]),
    "list_of_structs": (ListType(3, StructType((NestedField(4, "k", LONG),))),
                        [[{"k": 1}, None, {"k": None}], None]),
}


def _batch(schema: Schema, columns: dict[str, list], kinds: list[str],
           ordinal: int = 0) -> pa.Table:
    data = {f.name: pa.array(columns[f.name], to_arrow_type(f.type)) for f in schema.fields}
    data["_change_type"] = pa.array(kinds)
    data["_change_ordinal"] = pa.array([ordinal] * len(kinds), pa.int32())
    return pa.table(data)


def _value_schema(type_: IcebergType) -> Schema:
    return Schema((NestedField(1, "id", LONG, required=True), NestedField(2, "c", type_)),
                  identifier_field_ids=(1,))


def _sql_type(url: str, table: str, column: str) -> str:
    if url.startswith("sqlite:"):
        rows = fetch(url, f'PRAGMA table_info("{table}")')
        return next(r[2] for r in rows if r[1] == column)
    return fetch(url, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                      "WHERE attrelid = to_regclass(?) AND attname = ?",
                 (f'"{table}"', column))[0][0]


def _round_trip(url: str, schema: Schema, values: list) -> None:
    with Mirror(url, table="typed", source=schema) as mirror:
        ids = list(range(len(values)))
        mirror.apply(0, _batch(schema, {"id": ids, "c": values}, ["INSERT"] * len(values)))
        expected = pa.table({"id": pa.array(ids, pa.int64()),
                             "c": pa.array(values, to_arrow_type(schema.fields[1].type))})
        assert row_multiset(read_mirror(url, "typed", schema)) == row_multiset(expected)


@pytest.mark.parametrize("type_name", sorted(PRIMITIVES))
def test_primitive_round_trip(database, type_name):
    values, sqlite_type, pg_type = PRIMITIVES[type_name]
    schema = _value_schema(PrimitiveType(type_name))
    _round_trip(database, schema, values)
    expected = sqlite_type if database.startswith("sqlite:") else pg_type
    assert _sql_type(database, "typed", "c") == expected


@pytest.mark.parametrize("name", sorted(NESTED))
def test_nested_round_trip_as_json(database, name):
    type_, values = NESTED[name]
    _round_trip(database, _value_schema(type_), values)
    declared = _sql_type(database, "typed", "c")
    assert declared == ("TEXT" if database.startswith("sqlite:") else "jsonb")


@pytest.mark.parametrize("type_name", KEY_TYPES)
def test_every_key_type_finds_rows_for_deletes_and_updates(database, type_name):
    keys = [v for v in PRIMITIVES[type_name][0] if v is not None]
    type_ = PrimitiveType(type_name)
    schema = Schema((NestedField(1, "k", type_, required=True), NestedField(2, "v", STRING)),
                    identifier_field_ids=(1,))
    with Mirror(database, table="keyed", source=schema) as mirror:
        mirror.apply(0, _batch(schema, {"k": keys, "v": ["old"] * len(keys)},
                               ["INSERT"] * len(keys)))
        gone, changed = keys[0], keys[1]
        mirror.apply(1, _batch(schema, {"k": [gone, changed, changed],
                                        "v": ["old", "old", "new"]},
                               ["DELETE", "UPDATE_BEFORE", "UPDATE_AFTER"], ordinal=1))
        left = read_mirror(database, "keyed", schema).to_pylist()
        arrow = to_arrow_type(type_)
        expected = [{"k": pa.scalar(k, arrow).as_py(), "v": "new" if k == changed else "old"}
                    for k in keys[1:]]
        assert row_multiset(pa.Table.from_pylist(left)) == \
            row_multiset(pa.Table.from_pylist(expected))


def test_nanosecond_timestamps_are_kept_in_sqlite_and_refused_by_postgres(sqlite_database,
                                                                          pg_database):
    schema = _value_schema(PrimitiveType("timestamp_ns"))
    with Mirror(sqlite_database, table="ns", source=schema) as mirror:
        mirror.apply(0, _batch(schema, {"id": [1], "c": [1_700_000_000_123_456_789]},
                               ["INSERT"]))
    stored = fetch(sqlite_database, 'SELECT c FROM "ns"')
    assert stored == [("2023-11-14T22:13:20.123456789",)]
    with pytest.raises(UnsupportedTypeError, match="column 'c' of type timestamp_ns cannot be "
                                              "mirrored to postgresql: PostgreSQL timestamps"):
        Mirror(pg_database, table="ns", source=schema)


def test_float_keys_are_refused(sqlite_database):
    schema = Schema((NestedField(1, "x", PrimitiveType("double")),))
    with pytest.raises(InvalidKeyColumnError, match=r"column 'x' .* has type double, which cannot "
                                               r"be a key column"):
        Mirror(sqlite_database, table="t", source=schema, key_columns=["x"])


def test_sqlite_text_forms_are_the_documented_ones(sqlite_database):
    schema = Schema((NestedField(1, "id", LONG, required=True),
                     NestedField(2, "ts", PrimitiveType("timestamptz")),
                     NestedField(3, "d", PrimitiveType("decimal(10,3)")),
                     NestedField(4, "nan", PrimitiveType("double")),
                     NestedField(5, "u", PrimitiveType("uuid")),
                     NestedField(6, "m", MapType(7, STRING, 8, PrimitiveType("date")))),
                    identifier_field_ids=(1,))
    with Mirror(sqlite_database, table="forms", source=schema) as mirror:
        mirror.apply(0, _batch(schema, {
            "id": [1], "ts": [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)],
            "d": [Decimal("-1.500")], "nan": [NAN], "u": [U1.bytes],
            "m": [[("a", dt.date(2024, 1, 1))]]}, ["INSERT"]))
    assert fetch(sqlite_database, 'SELECT ts, d, nan, u, m FROM "forms"') == [(
        "2024-01-02T03:04:05.000000+00:00", "-1.500", "NaN", str(U1),
        '{"a":"2024-01-01"}')]
