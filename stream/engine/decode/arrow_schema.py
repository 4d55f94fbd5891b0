"""Iceberg types as Arrow types, and Iceberg internal values as Arrow scalars.

The engine hands out `pyarrow` batches whose schema is the scanned table schema, with every
field (nested ones too) carrying its Iceberg field id in the field metadata under
`PARQUET:field_id`, the key pyarrow itself uses when reading and writing Parquet. Keeping the
ids on the output means a consumer (the change builder, a sink writing Parquet) can still
match columns by id after a rename.

| Iceberg                | Arrow                              |
| ---------------------- | ---------------------------------- |
| boolean                | bool                               |
| int / long             | int32 / int64                      |
| float / double         | float32 / float64                  |
| decimal(P, S)          | decimal128(P, S)                   |
| date                   | date32                             |
| time                   | time64('us')                       |
| timestamp[tz]          | timestamp('us'[, tz='UTC'])        |
| timestamp[tz]_ns       | timestamp('ns'[, tz='UTC'])        |
| string / binary        | string / binary                    |
| uuid / fixed[L]        | fixed_size_binary(16) / (L)        |
| unknown                | null                               |
| geometry / geography   | binary (WKB, as the spec stores)   |

Example::

    >>> to_arrow_schema(Schema((NestedField(1, "id", LONG, required=True),)))
    id: int64 not null
      -- field metadata --
      PARQUET:field_id: '1'
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

import pyarrow as pa

from meltwater.planner.errors import UnsupportedFeatureError
from meltwater.planner.spec.types import (
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)

FIELD_ID_KEY = b"PARQUET:field_id"

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp_ns": pa.timestamp("ns"),
    "timestamptz_ns": pa.timestamp("ns", tz="UTC"),
    "string": pa.string(),
    "binary": pa.binary(),
    "uuid": pa.binary(16),
    "unknown": pa.null(),
    "geometry": pa.binary(),
    "geography": pa.binary(),
}


def to_arrow_type(type_: IcebergType) -> pa.DataType:
    """The Arrow type the engine outputs for an Iceberg type (nested fields keep their ids)."""
    if isinstance(type_, PrimitiveType):
        kind = type_.kind
        if kind == "decimal":
            return pa.decimal128(type_.precision, type_.scale)
        if kind == "fixed":
            return pa.binary(type_.length)
        found = _PRIMITIVES.get(kind)
        if found is None:
            raise UnsupportedFeatureError(f"Iceberg type {type_} has no Arrow mapping in meltwater")
        return found
    if isinstance(type_, StructType):
        return pa.struct([to_arrow_field(f) for f in type_.fields])
    if isinstance(type_, ListType):
        return pa.list_(to_arrow_field(type_.element_field))
    if isinstance(type_, MapType):
        return pa.map_(to_arrow_field(type_.key_field), to_arrow_field(type_.value_field))
    raise UnsupportedFeatureError(f"Iceberg type {type_} has no Arrow mapping in meltwater")


def to_arrow_field(field: NestedField) -> pa.Field:
    """An Arrow field with the Iceberg field id in its metadata; required means not null."""
    return pa.field(field.name, to_arrow_type(field.type), nullable=not field.required,
                    metadata={FIELD_ID_KEY: str(field.field_id).encode()})


def to_arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of batches read with `schema` as the projection."""
    return pa.schema([to_arrow_field(f) for f in schema.fields])


def nullable_except(schema: pa.Schema, kept: Collection[str] | None) -> pa.Schema:
    """`schema` with every top-level field not in `kept` nullable (None: as it is): the
    table columns of change rows whose departing rows keep only their key
    (`change_schema.key_image_columns`)."""
    if kept is None:
        return schema
    return pa.schema([f if f.name in kept else f.with_nullable(True) for f in schema],
                     metadata=schema.metadata)


def field_id(field: pa.Field) -> int | None:
    """The Iceberg field id an Arrow field carries, if any.

    Parquet files carry it as `PARQUET:field_id` (pyarrow's key); ORC files written by
    Iceberg carry it as the type attribute `iceberg.id`, which pyarrow exposes the same way;
    Avro-converted fields use `PARQUET:field_id` too (see `meltwater.stream.engine.scans.reader`).
    """
    metadata = field.metadata
    if not metadata:
        return None
    raw = metadata.get(FIELD_ID_KEY) or metadata.get(b"iceberg.id") or metadata.get(b"field_id")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def to_arrow_value(value: Any, type_: PrimitiveType) -> Any:
    """An internal value (see `meltwater.planner.spec.types`) as a value pyarrow accepts for the
    column's Arrow type: pyarrow takes ints for dates, times and timestamps in the type's unit,
    which is exactly the internal form, so only UUIDs need converting (to their 16 bytes)."""
    if value is None:
        return None
    if type_.kind == "uuid" and isinstance(value, uuid.UUID):
        return value.bytes
    return value
