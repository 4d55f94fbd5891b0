"""Debezium's transaction metadata for the Kafka sink (`transaction-metadata = true`): a
BEGIN and an END message per commit on the transaction topic, so a consumer knows when it
holds a commit whole.

One Iceberg snapshot is one transaction; its id is the snapshot id. The messages are
Debezium's (`provide.transaction.metadata`), keyed `{"id": "<snapshot id>"}`::

    {"status": "BEGIN", "id": "42", "event_count": null, "data_collections": null,
     "ts_ms": 1700000000000}
    {"status": "END", "id": "42", "event_count": 3,
     "data_collections": [{"data_collection": "lake.sales.orders", "event_count": 3}],
     "ts_ms": 1700000000000}

`ts_ms` is the commit's time. `event_count` counts the commit's change events (c, u, d, r),
not tombstones, as Debezium counts them; each of those events carries the `transaction`
block (`kafka_events.transaction_block`: the id, and its place among the commit's events).

A commit that read limits split over micro-batches has its BEGIN in the batch of its first
events and its END in the batch that completes it; its events are counted on across the
batches from what the batch marker records of it (`OpenCommit`), which is written in the
same Kafka transaction as the events, so a restart goes on where the topic is. A commit
with no events (a compaction, a schema change) has no transaction, as in Debezium.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meltwater.sinks.connect_json import with_schema
from meltwater.sinks.kafka_events import EVENT_ID, SNAPSHOT_ID, KafkaEvent
from meltwater.sinks.message_formats import MessageFormat

if TYPE_CHECKING:
    from meltwater.sinks.kafka_avro import AvroMessages

_KEY_SCHEMA = json.dumps({
    "type": "struct", "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataKey",
    "fields": [{"type": "string", "optional": False, "field": "id"}]}, separators=(",", ":"))
_VALUE_SCHEMA = json.dumps({
    "type": "struct", "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {"type": "array", "optional": True, "field": "data_collections",
         "items": {"type": "struct", "optional": False, "fields": [
             {"type": "string", "optional": False, "field": "data_collection"},
             {"type": "int64", "optional": False, "field": "event_count"}]}},
        {"type": "int64", "optional": False, "field": "ts_ms"}]}, separators=(",", ":"))


# The same as Avro (Debezium's names), for `format = "avro"`.
_AVRO_KEY = {"type": "record", "name": "TransactionMetadataKey",
             "namespace": "io.debezium.connector.common",
             "fields": [{"name": "id", "type": "string"}]}
_AVRO_VALUE = {"type": "record", "name": "TransactionMetadataValue",
               "namespace": "io.debezium.connector.common", "fields": [
                   {"name": "status", "type": "string"}, {"name": "id", "type": "string"},
                   {"name": "event_count", "type": ["null", "long"], "default": None},
                   {"name": "data_collections", "default": None, "type": ["null", {
                       "type": "array", "items": {
                           "type": "record", "name": "ConnectDefault",
                           "namespace": "io.confluent.connect.avro", "fields": [
                               {"name": "data_collection", "type": "string"},
                               {"name": "event_count", "type": "long"}]}}]},
                   {"name": "ts_ms", "type": "long"}]}


@dataclass(frozen=True)
class OpenCommit:
    """A commit begun and not ended by the batches written so far: its snapshot and how
    many of its change events they hold."""

    snapshot_id: int
    events: int


@dataclass(frozen=True)
class CommitSpan:
    """A commit's part of one batch: its events there, whether it begins or ends there,
    and how many of its events earlier batches wrote."""

    snapshot_id: int
    timestamp_ms: int
    events: tuple[KafkaEvent, ...]
    begins: bool
    ends: bool
    written_before: int

    @property
    def event_count(self) -> int:
        """The commit's change events up to the end of this batch (no tombstones)."""
        return self.written_before + sum(e.op is not None for e in self.events)


def commit_spans(events: Sequence[KafkaEvent], timestamps: dict[int, int],
                 open_commit: OpenCommit | None, last_is_whole: bool) -> list[CommitSpan]:
    """The batch's events by commit, in order. `timestamps`: each commit's time (ms);
    `last_is_whole`: whether the batch's last commit ends in it (the others do: a later
    commit follows them)."""
    groups: list[list[KafkaEvent]] = []
    for event in events:
        if groups and groups[-1][0].snapshot_id == event.snapshot_id:
            groups[-1].append(event)
        else:
            groups.append([event])
    spans = []
    for position, group in enumerate(groups):
        snapshot_id = group[0].snapshot_id
        continued = open_commit is not None and open_commit.snapshot_id == snapshot_id \
            and position == 0
        spans.append(CommitSpan(
            snapshot_id, timestamps[snapshot_id], tuple(group), begins=not continued,
            ends=position < len(groups) - 1 or last_is_whole,
            written_before=open_commit.events if continued and open_commit else 0))
    return spans


def still_open(spans: Sequence[CommitSpan], before: OpenCommit | None) -> OpenCommit | None:
    """What the marker of a batch of `spans` records as begun and not ended."""
    if not spans:
        return before
    last = spans[-1]
    return None if last.ends else OpenCommit(last.snapshot_id, last.event_count)


def boundary_messages(span: CommitSpan, table_name: str, message_format: MessageFormat,
                      avro: AvroMessages | None = None, topic: str = ""
                      ) -> tuple[KafkaEvent | None, KafkaEvent | None]:
    """The span's BEGIN (if the commit begins in it) and END (if it ends in it), written
    to `topic` (its Avro subjects are `<topic>-key` and `-value`)."""
    begin = _message(span, "BEGIN", None, message_format, avro, topic) if span.begins \
        else None
    end = _message(span, "END", table_name, message_format, avro, topic) if span.ends \
        else None
    return begin, end


def _message(span: CommitSpan, status: str, table_name: str | None,
             message_format: MessageFormat, avro: AvroMessages | None, topic: str
             ) -> KafkaEvent:
    ident = str(span.snapshot_id)
    count = None if table_name is None else span.event_count
    record = {"status": status, "id": ident, "event_count": count,
              "data_collections": None if table_name is None else
              [{"data_collection": table_name, "event_count": count}],
              "ts_ms": span.timestamp_ms}
    if message_format == MessageFormat.AVRO:
        assert avro is not None  # the sink makes one for avro
        what = f"snapshot {ident}'s {status}"
        key_bytes = avro.encode(f"{topic}-key", _AVRO_KEY, {"id": ident}, what)
        value_bytes = avro.encode(f"{topic}-value", _AVRO_VALUE, record, what)
        return _event(span, status, key_bytes, value_bytes)
    value = json.dumps(record)
    key = json.dumps({"id": ident})
    if message_format == MessageFormat.JSON_WITH_SCHEMA:
        key, value = with_schema(_KEY_SCHEMA, key), with_schema(_VALUE_SCHEMA, value)
    return _event(span, status, key.encode(), value.encode())


def _event(span: CommitSpan, status: str, key: bytes, value: bytes) -> KafkaEvent:
    ident = str(span.snapshot_id)
    event_id = f"{ident}-{status.lower()}"
    ordinal = span.events[0].ordinal
    headers = ((SNAPSHOT_ID, ident.encode()), (EVENT_ID, event_id.encode()))
    return KafkaEvent(key, value, headers, event_id, span.snapshot_id, ordinal, None)
