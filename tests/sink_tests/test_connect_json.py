"""`format = "json-with-schema"`: every Kafka message is Kafka Connect's `{"schema": ...,
"payload": ...}`, and reading the payload by its schema, as Kafka Connect's JsonConverter
does (Debezium's semantic types: `Decimal` bytes, `Date` days, `MicroTimestamp` and
`MicroTime` micros, `ZonedTimestamp` text), gives back the rows the plain JSON events
carry, for every column type a change batch holds."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from kafka_read import connect_value

from meltwater.sinks.errors import InvalidChangesError
from meltwater.sinks.kafka_events import EventOptions, kafka_events
from meltwater.sinks.message_formats import MessageFormat
from meltwater.stream.engine.changes.change_columns import METADATA_FIELDS
from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY

TS = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
WITH_SCHEMA = EventOptions("lake.sales.orders", ("id",),
                           message_format=MessageFormat.JSON_WITH_SCHEMA)
PLAIN = EventOptions("lake.sales.orders", ("id",))


def F(name: str, type_: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable, metadata={FIELD_ID_KEY: str(fid).encode()})


COLUMNS = [
    F("id", pa.int64(), 1, nullable=False), F("i", pa.int32(), 2), F("ok", pa.bool_(), 3),
    F("f", pa.float32(), 4), F("d", pa.decimal128(10, 2), 5), F("day", pa.date32(), 6),
    F("ts", pa.timestamp("us"), 7), F("tstz", pa.timestamp("us", "UTC"), 8),
    F("t", pa.time64("us"), 9), F("b", pa.binary(), 10), F("s", pa.string(), 11),
    F("st", pa.struct([("x", pa.int32()), ("when", pa.date32())]), 12),
    F("l", pa.list_(pa.decimal128(5, 1)), 13), F("m", pa.map_(pa.string(), pa.float64()), 14),
]
VALUES = [
    {"id": 1, "i": -7, "ok": True, "f": 1.5, "d": Decimal("-12345678.90"),
     "day": dt.date(1969, 12, 31), "ts": dt.datetime(2024, 5, 6, 7, 8, 9, 123456),
     "tstz": TS, "t": dt.time(23, 59, 59, 999999), "b": b"\x00\xff", "s": "é\"x",
     "st": {"x": 3, "when": dt.date(2000, 2, 29)}, "l": [Decimal("0.5"), None, Decimal("-128.0")],
     "m": [("a", 1.0), ("b", None)]},
    {"id": 2, **{c.name: None for c in COLUMNS[1:]}},
    {"id": 3, "i": 2**31 - 1, "ok": False, "f": -0.25, "d": Decimal("0.00"),
     "day": dt.date(1, 1, 1), "ts": dt.datetime(1900, 1, 1), "tstz": TS.replace(microsecond=1),
     "t": dt.time(0, 0), "b": b"", "s": "", "st": {"x": None, "when": None}, "l": [],
     "m": []},
]


def changes(*kinds: tuple[str, dict[str, Any]]) -> pa.Table:
    schema = pa.schema([*COLUMNS, *METADATA_FIELDS])
    return pa.Table.from_pylist([
        {**row, "_change_type": kind, "_change_ordinal": 0, "_commit_snapshot_id": 9,
         "_commit_sequence_number": 2, "_commit_timestamp": TS} for kind, row in kinds],
        schema=schema)


def as_read(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as `read` gives it back: maps as dicts."""
    if row is None:
        return None
    return {k: dict(v) if k == "m" and v is not None else v for k, v in row.items()
            if not k.startswith("_")}


def test_payloads_read_by_their_schemas_are_the_rows_for_every_column_type():
    table = changes(("INSERT", VALUES[0]), ("INSERT", VALUES[1]),
                    ("UPDATE_BEFORE", VALUES[2]), ("UPDATE_AFTER", {**VALUES[2], "s": "new"}))
    events = kafka_events(table, WITH_SCHEMA, ts_ms=3)
    plain = kafka_events(table, PLAIN, ts_ms=3)
    assert [e.event_id for e in events] == [e.event_id for e in plain]
    rows = {(r["id"], r["_change_type"]): r for r in table.to_pylist()}
    for event, twin in zip(events, plain, strict=True):
        key, value = json.loads(event.key), json.loads(event.value)
        assert set(key) == set(value) == {"schema", "payload"}
        assert key["schema"]["name"] == "lake.sales.orders.Key"
        assert connect_value(key["schema"], key["payload"]) == json.loads(twin.key)
        envelope = connect_value(value["schema"], value["payload"])
        assert value["schema"]["name"] == "lake.sales.orders.Envelope"
        expected = json.loads(twin.value)
        assert {k: envelope[k] for k in ("op", "source", "ts_ms")} == \
            {k: expected[k] for k in ("op", "source", "ts_ms")}
        ident = key["payload"]["id"]
        before = rows.get((ident, "UPDATE_BEFORE")) if envelope["op"] == "u" else None
        after = rows.get((ident, "UPDATE_AFTER")) or rows.get((ident, "INSERT"))
        assert envelope["before"] == as_read(before)
        assert envelope["after"] == as_read(after)
    id_schema = json.loads(events[0].value)["schema"]["fields"][0]["fields"][0]
    assert id_schema == {"type": "int64", "optional": False, "field": "id"}


def test_a_delete_and_its_tombstone_keep_their_schemas_and_null_value():
    events = kafka_events(changes(("DELETE", VALUES[0])), WITH_SCHEMA, ts_ms=3)
    assert [e.op for e in events] == ["d", None]
    value = json.loads(events[0].value)
    assert connect_value(value["schema"], value["payload"])["before"] == as_read(VALUES[0])
    assert events[1].value is None
    assert events[1].key == events[0].key


def test_the_schema_follows_each_commits_columns():
    """A column renamed, then dropped: each commit's value schema names the columns its
    images carry."""
    rows = changes(("INSERT", VALUES[0]), ("INSERT", VALUES[2])).to_pylist()
    rows[1].update(_change_ordinal=1, _commit_snapshot_id=10)
    batch = pa.Table.from_pylist(rows, schema=pa.schema([*COLUMNS, *METADATA_FIELDS]))
    names = {9: {c.name: c.name for c in COLUMNS},
             10: {**{c.name: c.name for c in COLUMNS if c.name != "b"}, "s": "text"}}
    first, second = (json.loads(e.value) for e in kafka_events(
        batch, WITH_SCHEMA, names_at=names.__getitem__, ts_ms=3))
    fields = [[f["field"] for f in v["schema"]["fields"][1]["fields"]] for v in (first, second)]
    assert fields[0] == [c.name for c in COLUMNS]
    assert fields[1] == [names[10][c.name] for c in COLUMNS if c.name != "b"]
    assert connect_value(second["schema"], second["payload"])["after"]["text"] == VALUES[2]["s"]


def test_a_map_without_string_keys_is_refused_naming_the_column():
    schema = pa.schema([F("id", pa.int64(), 1), F("m", pa.map_(pa.int32(), pa.string()), 2),
                        *METADATA_FIELDS])
    table = pa.Table.from_pylist([{"id": 1, "m": [(1, "a")], "_change_type": "INSERT",
                                   "_change_ordinal": 0, "_commit_snapshot_id": 9,
                                   "_commit_sequence_number": 2, "_commit_timestamp": TS}],
                                 schema=schema)
    with pytest.raises(InvalidChangesError, match="column 'm' of type map<int32, string>"):
        kafka_events(table, WITH_SCHEMA)
    assert kafka_events(table, PLAIN)  # the plain JSON format writes it as an object


def test_an_empty_map_is_an_empty_object_in_both_formats():
    """Arrow hands a map back as a list of pairs: an empty one was written `[]`."""
    table = changes(("INSERT", VALUES[2]))
    for options in (PLAIN, WITH_SCHEMA):
        value = json.loads(kafka_events(table, options, ts_ms=3)[0].value)
        after = value.get("payload", value)["after"]
        assert after["m"] == {} and after["l"] == []
