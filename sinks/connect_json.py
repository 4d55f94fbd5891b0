"""Kafka Connect's JSON with schemas: the `{"schema": ..., "payload": ...}` messages that
Kafka Connect's `JsonConverter` reads with `schemas.enable=true` (the Kafka sink's
`format = "json-with-schema"`).

Each message carries its payload's Connect schema. The types are the ones a Debezium
connector gives the same columns, by the Arrow type of the change batch's column:

| column                 | Connect schema                                      | payload        |
| ---------------------- | --------------------------------------------------- | -------------- |
| boolean, int, long     | boolean, int8/16/32/64                              | as is          |
| float, double          | float32, float64                                    | as is (NaN and |
|                        |                                                     | the infinities |
|                        |                                                     | as Jackson     |
|                        |                                                     | writes them)   |
| string                 | string                                              | as is          |
| binary, fixed          | bytes                                               | base64         |
| decimal(P, S)          | bytes `org.apache.kafka.connect.data.Decimal`       | base64 of the  |
|                        | (`scale`, `connect.decimal.precision`)              | unscaled value |
| date                   | int32 `io.debezium.time.Date`                       | days           |
| time                   | int64 `io.debezium.time.MicroTime` (`NanoTime`)     | since midnight |
| timestamp              | int64 `io.debezium.time.MicroTimestamp` (`Nano...`) | since epoch    |
| timestamptz            | string `io.debezium.time.ZonedTimestamp`            | ISO-8601       |
| struct, list           | struct, array                                       | object, array  |
| map with string keys   | map                                                 | object         |

The decimal is Debezium's `decimal.handling.mode=precise` (Connect's own logical type: the
unscaled value as big-endian two's complement bytes, as Java's `BigInteger.toByteArray`
gives them); the times are its default `time.precision.mode=adaptive_time_microseconds`
for microsecond columns. A map whose keys are not strings has no JSON object form (Connect
writes it as an array of pairs) and is refused here, naming the column.

`optional` is the Arrow field's nullability. The envelope is Debezium's (`before` and
`after` of the row's struct `<name>.Value`, `op`, `source`, `ts_ms`, named
`<name>.Envelope`); the key is `<name>.Key`; `<name>` is the table's name with every
character a schema name may not hold made `_`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.sinks.errors import InvalidChangesError

SOURCE_NAME = "meltwater.iceberg.Source"
_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_]")
_SOURCE_FIELDS = (("table", "string", False), ("snapshot_id", "int64", True),
                  ("sequence_number", "int64", True), ("ts_ms", "int64", True))
_INTEGERS = {pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64"}


def schema_name(table_name: str) -> str:
    """The table's name as a Connect schema name: dotted parts of letters, digits and `_`,
    none starting with a digit (what Avro, which Connect names follow, requires)."""
    parts = [_NAME_CHARACTER.sub("_", p) or "_" for p in table_name.split(".")]
    return ".".join(f"_{p}" if p[0].isdigit() else p for p in parts)


def with_schema(schema: str, payload: str) -> str:
    """A message's text: the schema's JSON and the payload's, as JsonConverter reads them."""
    return f'{{"schema": {schema}, "payload": {payload}}}'


def key_schema(fields: Sequence[pa.Field], name: str) -> str:
    """The JSON of a message key's schema: a struct of the key columns."""
    return json.dumps(_struct(fields, f"{name}.Key", optional=False), separators=(",", ":"))


def envelope_schema(fields: Sequence[pa.Field], name: str, *, transaction: bool = False) -> str:
    """The JSON of an envelope's schema, its images the struct of `fields` (`transaction`:
    with Debezium's optional `transaction` block)."""
    source = {"type": "struct", "optional": False, "name": SOURCE_NAME, "field": "source",
              "fields": [{"type": t, "optional": o, "field": f} for f, t, o in _SOURCE_FIELDS]}
    members: list[dict[str, Any]] = [
        {**_struct(fields, f"{name}.Value", optional=True), "field": "before"},
        {**_struct(fields, f"{name}.Value", optional=True), "field": "after"},
        {"type": "string", "optional": False, "field": "op"},
        source,
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ]
    if transaction:
        members.append(
            {"type": "struct", "optional": True, "name": "event.block", "version": 1,
             "field": "transaction",
             "fields": [{"type": "string", "optional": False, "field": "id"},
                        {"type": "int64", "optional": False, "field": "total_order"},
                        {"type": "int64", "optional": False, "field": "data_collection_order"}]})
    envelope = {"type": "struct", "optional": False, "name": f"{name}.Envelope", "version": 1,
                "fields": members}
    return json.dumps(envelope, separators=(",", ":"))


def _struct(fields: Sequence[pa.Field], name: str | None, *, optional: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "struct", "optional": optional,
                              "fields": [{**_schema(f.type, f.nullable, f.name), "field": f.name}
                                         for f in fields]}
    if name is not None:
        schema["name"] = name
    return schema


def _named(kind: str, name: str, optional: bool, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": optional, "name": name, "version": 1, **extra}


def _schema(t: pa.DataType, optional: bool, column: str) -> dict[str, Any]:
    """The Connect schema of values of Arrow type `t` (the module doc's table)."""
    if pa.types.is_boolean(t):
        return {"type": "boolean", "optional": optional}
    if t in _INTEGERS:
        return {"type": _INTEGERS[t], "optional": optional}
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return {"type": "float32" if pa.types.is_float32(t) else "float64",
                "optional": optional}
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return {"type": "string", "optional": optional}
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) \
            or pa.types.is_fixed_size_binary(t):
        return {"type": "bytes", "optional": optional}
    if pa.types.is_decimal(t):
        return _named("bytes", "org.apache.kafka.connect.data.Decimal", optional,
                      parameters={"scale": str(t.scale),
                                  "connect.decimal.precision": str(t.precision)})
    if pa.types.is_date32(t):
        return _named("int32", "io.debezium.time.Date", optional)
    if pa.types.is_time(t):
        nanos = t.unit == "ns"
        return _named("int64", "io.debezium.time.NanoTime" if nanos
                      else "io.debezium.time.MicroTime", optional)
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            return _named("string", "io.debezium.time.ZonedTimestamp", optional)
        return _named("int64", "io.debezium.time.NanoTimestamp" if t.unit == "ns"
                      else "io.debezium.time.MicroTimestamp", optional)
    if pa.types.is_struct(t):
        return _struct([t.field(i) for i in range(t.num_fields)], None, optional=optional)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        return {"type": "array", "optional": optional,
                "items": _schema(item.type, item.nullable, column)}
    if pa.types.is_map(t) and (pa.types.is_string(t.key_type)
                               or pa.types.is_large_string(t.key_type)):
        return {"type": "map", "optional": optional,
                "keys": _schema(t.key_type, False, column),
                "values": _schema(t.item_type, t.item_field.nullable, column)}
    raise InvalidChangesError(f"column {column!r} of type {t} has no Kafka Connect JSON form "
                              "(set the Kafka sink's format to \"json\")")


def connect_values(table: pa.Table) -> pa.Table:
    """The table's columns as their payload holds them (the module doc's table): times as
    integers of their unit, decimals as their unscaled bytes; the rest as they are."""
    columns = [_values(c.combine_chunks()) for c in table.columns]
    return pa.Table.from_arrays(columns, names=table.column_names)


def _values(column: pa.Array) -> pa.Array:
    t = column.type
    if pa.types.is_date32(t):
        return column.cast(pa.int32())
    if pa.types.is_time(t):
        return column.cast(pa.int64())
    if pa.types.is_timestamp(t) and t.tz is None:
        unit = "ns" if t.unit == "ns" else "us"
        return column.cast(pa.timestamp(unit)).cast(pa.int64())
    if pa.types.is_decimal(t):
        return pa.array([None if v is None else _unscaled_bytes(v, t.scale)
                         for v in column.to_pylist()], pa.binary())
    if pa.types.is_struct(t):
        children = [_values(c) for c in column.flatten()]
        fields = [pa.field(t.field(i).name, c.type, t.field(i).nullable)
                  for i, c in enumerate(children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=pc.is_null(column))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return kind.from_arrays(column.offsets, _values(column.values),
                                mask=pc.is_null(column))
    if pa.types.is_map(t):
        keys, items = column.values.flatten()
        return pa.MapArray.from_arrays(column.offsets, _values(keys), _values(items),
                                       mask=pc.is_null(column))
    return column


def _unscaled_bytes(value: Any, scale: int) -> bytes:
    """A decimal's unscaled value as big-endian two's complement bytes, fewest that hold it
    (Java's `BigInteger.toByteArray`, which Connect's `Decimal` writes)."""
    unscaled = int(value.scaleb(scale))
    return unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)

