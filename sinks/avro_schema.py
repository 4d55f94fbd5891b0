"""Avro schemas of the Kafka sink's messages (`format = "avro"`), derived from the Arrow
types of a commit's columns, and the rows as fastavro writes them.

The value is Debezium's envelope, as its AvroConverter names it: a record `Envelope` of
namespace `<name>` with `before` and `after` (a union of null and the record `Value`, null
by default), `source` (`meltwater.iceberg.Source`), `op`, `ts_ms` and, with transaction
metadata, `transaction` (`event.block`); the key a record `Key` of the key columns.
`<name>` is the table's name as a schema name (`connect_json.schema_name`).

Types are Avro's own, logical types where Avro has one:

| column         | Avro                                        |
| -------------- | ------------------------------------------- |
| boolean        | boolean                                     |
| int, long      | int, long                                   |
| float, double  | float, double                               |
| string         | string                                      |
| binary, fixed  | bytes                                       |
| decimal(P, S)  | bytes, logical type decimal (P, S)          |
| date           | int, logical type date                      |
| time           | long, logical type time-micros              |
| timestamptz    | long, logical type timestamp-micros         |
| timestamp      | long, logical type local-timestamp-micros   |
| struct         | a record named by its path                  |
| list           | array                                       |
| map            | map (string keys), else an array of records |
|                | {key, value}, as Iceberg's own Avro files   |

A nullable column is a union of null and its type, null by default, so a column added to
the table registers a schema a BACKWARD registry accepts (a required one added does not:
the registry refuses it, and the sink says so). Names Avro cannot hold (it allows letters,
digits and `_`, not first a digit) have every other character made `_`, as Debezium's
`field.name.adjustment.mode=avro`; two columns that would then share a name are refused,
naming them. Nanosecond times and timestamps are refused (Avro has no logical type for
them), naming the column.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from meltwater.sinks.connect_json import SOURCE_NAME
from meltwater.sinks.errors import InvalidChangesError

_INVALID = re.compile(r"[^A-Za-z0-9_]")
_NULLABLE_LONG: list[Any] = ["null", "long"]


def avro_name(name: str) -> str:
    """A column name as an Avro name (module doc)."""
    adjusted = _INVALID.sub("_", name) or "_"
    return f"_{adjusted}" if adjusted[0].isdigit() else adjusted


def avro_names(names: Sequence[str], where: str) -> list[str]:
    """Column names as Avro names; two that would be one are refused."""
    adjusted = [avro_name(n) for n in names]
    seen: dict[str, str] = {}
    for name, avro in zip(names, adjusted, strict=True):
        if avro in seen:
            raise InvalidChangesError(f"{where}: columns {seen[avro]!r} and {name!r} are both "
                                      f"{avro!r} as Avro names; rename one")
        seen[avro] = name
    return adjusted


def key_schema(fields: Sequence[pa.Field], namespace: str) -> dict[str, Any]:
    """The Avro schema of a message key: a record of the key columns."""
    return _record("Key", namespace, fields, namespace)


def envelope_schema(fields: Sequence[pa.Field], namespace: str, *,
                    transaction: bool = False) -> dict[str, Any]:
    """The Avro schema of an envelope whose images have the columns `fields`."""
    value = _record("Value", namespace, fields, namespace)
    source_space, _, source_name = SOURCE_NAME.rpartition(".")
    members: list[dict[str, Any]] = [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
        {"name": "source", "type": {
            "type": "record", "name": source_name, "namespace": source_space, "fields": [
                {"name": "table", "type": "string"},
                {"name": "snapshot_id", "type": _NULLABLE_LONG, "default": None},
                {"name": "sequence_number", "type": _NULLABLE_LONG, "default": None},
                {"name": "ts_ms", "type": _NULLABLE_LONG, "default": None}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": _NULLABLE_LONG, "default": None},
    ]
    if transaction:
        members.append({"name": "transaction", "default": None, "type": ["null", {
            "type": "record", "name": "block", "namespace": "event", "fields": [
                {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
                {"name": "data_collection_order", "type": "long"}]}]})
    return {"type": "record", "name": "Envelope", "namespace": namespace, "fields": members}


def _record(name: str, namespace: str, fields: Sequence[pa.Field], path: str
            ) -> dict[str, Any]:
    names = avro_names([f.name for f in fields], f"{path}.{name}")
    return {"type": "record", "name": name, "namespace": namespace, "fields": [
        _field(avro, f.type, f.nullable, f"{path}.{name}.{avro}", f.name)
        for avro, f in zip(names, fields, strict=True)]}


def _field(name: str, t: pa.DataType, nullable: bool, path: str, column: str
           ) -> dict[str, Any]:
    schema = _schema(t, path, column)
    if nullable:
        return {"name": name, "type": ["null", schema], "default": None}
    return {"name": name, "type": schema}


def _schema(t: pa.DataType, path: str, column: str) -> Any:
    """The Avro schema of values of Arrow type `t` (the module doc's table)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) \
            or pa.types.is_fixed_size_binary(t):
        return "bytes"
    if pa.types.is_decimal(t):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision,
                "scale": t.scale}
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_time(t) and t.unit in ("us", "ms", "s"):
        return {"type": "long", "logicalType": "time-micros"}
    if pa.types.is_timestamp(t) and t.unit != "ns":
        return {"type": "long", "logicalType": "timestamp-micros" if t.tz is not None
                else "local-timestamp-micros"}
    if pa.types.is_struct(t):
        namespace, _, name = path.rpartition(".")
        return _record(name, namespace, [t.field(i) for i in range(t.num_fields)], namespace)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        items = _schema(item.type, f"{path}_item", column)
        return {"type": "array", "items": ["null", items] if item.nullable else items}
    if pa.types.is_map(t):
        value = _schema(t.item_type, f"{path}_value", column)
        values = ["null", value] if t.item_field.nullable else value
        if pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type):
            return {"type": "map", "values": values}
        namespace, _, name = path.rpartition(".")
        return {"type": "array", "items": {
            "type": "record", "name": f"{name}_entry", "namespace": namespace, "fields": [
                {"name": "key", "type": _schema(t.key_type, f"{path}_key", column)},
                {"name": "value", "type": values}]}}
    raise InvalidChangesError(f"column {column!r} of type {t} has no Avro form here "
                              "(set the Kafka sink's format to \"json\")")


def avro_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The table's rows as fastavro writes them by `_record`'s schema: Avro's names, maps
    without string keys as lists of {key, value} records, times as Python values."""
    names = avro_names(table.column_names, "the batch")
    table = pa.Table.from_arrays([_as_written(c) for c in table.columns], names=names)
    rows = table.to_pylist(maps_as_pydicts="strict")
    nested = [(n, f.type) for n, f in zip(names, table.schema, strict=True)
              if pa.types.is_nested(f.type)]
    if nested:
        for row in rows:
            for name, t in nested:
                row[name] = _value(row[name], t)
    return rows


def _as_written(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Top-level times as the integers Avro writes (micros, days), cast by Arrow: fastavro
    takes them as they are, where it would convert each Python datetime itself (a third of
    an event's encoding)."""
    t = column.type
    if pa.types.is_timestamp(t):
        return column.cast(pa.timestamp("us", t.tz)).cast(pa.int64())
    if pa.types.is_date32(t):
        return column.cast(pa.int32())
    if pa.types.is_time(t):
        return column.cast(pa.time64("us")).cast(pa.int64())
    return column


def _value(value: Any, t: pa.DataType) -> Any:
    """A nested value as the schema of `t` holds it (struct fields by their Avro names)."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        return {avro_name(f.name): _value(value.get(f.name), f.type) for f in fields}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_value(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        if pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type):
            return {k: _value(v, t.item_type) for k, v in value.items()}
        return [{"key": k, "value": _value(v, t.item_type)} for k, v in value.items()]
    return value
