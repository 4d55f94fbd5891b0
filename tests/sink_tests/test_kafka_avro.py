"""`format = "avro"`: every message is Avro in the Confluent wire format, its schema in the
registry (`testbed/schema_registry.py`), and confluent-kafka's own `AvroDeserializer`
decodes every key and value back to the rows the plain JSON events carry, for every column
type; a commit whose schema a BACKWARD registry refuses (a required column added) is one
line naming the subject; a registry behind basic auth takes the client's properties."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from schema_registry import SchemaRegistry
from test_connect_json import METADATA_FIELDS, TS, VALUES, changes

from meltwater.sinks.errors import KafkaRefusedError
from meltwater.sinks.kafka_avro import AvroMessages, RegistryConfig
from meltwater.sinks.kafka_events import EventOptions, kafka_events
from meltwater.sinks.message_formats import MessageFormat
from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY

TOPIC = "lake.sales.orders"


@pytest.fixture
def registry(schema_registry):
    return schema_registry


def options(url: str, **extra: Any) -> EventOptions:
    messages = AvroMessages(RegistryConfig(url, extra.pop("properties", {})), TOPIC)
    return EventOptions("lake.sales.orders", ("id",), message_format=MessageFormat.AVRO,
                        avro=messages, **extra)


def deserializers(url: str, properties: dict[str, str] | None = None):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url, **(properties or {})})
    deserializer = AvroDeserializer(client)

    def key(data: bytes) -> Any:
        return deserializer(data, SerializationContext(TOPIC, MessageField.KEY))

    def value(data: bytes) -> Any:
        return deserializer(data, SerializationContext(TOPIC, MessageField.VALUE))

    return key, value


def as_avro(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A change row as Avro gives it back: the columns only, string-keyed maps as dicts."""
    if row is None:
        return None
    return {k: dict(v) if k == "m" and v is not None else v for k, v in row.items()
            if not k.startswith("_")}


def test_every_message_decodes_with_confluents_deserializer_to_the_rows(registry):
    table = changes(("INSERT", VALUES[0]), ("INSERT", VALUES[1]),
                    ("UPDATE_BEFORE", VALUES[2]), ("UPDATE_AFTER", {**VALUES[2], "s": "new"}),
                    )
    events = kafka_events(table, options(registry.url, transaction_metadata=True), ts_ms=3)
    plain = kafka_events(table, EventOptions("lake.sales.orders", ("id",)), ts_ms=3)
    assert [e.event_id for e in events] == [e.event_id for e in plain]
    key_of, value_of = deserializers(registry.url)
    rows = {(r["id"], r["_change_type"]): r for r in table.to_pylist(maps_as_pydicts="strict")}
    for order, (event, twin) in enumerate(zip(events, plain, strict=True), start=1):
        assert event.key[:1] == event.value[:1] == b"\x00"  # Confluent's magic byte
        key, envelope = key_of(event.key), value_of(event.value)
        assert key == json.loads(twin.key)
        expected = json.loads(twin.value)
        assert {k: envelope[k] for k in ("op", "source", "ts_ms")} == \
            {k: expected[k] for k in ("op", "source", "ts_ms")}
        assert envelope["transaction"] == {"id": "9", "total_order": order,
                                           "data_collection_order": order}
        ident = key["id"]
        before = rows.get((ident, "UPDATE_BEFORE")) if envelope["op"] == "u" else None
        after = rows.get((ident, "UPDATE_AFTER")) or rows.get((ident, "INSERT"))
        assert envelope["before"] == as_avro(before)
        assert envelope["after"] == as_avro(after)
    first = value_of(events[0].value)["after"]
    assert first["tstz"] == TS and first["ts"] == VALUES[0]["ts"]  # aware, and local
    assert first["d"] == Decimal("-12345678.90") and first["day"] == dt.date(1969, 12, 31)
    subjects = sorted(registry.state.subjects)
    assert subjects == [f"{TOPIC}-key", f"{TOPIC}-value"]


def test_a_map_without_string_keys_is_an_array_of_key_value_records(registry):
    schema = pa.schema([pa.field("id", pa.int64(), metadata={FIELD_ID_KEY: b"1"}),
                        pa.field("m", pa.map_(pa.int32(), pa.string()),
                                 metadata={FIELD_ID_KEY: b"2"}), *METADATA_FIELDS])
    table = pa.Table.from_pylist([{"id": 1, "m": [(1, "a"), (2, None)], "_change_type": "INSERT",
                                   "_change_ordinal": 0, "_commit_snapshot_id": 9,
                                   "_commit_sequence_number": 2, "_commit_timestamp": TS}],
                                 schema=schema)
    [event] = kafka_events(table, options(registry.url), ts_ms=3)
    _, value_of = deserializers(registry.url)
    assert value_of(event.value)["after"]["m"] == [{"key": 1, "value": "a"},
                                                  {"key": 2, "value": None}]


def test_a_schema_the_registry_refuses_is_one_line_naming_the_subject(registry):
    """A nullable column added registers a new version (BACKWARD); a required one added is
    refused by the registry, and so by the sink."""
    first = changes(("INSERT", VALUES[0]))
    kafka_events(first, options(registry.url), ts_ms=3)
    nullable = first.append_column(pa.field("extra", pa.int32(), True,
                                            metadata={FIELD_ID_KEY: b"99"}),
                                   pa.array([None], pa.int32()))
    kafka_events(nullable, options(registry.url), ts_ms=3)
    assert len(registry.state.subjects[f"{TOPIC}-value"]) == 2
    required = first.append_column(pa.field("must", pa.int32(), False,
                                            metadata={FIELD_ID_KEY: b"98"}),
                                   pa.array([1], pa.int32()))
    with pytest.raises(KafkaRefusedError, match=re.escape(
            f"schema registry {registry.url} refused the schema of snapshot 9 for subject "
            f"{TOPIC}-value: Schema being registered is incompatible")) as refused:
        kafka_events(required, options(registry.url), ts_ms=3)
    assert "\n" not in str(refused.value)


def test_a_registry_behind_basic_auth_takes_the_clients_properties():
    with SchemaRegistry(credentials=("writer", "s3cret")) as registry:
        table = changes(("INSERT", VALUES[1]))
        good = {"basic.auth.user.info": "writer:s3cret"}
        [event] = kafka_events(table, options(registry.url, properties=good), ts_ms=3)
        _, value_of = deserializers(registry.url, good)
        assert value_of(event.value)["after"]["id"] == 2
        wrong = {**good, "basic.auth.user.info": "writer:wrong"}
        with pytest.raises(KafkaRefusedError, match="Unauthorized"):
            kafka_events(table, options(registry.url, properties=wrong), ts_ms=3)
        with pytest.raises(KafkaRefusedError, match=re.escape(
                "schema-registry-properties: Unrecognized properties: basic.auth.typo")):
            kafka_events(table, options(registry.url, properties={"basic.auth.typo": "x"}),
                         ts_ms=3)


def test_columns_avro_cannot_name_are_adjusted_and_two_alike_are_refused():
    from meltwater.sinks.avro_schema import avro_names
    from meltwater.sinks.errors import InvalidChangesError

    assert avro_names(["order id", "1st", "ok_2"], "t") == ["order_id", "_1st", "ok_2"]
    with pytest.raises(InvalidChangesError, match="columns 'a b' and 'a-b' are both 'a_b'"):
        avro_names(["a b", "a-b"], "t")

