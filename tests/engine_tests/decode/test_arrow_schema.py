"""Iceberg -> Arrow types: every primitive, nested ids, nullability, value conversion."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from meltwater.planner.errors import UnsupportedFeatureError
from meltwater.planner.spec.types import (
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)
from meltwater.stream.engine.decode.arrow_schema import (
    field_id,
    to_arrow_schema,
    to_arrow_type,
    to_arrow_value,
)


def _scalar(value, type_: PrimitiveType) -> pa.Scalar:
    """An internal value as the engine puts it in a column of the type."""
    return pa.scalar(to_arrow_value(value, type_), type=to_arrow_type(type_))


@pytest.mark.parametrize(("iceberg", "arrow"), [
    ("boolean", pa.bool_()), ("int", pa.int32()), ("long", pa.int64()),
    ("float", pa.float32()), ("double", pa.float64()), ("decimal(38,10)", pa.decimal128(38, 10)),
    ("date", pa.date32()), ("time", pa.time64("us")), ("timestamp", pa.timestamp("us")),
    ("timestamptz", pa.timestamp("us", tz="UTC")), ("timestamp_ns", pa.timestamp("ns")),
    ("timestamptz_ns", pa.timestamp("ns", tz="UTC")), ("string", pa.string()),
    ("binary", pa.binary()), ("uuid", pa.binary(16)), ("fixed[3]", pa.binary(3)),
])
def test_primitives(iceberg: str, arrow: pa.DataType) -> None:
    assert to_arrow_type(PrimitiveType(iceberg)) == arrow


def test_variant_is_refused_with_a_clear_error() -> None:
    with pytest.raises(UnsupportedFeatureError, match="variant"):
        to_arrow_type(PrimitiveType("variant"))


def _schema() -> Schema:
    return Schema((
        NestedField(1, "id", PrimitiveType("long"), required=True),
        NestedField(2, "point", StructType((
            NestedField(3, "x", PrimitiveType("double")),
            NestedField(4, "y", PrimitiveType("double"), required=True)))),
        NestedField(5, "tags", ListType(6, PrimitiveType("string"), element_required=True)),
        NestedField(7, "props", MapType(8, PrimitiveType("string"), 9, PrimitiveType("int"))),
    ))


def test_nested_fields_carry_their_ids_and_nullability() -> None:
    schema = to_arrow_schema(_schema())
    assert schema.names == ["id", "point", "tags", "props"]
    assert [field_id(f) for f in schema] == [1, 2, 5, 7]
    assert not schema.field("id").nullable and schema.field("point").nullable
    point = schema.field("point").type
    assert [field_id(point.field(i)) for i in range(2)] == [3, 4]
    assert not point.field("y").nullable
    tags = schema.field("tags").type
    assert field_id(tags.value_field) == 6 and not tags.value_field.nullable
    props = schema.field("props").type
    assert field_id(props.key_field) == 8 and field_id(props.item_field) == 9
    assert not props.key_field.nullable


def test_field_ids_survive_a_parquet_round_trip(tmp_path) -> None:
    schema = to_arrow_schema(_schema())
    table = pa.Table.from_pylist([{"id": 1, "point": {"x": 1.0, "y": 2.0}, "tags": ["a"],
                                   "props": [("k", 1)]}], schema=schema)
    pq.write_table(table, tmp_path / "f.parquet")
    back = pq.ParquetFile(tmp_path / "f.parquet").schema_arrow
    assert field_id(back.field("props").type.item_field) == 9
    assert field_id(back.field("point").type.field("y")) == 4


@pytest.mark.parametrize(("value", "type_", "expected"), [
    (19000, "date", dt.date(2022, 1, 8)),
    (3_600_000_001, "time", dt.time(1, 0, 0, 1)),
    (1_700_000_000_000_000, "timestamp", dt.datetime(2023, 11, 14, 22, 13, 20)),
    (1_700_000_000_000_000, "timestamptz",
     dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)),
    (Decimal("1.50"), "decimal(9,2)", Decimal("1.50")),
    (uuid.UUID(int=5), "uuid", uuid.UUID(int=5).bytes),
    (b"\x01\x02", "fixed[2]", b"\x01\x02"),
    (None, "long", None),
])
def test_internal_values_become_scalars_of_the_column_type(value, type_, expected) -> None:
    scalar = _scalar(value, PrimitiveType(type_))
    assert scalar.type == to_arrow_type(PrimitiveType(type_))
    assert scalar.as_py() == expected


def test_nanosecond_timestamps_keep_their_nanoseconds() -> None:
    scalar = _scalar(1_700_000_000_000_000_123, PrimitiveType("timestamp_ns"))
    assert scalar.value == 1_700_000_000_000_000_123
