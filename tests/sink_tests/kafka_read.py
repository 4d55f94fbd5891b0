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

import json
import time
from collections import Counter
from dataclasses import dataclass

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

    @property
    def event(self) -> dict | None:
        return None if self.value is None else json.loads(self.value)

    @property
    def sequence_number(self) -> int:
        return self.event["source"]["sequence_number"] if self.value is not None else -1


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list[Message]:
    """Every message of the topic a read_committed consumer gets, partition by partition
    in offset order (none before the topic exists)."""
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
    last: dict[bytes | None, Message] = {}
    for m in messages:
        previous = last.get(m.key)
        if previous is not None:
            assert previous.partition == m.partition, f"key {m.key} in two partitions"
            if previous.value is not None and previous.event["op"] == "d":
                assert m.value is None, f"delete of {m.key} not followed by its tombstone"
            elif m.value is not None:
                assert previous.sequence_number < m.sequence_number, (
                    f"key {m.key}: sequence {m.sequence_number} after "
                    f"{previous.sequence_number}")
        last[m.key] = m


def fold(messages: list[Message], metadata, at_snapshot: int) -> list[str]:
    """The rows a consumer folding the topic by key holds after the commits up to snapshot
    `at_snapshot`, each as canonical JSON in that snapshot's schema. Each image is in its
    own commit's columns (a row the table has not touched since a column was added lacks
    it, one written before a rename has the old name); it is read by field id, through its
    commit's schema, as Iceberg reads an old data file: a column of the target schema the
    image's commit did not have is null."""
    target = metadata.schema_for(metadata.snapshot(at_snapshot))
    until = metadata.snapshot(at_snapshot).sequence_number
    state: dict[bytes | None, dict] = {}
    for m in messages:
        event = m.event
        if event is None or event["source"]["sequence_number"] > until:
            continue
        if event["op"] == "d":
            state.pop(m.key, None)
        else:
            state[m.key] = event
    rows = []
    for event in state.values():
        written = metadata.schema_for(metadata.snapshot(event["source"]["snapshot_id"]))
        by_id = {f.field_id: event["after"].get(f.name) for f in written.fields}
        rows.append({f.name: by_id.get(f.field_id) for f in target.fields})
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def truth_rows(snapshot) -> list[str]:
    """What Iceberg Java reads at a corpus snapshot, each row as the events write it."""
    return sorted(json.dumps(json.loads(json.dumps(json_safe(row), default=json_default)),
                             sort_keys=True) for row in snapshot.rows().to_pylist())
