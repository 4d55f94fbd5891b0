"""Reading what the kafka sink wrote, as a consumer would, and folding it by key.

`read_topic` reads every partition with `read_committed` to its end. Tansu 0.6 lets a
`read_committed` consumer see the messages of aborted transactions (README, "Kafka"), so
`confirmed` keeps what Apache Kafka would show such a consumer: the messages of the
attempts a committed marker in the batches topic names (a batch's transaction writes its
marker last, after a flush, so an attempt without a marker never committed). `fold` is
what a Debezium consumer builds: per key, the last event's `after` image, a delete
removing it.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from meltwater.output.json_values import json_default, json_safe
from meltwater.sinks.kafka_sink import DEFAULT_BATCHES_TOPIC


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]

    @property
    def event_id(self) -> str:
        return self.headers["meltwater.event_id"].decode()

    @property
    def transaction(self) -> str:
        return self.headers["meltwater.transaction"].decode()

    @cached_property
    def event(self) -> dict | None:
        """The Debezium envelope, as the plain JSON format writes it (a `json-with-schema`
        message's payload read by its schema, as Kafka Connect reads it, and an Avro one
        read by confluent-kafka's `AvroDeserializer`, then so written)."""
        return None if self.value is None else decoded(self.value)

    @cached_property
    def key_text(self) -> str | None:
        """The key as the plain JSON format writes it (the same for a key whose message
        schema changed)."""
        if self.key is None:
            return None
        return json.dumps(decoded(self.key), sort_keys=True)

    @property
    def sequence_number(self) -> int:
        return self.event["source"]["sequence_number"] if self.value is not None else -1


EPOCH = dt.datetime(1970, 1, 1)
_DESERIALIZERS: dict[str, Any] = {}  # registry URL -> confluent-kafka's AvroDeserializer


def _avro_deserializer() -> Any:
    """confluent-kafka's deserializer of the registry the test started last."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from schema_registry import SchemaRegistry

    registry = SchemaRegistry.latest
    assert registry is not None, "an Avro message, and no schema registry started"
    if registry.url not in _DESERIALIZERS:
        _DESERIALIZERS[registry.url] = AvroDeserializer(
            SchemaRegistryClient({"url": registry.url}))
    return _DESERIALIZERS[registry.url]


def decoded(data: bytes) -> Any:
    """A message's key or value as the plain JSON format writes it (`unframed`; Avro in
    the Confluent wire format decoded by confluent-kafka's deserializer)."""
    if data[:1] == b"\x00":
        from confluent_kafka.serialization import MessageField, SerializationContext

        record = _avro_deserializer()(data, SerializationContext("", MessageField.VALUE))
        return json.loads(json.dumps(json_safe(record), default=json_default))
    return unframed(json.loads(data))


def unframed(message: Any) -> Any:
    """A message's JSON as the plain format writes it: Kafka Connect's `{"schema",
    "payload"}` read by its schema (`connect_value`), anything else as it is."""
    if isinstance(message, dict) and set(message) == {"schema", "payload"}:
        read = connect_value(message["schema"], message["payload"])
        return json.loads(json.dumps(json_safe(read), default=json_default))
    return message


def connect_value(schema: dict[str, Any], value: Any) -> Any:
    """A payload value read by its Connect schema as Kafka Connect's JsonConverter reads it,
    Debezium's semantic types made Python values (a null only where `optional`)."""
    if value is None:
        assert schema["optional"], f"a null for a required {schema}"
        return None
    name, kind = schema.get("name"), schema["type"]
    if kind == "struct":
        fields = {f["field"]: f for f in schema["fields"]}
        assert set(value) == set(fields), (sorted(value), sorted(fields))
        return {k: connect_value(fields[k], v) for k, v in value.items()}
    if kind == "array":
        return [connect_value(schema["items"], v) for v in value]
    if kind == "map":
        assert isinstance(value, dict), value
        return {k: connect_value(schema["values"], v) for k, v in value.items()}
    if name == "org.apache.kafka.connect.data.Decimal":
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return Decimal(unscaled).scaleb(-int(schema["parameters"]["scale"]))
    if name == "io.debezium.time.Date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name == "io.debezium.time.MicroTimestamp":
        return EPOCH + dt.timedelta(microseconds=value)
    if name == "io.debezium.time.MicroTime":
        return (EPOCH + dt.timedelta(microseconds=value)).time()
    if name == "io.debezium.time.ZonedTimestamp":
        return dt.datetime.fromisoformat(value)
    if kind == "bytes":
        return base64.b64decode(value)
    assert kind in ("boolean", "int8", "int16", "int32", "int64", "float32", "float64",
                    "string"), kind
    assert not isinstance(value, (dict, list)), (schema, value)
    return value


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list[Message]:
    """Every message of the topic a read_committed consumer gets, partition by partition
    in offset order (none before the topic exists). With Tansu, a partition in which a
    transaction is open reads as empty (see `settled`)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=timeout).topics
    if topic not in topics:
        return []
    partitions = topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "meltwater-tests",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                       timeout=timeout, cached=False)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        found: list[Message] = []
        deadline = time.monotonic() + timeout
        while True:
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
            assert time.monotonic() < deadline, f"topic {topic} not read to its end"
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                continue
            found.append(Message(message.partition(), message.offset(), message.key(),
                                 message.value(), dict(message.headers() or [])))
        return sorted(found, key=lambda m: (m.partition, m.offset))
    finally:
        consumer.close()


def settled(bootstrap: str, topic: str, timeout: float = 60) -> bool:
    """Whether no transaction is open in the topic now: every partition's end is the same
    to a read_committed consumer as to a read_uncommitted one. Tansu 0.6 answers a
    read_committed consumer 0 for a partition while a transaction is open in it (Apache
    Kafka answers the last stable offset), so `read_topic` reads such a partition as
    empty: a reader that must see every committed message (the soak) reads only while the
    topic is settled, before and after."""
    return settled_ends(bootstrap, topic, timeout) is not None


def settled_ends(bootstrap: str, topic: str, timeout: float = 60) -> dict[int, int] | None:
    """Each partition's end (none before the topic exists), or None while a transaction is
    open in the topic (see `settled`)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=timeout).topics
    if topic not in topics:
        return {}
    partitions = list(topics[topic].partitions)
    committed, uncommitted = (_ends(bootstrap, topic, partitions, isolation, timeout)
                              for isolation in ("read_committed", "read_uncommitted"))
    return dict(zip(partitions, committed, strict=True)) if committed == uncommitted else None


def _ends(bootstrap: str, topic: str, partitions: list[int], isolation: str,
          timeout: float) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "meltwater-tests",
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout,
                                               cached=False)[1] for p in partitions]
    finally:
        consumer.close()


def markers(bootstrap: str, transactional_id: str,
            batches_topic: str = DEFAULT_BATCHES_TOPIC) -> list[dict]:
    """The pipeline's markers in the batches topic, in order."""
    return [json.loads(m.value) for m in read_topic(bootstrap, batches_topic)
            if m.key == transactional_id.encode()]


def confirmed(messages: list[Message], committed: list[dict]) -> list[Message]:
    """The messages of attempts a marker names (see the module doc)."""
    attempts = {m["transaction"] for m in committed}
    return [m for m in messages if m.transaction in attempts]


def check_order(messages: list[Message]) -> None:
    """No event id twice; per key, events in commit order; each delete followed by its
    tombstone."""
    ids = Counter(m.event_id for m in messages)
    twice = [i for i, n in ids.items() if n > 1]
    assert not twice, f"{len(twice)} event ids appear more than once: {twice[:5]}"
    last: dict[str | None, Message] = {}
    for m in messages:
        previous = last.get(m.key_text)
        if previous is not None:
            assert previous.partition == m.partition, f"key {m.key} in two partitions"
            if previous.value is not None and previous.event["op"] == "d":
                assert m.value is None, f"delete of {m.key} not followed by its tombstone"
            elif m.value is not None:
                assert previous.sequence_number < m.sequence_number, (
                    f"key {m.key}: sequence {m.sequence_number} after "
                    f"{previous.sequence_number}")
        last[m.key_text] = m


def fold(messages: list[Message], metadata, at_snapshot: int) -> list[str]:
    """The rows a consumer folding the topic by key holds after the commits up to snapshot
    `at_snapshot`, each as canonical JSON in that snapshot's schema. Each image is in its
    own commit's columns (a row the table has not touched since a column was added lacks
    it, one written before a rename has the old name); it is read by field id, through its
    commit's schema, as Iceberg reads an old data file: a column of the target schema the
    image's commit did not have is null."""
    target = metadata.schema_for(metadata.snapshot(at_snapshot))
    until = metadata.snapshot(at_snapshot).sequence_number
    state: dict[str | None, dict] = {}
    for m in messages:
        event = m.event
        if event is None or event["source"]["sequence_number"] > until:
            continue
        if event["op"] == "d":
            state.pop(m.key_text, None)
        else:
            state[m.key_text] = event
    rows = []
    for event in state.values():
        written = metadata.schema_for(metadata.snapshot(event["source"]["snapshot_id"]))
        by_id = {f.field_id: event["after"].get(f.name) for f in written.fields}
        rows.append({f.name: by_id.get(f.field_id) for f in target.fields})
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def truth_rows(snapshot) -> list[str]:
    """What Iceberg Java reads at a corpus snapshot, each row as the events write it."""
    return canonical_rows(snapshot.rows())


def canonical_rows(rows: Any) -> list[str]:
    """Arrow rows (a table read at a snapshot) as the events write them, each as canonical
    JSON, sorted: what a topic folded to that snapshot must equal."""
    listed = rows.to_pylist(maps_as_pydicts="strict")  # maps as the events write them
    return sorted(json.dumps(json.loads(json.dumps(json_safe(row), default=json_default)),
                             sort_keys=True) for row in listed)


def folded_images(messages: list[Message]) -> list[str]:
    """What a consumer folding the topic by key holds after every message: per key, the
    last event's `after` image, a delete removing it; each as canonical JSON, sorted. For a
    table whose schema never changed (the soak's), where no image needs reading by field id."""
    state: dict[str | None, dict] = {}
    for m in messages:
        event = m.event
        if event is None:
            continue
        if event["op"] == "d":
            state.pop(m.key_text, None)
        else:
            state[m.key_text] = event["after"]
    return sorted(json.dumps(row, sort_keys=True) for row in state.values())
