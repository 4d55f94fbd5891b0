"""Reads a mirror table back into Arrow, typed by the Iceberg schema, to compare with truth.

Written independently of `meltwater.sinks.sql_values` (from the storage rules documented in
`meltwater.sinks.sql_schema`), so a round trip through both proves the documented format,
not merely that one function inverts another.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sqlite3
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa

from meltwater.planner.spec.types import IcebergType, ListType, MapType, Schema, StructType
from meltwater.sinks.database import sqlite_path
from meltwater.stream.engine.decode.arrow_schema import to_arrow_type

_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def fetch(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    if url.startswith("sqlite:"):
        with sqlite3.connect(sqlite_path(url)) as conn:
            return conn.execute(sql, params).fetchall()
    with psycopg.connect(url) as conn:
        return conn.execute(sql.replace("?", "%s"), params).fetchall()


def mirror_columns(url: str, table: str) -> list[tuple[str, str]]:
    """The mirror table's columns in order: (name, declared SQL type)."""
    if url.startswith("sqlite:"):
        return [(r[1], r[2]) for r in fetch(url, f'PRAGMA table_info("{table}")')]
    return [tuple(r) for r in fetch(
        url, "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
             "WHERE attrelid = to_regclass(?) AND attnum > 0 AND NOT attisdropped "
             "ORDER BY attnum", (f'"{table}"',))]


def read_mirror(url: str, table: str, schema: Schema) -> pa.Table:
    """The mirror table's rows as Arrow, in the schema's columns and engine Arrow types."""
    names = [f.name for f in schema.fields]
    quoted = ", ".join('"' + n.replace('"', '""') + '"' for n in names)
    rows = fetch(url, f'SELECT {quoted} FROM "{table}"')
    sqlite = url.startswith("sqlite:")
    columns = {}
    for i, field in enumerate(schema.fields):
        values = [decode_value(r[i], field.type, sqlite) for r in rows]
        columns[field.name] = pa.array(values, to_arrow_type(field.type))
    return pa.table(columns) if columns else pa.table({})


def decode_value(value: Any, type_: IcebergType, sqlite: bool) -> Any:
    """One stored value back to the Python value Arrow builds the Iceberg type from."""
    if value is None:
        return None
    if isinstance(type_, (StructType, ListType, MapType)):
        return _from_json(json.loads(value) if isinstance(value, str) else value, type_)
    kind = type_.kind
    if kind == "boolean":
        return bool(value)
    if kind in ("float", "double"):
        return _FLOATS[value] if isinstance(value, str) else float(value)
    if kind == "decimal":
        return Decimal(value) if isinstance(value, str) else value
    if kind == "uuid":
        return (uuid.UUID(value) if isinstance(value, str) else value).bytes
    if kind in ("binary", "fixed"):
        return bytes(value)
    if sqlite and kind == "date":
        return dt.date.fromisoformat(value)
    if sqlite and kind == "time":
        return dt.time.fromisoformat(value)
    if sqlite and kind in ("timestamp", "timestamptz"):
        return dt.datetime.fromisoformat(value)
    return value


def _from_json(value: Any, type_: IcebergType) -> Any:
    if value is None:
        return None
    if isinstance(type_, StructType):
        return {f.name: _from_json(value.get(f.name), f.type) for f in type_.fields}
    if isinstance(type_, ListType):
        return [_from_json(v, type_.element_type) for v in value]
    if isinstance(type_, MapType):
        if isinstance(value, dict):
            return [(k, _from_json(v, type_.value_type)) for k, v in value.items()]
        return [(_from_json(e["key"], type_.key_type), _from_json(e["value"], type_.value_type))
                for e in value]
    kind = type_.kind
    if kind in ("float", "double"):
        return _FLOATS.get(value, value) if isinstance(value, str) else float(value)
    if kind == "decimal":
        return Decimal(value)
    if kind in ("binary", "fixed"):
        return base64.b64decode(value)
    if kind == "uuid":
        return uuid.UUID(value).bytes
    if kind == "date":
        return dt.date.fromisoformat(value)
    if kind == "time":
        return dt.time.fromisoformat(value)
    if kind in ("timestamp", "timestamptz"):
        return dt.datetime.fromisoformat(value)
    return value
