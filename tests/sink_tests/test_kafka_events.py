"""Change rows -> the kafka sink's messages: pairing and order by key, tombstones, ids."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from meltwater.sinks.errors import DuplicateKeyError, NullKeyError
from meltwater.sinks.kafka_events import EventOptions, event_id, kafka_events
from meltwater.stream.engine.changes.change_columns import METADATA_FIELDS
from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY

TS = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def F(name: str, type_: pa.DataType, fid: int) -> pa.Field:
    return pa.field(name, type_, metadata={FIELD_ID_KEY: str(fid).encode()})


SCHEMA = pa.schema([F("id", pa.int64(), 1), F("v", pa.string(), 2), *METADATA_FIELDS])
OPTIONS = EventOptions("db.t", ("id",))


def rows(*changes: tuple[int, str, int, str | None]) -> pa.Table:
    """(ordinal, change type, id, v); snapshot 100 + ordinal, sequence 1 + ordinal."""
    return pa.Table.from_pylist([
        {"id": id_, "v": v, "_change_type": kind, "_change_ordinal": ordinal,
         "_commit_snapshot_id": 100 + ordinal, "_commit_sequence_number": 1 + ordinal,
         "_commit_timestamp": TS} for ordinal, kind, id_, v in changes], schema=SCHEMA)


def described(events) -> list[tuple]:
    out = []
    for e in events:
        if e.value is None:
            out.append((e.ordinal, json.loads(e.key), "tombstone"))
            continue
        value = json.loads(e.value)
        out.append((e.ordinal, json.loads(e.key), value["op"],
                    (value["before"] or {}).get("v"), (value["after"] or {}).get("v")))
    return out


def test_a_keys_delete_and_insert_in_one_commit_are_one_update_in_commit_order():
    """Rows arrive in any order (the stream's partitions); the messages go out per commit in
    commit order, a key's DELETE + INSERT of a commit as one "u" (whichever came first),
    an UPDATE_BEFORE / UPDATE_AFTER pair as one "u", and a delete followed by its
    tombstone."""
    events = kafka_events(rows(
        (1, "INSERT", 2, "b2"), (0, "INSERT", 1, "a"), (1, "DELETE", 2, "b"),
        (0, "INSERT", 2, "b"), (2, "UPDATE_AFTER", 1, "a2"), (2, "UPDATE_BEFORE", 1, "a"),
        (2, "DELETE", 2, "b2")), OPTIONS, ts_ms=5)
    assert described(events) == [
        (0, {"id": 1}, "c", None, "a"), (0, {"id": 2}, "c", None, "b"),
        (1, {"id": 2}, "u", "b", "b2"),
        (2, {"id": 1}, "u", "a", "a2"), (2, {"id": 2}, "d", "b2", None),
        (2, {"id": 2}, "tombstone")]
    value = json.loads(events[2].value)
    assert value["source"] == {"table": "db.t", "snapshot_id": 101, "sequence_number": 2,
                               "ts_ms": 1704164645000}
    assert value["ts_ms"] == 5
    headers = dict(events[2].headers)
    assert headers == {"meltwater.snapshot_id": b"101", "meltwater.change_ordinal": b"1",
                       "meltwater.event_id": events[2].event_id.encode()}


def test_event_ids_are_deterministic_one_per_key_and_commit():
    batch = rows((0, "INSERT", 1, "a"), (0, "INSERT", 2, "b"), (1, "DELETE", 1, "a"))
    first = kafka_events(batch, OPTIONS, ts_ms=1)
    again = kafka_events(batch.take([2, 1, 0]), OPTIONS, ts_ms=2)  # other order, other time
    assert [e.event_id for e in first] == [e.event_id for e in again]
    assert [e.key for e in first] == [e.key for e in again]
    assert first[0].event_id == event_id(100, b'{"id": 1}')
    assert first[0].event_id != first[2].event_id  # another commit of the same key
    assert first[3].event_id == first[2].event_id + "-tombstone"
    assert len({e.event_id for e in first}) == len(first)


def test_tombstones_can_be_left_out_and_a_starting_snapshot_is_read_as_r():
    batch = rows((0, "INSERT", 1, "a"), (1, "INSERT", 2, "b"), (1, "DELETE", 1, "a"))
    events = kafka_events(batch, EventOptions("db.t", ("id",), tombstones=False,
                                              snapshot_as_inserts=True))
    assert [e.op for e in events] == ["r", "d", "c"]
    assert all(e.value is not None for e in events)


def test_a_key_with_two_live_rows_or_a_null_is_refused():
    with pytest.raises(DuplicateKeyError, match=r'key \{"id": 1\} has two rows arriving in '
                                                r"snapshot 100: the table holds two live rows"):
        kafka_events(rows((0, "INSERT", 1, "a"), (0, "INSERT", 1, "b")), OPTIONS)
    with pytest.raises(NullKeyError, match="null in key column 'id'"):
        kafka_events(rows((0, "INSERT", None, "a")), OPTIONS)


def test_images_take_each_commits_column_names_by_field_id():
    """A column renamed after the stream started: its commit names it anew; one its
    commit's schema lacks is left out."""
    names = {100: {"id": "id", "v": "v"}, 101: {"id": "id", "v": "value"}, 102: {"id": "id"}}
    events = kafka_events(rows((0, "INSERT", 1, "a"), (1, "INSERT", 2, "b"),
                               (2, "INSERT", 3, "c")), OPTIONS, names_at=names.__getitem__)
    assert [json.loads(e.value)["after"] for e in events] == [
        {"id": 1, "v": "a"}, {"id": 2, "value": "b"}, {"id": 3}]


def test_messages_are_byte_for_byte_the_envelope_the_cli_writes():
    """Keys and images are rendered column by column; the text is what `encode_event` of
    `debezium_event` writes for the same rows (`meltwater changes --format
    debezium-jsonl`): odd floats, escapes, decimals, times, dates, bytes, nested values."""
    from decimal import Decimal

    from meltwater.output.change_events import debezium_event, encode_event
    from meltwater.output.json_values import json_safe

    schema = pa.schema([F("id", pa.string(), 1), F("f", pa.float64(), 2),
                        F("d", pa.decimal128(9, 3), 3), F("t", pa.timestamp("us", "UTC"), 4),
                        F("day", pa.date32(), 5), F("b", pa.binary(), 6),
                        F("s", pa.struct([("x", pa.int32())]), 7), *METADATA_FIELDS])
    values = [("k\"1", 1e20, "1.500", TS, dt.date(2024, 5, 6), b"\x00\xff", {"x": 1}),
              ("é", float("nan"), None, TS.replace(microsecond=7), None, None, None),
              ("k3", -0.0, "-2.000", None, dt.date(1, 1, 1), b"", {"x": None})]
    table = pa.Table.from_pylist([
        {"id": id_, "f": f, "d": None if d is None else Decimal(d), "t": t, "day": day,
         "b": b, "s": s, "_change_type": "INSERT", "_change_ordinal": 0,
         "_commit_snapshot_id": 9, "_commit_sequence_number": 2, "_commit_timestamp": TS}
        for id_, f, d, t, day, b, s in values], schema=schema)
    events = kafka_events(table, EventOptions("db.t", ("id",)), ts_ms=3)
    rows = {row["id"]: row for row in table.to_pylist()}
    for event in events:
        row = rows[json.loads(event.key)["id"]]
        image = json_safe({k: v for k, v in row.items() if not k.startswith("_")})
        assert event.value == encode_event(
            debezium_event("c", None, image, "db.t", row, 3)).encode()
        assert event.key == encode_event({"id": row["id"]}).encode()
