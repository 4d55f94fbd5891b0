"""Arrow columns -> the values a mirror table stores, column at a time.

Each column is first cast to the Arrow type meltwater's engine gives its Iceberg type
(`to_arrow_type`), so batches from Spark (timestamps in the session's time zone, other
widths) store the same values as batches from `meltwater.stream.changes`. Then:

- `sqlite_values` gives the Python values `sqlite3` binds (see `sql_schema` for what each
  type becomes), and
- `postgres_text` gives an Arrow string column in PostgreSQL's input syntax, for COPY.

Conversions run in `pyarrow.compute` except where Arrow has no kernel: uuids, binary as
PostgreSQL hex, the rare tiny decimals Arrow prints in E notation, and nested values.

Nested values (struct, list, map) become JSON text: a struct is an object by field name, a
list an array, a map with string keys an object and any other map an array of
`{"key": k, "value": v}`. Inside, decimals are strings (exact), dates, times and timestamps
the ISO text the top-level columns use, binary base64, uuids canonical text, and NaN and
infinities the strings "NaN", "Infinity" and "-Infinity" (JSON has no such numbers).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.spec.types import IcebergType, ListType, MapType, PrimitiveType, StructType
from meltwater.sinks.sql_schema import Column
from meltwater.stream.engine.decode.arrow_schema import to_arrow_type

_NATIVE_SQLITE = ("int", "long", "string", "binary", "fixed", "geometry", "geography")
_ISO = "%Y-%m-%dT%H:%M:%S"  # Arrow prints the fraction of %S at the type's unit
_UTC = "+00:00"


def conform(array: pa.Array | pa.ChunkedArray, column: Column) -> pa.Array:
    """The column as the Arrow type the engine gives its Iceberg type (tolerates Spark's)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    type_ = column.type
    if not isinstance(type_, PrimitiveType) or type_.kind == "unknown":
        return array
    if type_.kind == "uuid" and pa.types.is_string(array.type):
        return array  # Spark has no uuid type; its text is parsed by `_uuid_text`
    target = to_arrow_type(type_)
    return array if array.type == target else pc.cast(array, target)


def sqlite_values(array: pa.Array, column: Column) -> list[Any]:
    """The values `sqlite3` binds for one column of the mirror table."""
    type_ = column.type
    if not isinstance(type_, PrimitiveType):
        return _json_texts(array, type_)
    kind = type_.kind
    if kind in _NATIVE_SQLITE:
        return array.to_pylist()
    if kind == "boolean":
        return pc.cast(array, pa.int8()).to_pylist()
    if kind in ("float", "double"):
        values = array.to_pylist()
        for i in pc.indices_nonzero(pc.is_nan(array)).to_pylist():
            values[i] = "NaN"  # a REAL NaN would read back as NULL
        return values
    if kind == "unknown":
        return [None] * len(array)
    return text_form(array, type_).to_pylist()


def postgres_text(array: pa.Array, column: Column) -> pa.Array:
    """One column in PostgreSQL's text input syntax, as an Arrow string array."""
    type_ = column.type
    if not isinstance(type_, PrimitiveType):
        return pa.array(_json_texts(array, type_), pa.string())
    kind = type_.kind
    if kind in ("binary", "fixed", "geometry", "geography"):
        return pa.array([None if v is None else "\\x" + v.hex() for v in array.to_pylist()],
                        pa.string())
    if kind == "unknown":
        return pa.nulls(len(array), pa.string())
    if kind in ("boolean", "int", "long", "float", "double", "string"):
        return pc.cast(array, pa.string())  # floats print shortest-exact; nan, inf accepted
    return text_form(array, type_)


def text_form(array: pa.Array, type_: PrimitiveType) -> pa.Array:
    """Decimals, dates, times, timestamps and uuids as the text both databases accept."""
    kind = type_.kind
    if kind == "decimal":
        return _decimal_text(array)
    if kind in ("date", "time"):
        return pc.cast(array, pa.string())
    if kind in ("timestamp", "timestamp_ns"):
        return pc.strftime(array, format=_ISO)
    if kind in ("timestamptz", "timestamptz_ns"):
        return pc.binary_join_element_wise(pc.strftime(array, format=_ISO), _UTC, "")
    if kind == "uuid":
        return pa.array([_uuid_text(v) for v in array.to_pylist()], pa.string())
    raise AssertionError(f"no text form for {type_}")


def _decimal_text(array: pa.Array) -> pa.Array:
    """Plain decimal text; Arrow writes tiny values as 1E-10, which Python rewrites."""
    text = pc.cast(array, pa.string())
    tiny = pc.indices_nonzero(pc.match_substring(text, "E")).to_pylist()
    if not tiny:
        return text
    values = text.to_pylist()
    for i in tiny:
        values[i] = format(Decimal(values[i]), "f")
    return pa.array(values, pa.string())


def _uuid_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return str(uuid.UUID(bytes=value))
    return str(uuid.UUID(str(value)))


def _json_texts(array: pa.Array, type_: IcebergType) -> list[str | None]:
    return [None if v is None else json.dumps(json_value(v, type_), ensure_ascii=False,
                                              separators=(",", ":"), allow_nan=False)
            for v in array.to_pylist()]


def json_value(value: Any, type_: IcebergType) -> Any:
    """A Python value of an Iceberg type (as Arrow's to_pylist gives it) as plain JSON data."""
    if value is None:
        return None
    if isinstance(type_, StructType):
        return {f.name: json_value(value.get(f.name), f.type) for f in type_.fields}
    if isinstance(type_, ListType):
        return [json_value(v, type_.element_type) for v in value]
    if isinstance(type_, MapType):
        items = value.items() if isinstance(value, dict) else value
        if isinstance(type_.key_type, PrimitiveType) and type_.key_type.kind == "string":
            return {k: json_value(v, type_.value_type) for k, v in items}
        return [{"key": json_value(k, type_.key_type), "value": json_value(v, type_.value_type)}
                for k, v in items]
    if not isinstance(type_, PrimitiveType):
        raise TypeError(f"{type_!r} is not an Iceberg type")
    return _json_primitive(value, type_)


def _json_primitive(value: Any, type_: PrimitiveType) -> Any:
    kind = type_.kind
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, Decimal):
        return format(value, "f")
    if kind == "uuid":
        return _uuid_text(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dt.time):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value
