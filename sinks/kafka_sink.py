"""The Kafka sink: each batch's change events in one Kafka transaction, exactly once.

    sink = KafkaSink(KafkaSinkOptions(Connection("broker:9092", "lake.sales.orders", {}),
                                      table="lake.sales.orders",
                                      transactional_id="meltwater-orders"))
    sink.apply(batch_id, changes)        # BatchResult(upserted=..., deleted=...)

The events are `meltwater.sinks.kafka_events`' (Debezium envelopes keyed by the key
columns, in commit order per key). Opening the sink makes sure the topic and the batches
topic exist (creating them unless `create_topics` is off), starts a producer under the
pipeline's `transactional_id` (which fences any earlier producer of the pipeline and
aborts its unfinished transaction) and then reads the pipeline's last `BatchMarker` back
with a `read_committed` consumer (`meltwater.sinks.kafka_client`).

**Exactly once.** `apply(batch_id, ...)` skips the batch id the last marker holds: Spark
replays the last batch after a crash, and that batch may have committed in Kafka before
the checkpoint recorded it. The replay must have the marker's event count and end
snapshot, and an older batch id is refused (`BatchMismatchError`): either means a new
checkpoint writing under an old transactional id, whose batches would otherwise all be
skipped. Otherwise, in one transaction: every event (each with a
header `meltwater.transaction` naming this attempt), a flush that waits until the broker
has all of them, then the marker (batch id, attempt, event count, the snapshot the topic
then holds whole), then the commit. A crash anywhere before the commit leaves an open
transaction the next producer aborts, so a `read_committed` consumer sees each batch once.
Any failure drops the producer; the next batch opens a new one, which reads the marker
again: a commit whose answer was lost is then found, and not written twice.

**Without transactions** (`transactional=False`, for a broker that has none): the same
sequence without begin and commit, with an idempotent producer. A crash after some events
and before the marker leaves those events in the topic and the batch is written again on
restart, under a new attempt: at-least-once, with the same event ids (`meltwater.event_id`),
so a consumer that drops ids it has seen gets every change once; one that also reads the
batches topic can instead drop the messages of attempts that have no marker (the flush
before the marker makes a marker's presence mean all of its attempt's events are there).

Keys are resolved once, when the sink opens, by field id: the `key` columns given, else the
table's identifier fields; none is a `MissingKeyColumnsError` naming `key`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Producer

from meltwater.output.change_events import epoch_ms
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.table_source import TableSource
from meltwater.sinks.base import BatchResult, ChangeInput, Position, as_table
from meltwater.sinks.errors import (
    InvalidKeyColumnError,
    KafkaRefusedError,
    MessageTooLargeError,
    MissingKeyColumnsError,
)
from meltwater.sinks.kafka_avro import RegistryConfig, avro_messages
from meltwater.sinks.kafka_client import (
    PRODUCER_DEFAULTS,
    TOO_LARGE,
    BatchMarker,
    Causes,
    Connection,
    ensure_topic,
    last_marker,
    raised,
    translate,
)
from meltwater.sinks.kafka_events import SNAPSHOT_ID, EventOptions, KafkaEvent, kafka_events
from meltwater.sinks.kafka_transactions import (
    OpenCommit,
    boundary_messages,
    commit_spans,
    still_open,
)
from meltwater.sinks.message_formats import MessageFormat
from meltwater.sinks.source_table import (
    AppliedBatch,
    BatchRecord,
    CommitPoint,
    SourceTable,
    batch_reach,
    check_replay,
    key_column_names,
    last_commit,
    stated_end,
)
from meltwater.stream.engine.changes.change_schema import COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP
from meltwater.stream.engine.decode.arrow_schema import field_id
from meltwater.stream.watch.stream_offsets import StreamOffset

log = logging.getLogger(__name__)

DEFAULT_BATCHES_TOPIC = "meltwater.batches"
TRANSACTION = "meltwater.transaction"
KEY_HINT = 'set key = ["<column>", ...] in the pipeline\'s sink'
_BATCHES_TOPIC_CONFIG = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class KafkaSinkOptions:
    """Everything a Kafka sink is opened with (see the module doc and `kafka_stream`)."""

    connection: Connection
    table: TableSource | str
    transactional_id: str
    key: tuple[str, ...] | None = None
    tombstones: bool = True
    snapshot_as_inserts: bool = False
    batches_topic: str = DEFAULT_BATCHES_TOPIC
    transactional: bool = True
    create_topics: bool = True
    partitions: int | None = None
    key_hint: str = KEY_HINT
    message_format: MessageFormat = MessageFormat.JSON
    transaction_topic: str | None = None  # transaction metadata to it (`kafka_transactions`)
    schema_registry: RegistryConfig | None = None  # for `format = "avro"` (`kafka_avro`)


def resolve_key(schema: Schema, key: Sequence[str] | None, table: object,
                key_hint: str = KEY_HINT) -> tuple[int, ...]:
    """The key's field ids: the columns given, else the identifier fields; each a top-level
    column of a primitive type."""
    names = key_column_names(key, schema)
    if not names:
        raise MissingKeyColumnsError(
            f"table {table} has no identifier fields to key its Kafka messages by: "
            f"{key_hint} (or set the table's identifier fields, e.g. ALTER TABLE ... SET "
            "IDENTIFIER FIELDS id)")
    ids = []
    for name in names:
        found = next((f for f in schema.fields if f.name == name), None)
        if found is None:
            raise InvalidKeyColumnError(
                f"key column {name!r} is not a top-level column of table {table} "
                f"(columns: {', '.join(f.name for f in schema.fields)})")
        if not found.type.is_primitive:
            raise InvalidKeyColumnError(f"key column {name!r} of table {table} is a "
                                        f"{found.type}: a key column must be a primitive type")
        ids.append(found.field_id)
    return tuple(ids)


class KafkaSink:
    """A table's change events into a Kafka topic, one transaction per batch."""

    name = "kafka"

    def __init__(self, options: KafkaSinkOptions) -> None:
        self.options = options
        self._source = SourceTable.read_now(options.table)
        schema = self._source.metadata.schema
        self._key_ids = resolve_key(schema, options.key, options.table, options.key_hint)
        self._producer: Producer | None = None
        self._causes = Causes()
        self._marker: BatchMarker | None = None
        self._avro = avro_messages(options.message_format, options.schema_registry,
                                   options.connection.topic)

    # -- the Sink protocol -------------------------------------------------------------------

    def apply(self, batch_id: int, changes: ChangeInput, *, snapshot_id: int | None = None,
              sequence_number: int | None = None,
              end: StreamOffset | None = None) -> BatchResult:
        """Write one batch's events in one transaction, or skip a batch written before (see
        the module doc). `end` (the stream offset the batch ends at) names the snapshot the
        topic holds whole afterwards, in the marker; else `snapshot_id` or the batch's
        last commit."""
        batch = as_table(changes)
        what = f"batch {batch_id} of {self.options.transactional_id}"
        producer = self._open()
        last = self._marker
        open_commit = None if last is None or last.open_commit is None \
            else OpenCommit(*last.open_commit)
        events = kafka_events(batch, self._event_options(batch), what=what,
                              names_at=self._names_at(batch),
                              written_before=None if open_commit is None
                              else {open_commit.snapshot_id: open_commit.events})
        snapshot, sequence = batch_reach(
            batch, stated_end(end, snapshot_id, sequence_number, self._source), self._previous)
        if last is not None and batch_id <= last.batch_id:
            check_replay(BatchRecord.MARKER,
                         AppliedBatch(last.batch_id, last.events, last.snapshot_id,
                                      last.transactional_id),
                         AppliedBatch(batch_id, len(events), snapshot), what)
            return BatchResult(batch_id, True, batch.num_rows, 0, 0, self.reached())
        outgoing, still = self._with_transactions(batch, events, open_commit,
                                                  CommitPoint(snapshot, sequence))
        marker = BatchMarker(self.options.transactional_id, batch_id, uuid.uuid4().hex,
                             self.options.connection.topic, len(events), snapshot, sequence,
                             BatchMarker.now(),
                             None if still is None else [still.snapshot_id, still.events])
        try:
            self._write(producer, outgoing, marker, what)
        except BaseException:
            self._drop()
            raise
        self._marker = marker
        deleted = sum(e.op == "d" for e in events)
        upserted = sum(e.op in ("c", "u", "r") for e in events)
        return BatchResult(batch_id, False, batch.num_rows, upserted, deleted, self.reached())

    def reached(self) -> Position | None:
        """The pipeline's last batch written to the topic, and the snapshot it holds whole."""
        self._open()
        marker = self._marker
        if marker is None:
            return None
        return Position(marker.batch_id, marker.snapshot_id, marker.sequence_number,
                        dt.datetime.fromisoformat(marker.written_at))

    def close(self) -> None:
        """Let go of the producer (what it still holds was never committed)."""
        self._drop()

    def __enter__(self) -> KafkaSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- opening -------------------------------------------------------------------------------

    def _open(self) -> Producer:
        """The producer, opened (topics, producer, marker) if it is not."""
        if self._producer is not None:
            return self._producer
        options = self.options
        connection = options.connection
        ensure_topic(connection, connection.topic, create=options.create_topics,
                     partitions=options.partitions)
        ensure_topic(connection, options.batches_topic, create=options.create_topics,
                     partitions=1, config=_BATCHES_TOPIC_CONFIG, what="batches topic")
        if options.transaction_topic is not None:
            ensure_topic(connection, options.transaction_topic, create=options.create_topics,
                         partitions=1, what="transaction topic")
        self._causes = Causes()
        ours = dict(PRODUCER_DEFAULTS)
        if options.transactional:
            ours["transactional.id"] = options.transactional_id
        try:
            producer = Producer(connection.config(self._causes, **ours))
        except KafkaException as error:
            raise KafkaRefusedError(f"the Kafka sink's properties: {error}") from None
        if options.transactional:
            try:
                producer.init_transactions(connection.timeout_s)
            except KafkaException as error:
                raise self._translated(error, "starting the transactional producer",
                                       producer) from None
        self._marker = last_marker(connection, options.batches_topic, options.transactional_id)
        self._producer = producer
        return producer

    def _drop(self) -> None:
        """Abort what the producer holds, if it can, and let it go."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if self.options.transactional:
            # no transaction, or the broker is gone: the next producer aborts it
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(min(5.0, self.options.connection.timeout_s))
        producer.purge()
        producer.flush(0)

    # -- writing -------------------------------------------------------------------------------

    def _with_transactions(self, batch: pa.Table, events: list[KafkaEvent],
                           open_commit: OpenCommit | None, reach: CommitPoint
                           ) -> tuple[list[tuple[str, KafkaEvent]], OpenCommit | None]:
        """The batch's messages with their topics, in order (with transaction metadata, each
        commit's events between its BEGIN and END), and the commit it leaves open."""
        topic = self.options.connection.topic
        transactions = self.options.transaction_topic
        if transactions is None:
            return [(topic, e) for e in events], None
        last = last_commit(batch)
        whole = last.snapshot_id == reach.snapshot_id or (
            reach.sequence_number is not None and last.sequence_number is not None
            and reach.sequence_number >= last.sequence_number)
        spans = commit_spans(events, _commit_times(batch), open_commit, whole)
        outgoing: list[tuple[str, KafkaEvent]] = []
        for span in spans:
            begin, finish = boundary_messages(span, str(self.options.table),
                                              self.options.message_format, self._avro,
                                              transactions)
            if begin is not None:
                outgoing.append((transactions, begin))
            outgoing.extend((topic, e) for e in span.events)
            if finish is not None:
                outgoing.append((transactions, finish))
        return outgoing, still_open(spans, open_commit)

    def _write(self, producer: Producer, events: list[tuple[str, KafkaEvent]],
               marker: BatchMarker, what: str) -> None:
        options = self.options
        connection = options.connection
        failures: list[tuple[KafkaError, Any]] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                failures.append((error, message))

        attempt = (TRANSACTION, marker.transaction.encode())
        try:
            if options.transactional:
                producer.begin_transaction()
            for topic, event in events:
                self._produce(producer, topic, event, attempt, delivered, what)
            self._flush(producer, failures, what)
            producer.produce(options.batches_topic, key=options.transactional_id.encode(),
                             value=marker.to_json(), partition=0, headers=[attempt],
                             on_delivery=delivered)
            if options.transactional:
                producer.commit_transaction(connection.timeout_s)
            else:
                self._flush(producer, failures, what)
        except KafkaException as error:
            raise self._translated(error, f"writing {what}", producer) from None

    def _produce(self, producer: Producer, topic: str, event: KafkaEvent,
                 attempt: tuple[str, bytes], delivered: Any, what: str) -> None:
        while True:
            try:
                producer.produce(topic, key=event.key, value=event.value,
                                 headers=[*event.headers, attempt], on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
            except KafkaException as error:
                kafka = raised(error)
                if kafka is not None and kafka.code() in TOO_LARGE:
                    raise self._too_large(event.key, event.snapshot_id,
                                          len(event.value or b""), what) from None
                raise

    def _flush(self, producer: Producer, failures: list[tuple[KafkaError, Any]],
               what: str) -> None:
        """Wait until the broker has every message produced, or fail."""
        left = producer.flush(self.options.connection.timeout_s)
        if failures:
            error, message = failures[0]
            if error.code() in TOO_LARGE:
                headers = dict(message.headers() or [])
                snapshot = int(headers.get(SNAPSHOT_ID, b"0") or 0)
                raise self._too_large(message.key() or b"", snapshot,
                                      len(message.value() or b""), what, broker=True)
            raise translate(error, self.options.connection, f"writing {what}", self._causes)
        if left:
            timeout = KafkaError(KafkaError._TIMED_OUT, f"{left} message(s) not delivered "
                                 f"after {self.options.connection.timeout_s:.0f}s")
            raise translate(timeout, self.options.connection, f"writing {what}", self._causes)

    def _too_large(self, key: bytes, snapshot_id: int, size: int, what: str, *,
                   broker: bool = False) -> MessageTooLargeError:
        limit = self.options.connection.properties.get("message.max.bytes", 1000000)
        where = ("the broker's max.message.bytes (or the topic's)" if broker
                 else f"the producer's message.max.bytes ({limit})")
        return MessageTooLargeError(
            f"topic {self.options.connection.topic}: the event for key {key.decode()} of "
            f"snapshot {snapshot_id} in {what} is {size} bytes, over {where}: raise the "
            "limit (message.max.bytes in the sink's properties, max.message.bytes on the "
            "topic)")

    def _translated(self, error: KafkaException, doing: str,
                    producer: Producer | None = None) -> Exception:
        kafka = raised(error)
        if kafka is None:
            return error
        producer = producer or self._producer
        if producer is not None:
            producer.poll(0)  # serves the error callback: what the failure came from
        return translate(kafka, self.options.connection, doing, self._causes)

    # -- what the events say -----------------------------------------------------------------

    def _event_options(self, batch: pa.Table) -> EventOptions:
        columns = self._columns_by_id(batch)
        schema = self._source.metadata.schema
        key = []
        for fid in self._key_ids:
            name = columns.get(fid)
            if name is None:
                found = schema.struct.field(fid)
                name = found.name if found is not None else None
            if name is None or name not in batch.column_names:
                raise InvalidKeyColumnError(
                    f"the change batch of table {self.options.table} lacks key column "
                    f"(field id {fid}); columns: {', '.join(batch.column_names)}")
            key.append(name)
        return EventOptions(str(self.options.table), tuple(key), self.options.tombstones,
                            self.options.snapshot_as_inserts, self.options.message_format,
                            transaction_metadata=self.options.transaction_topic is not None,
                            avro=self._avro)

    @staticmethod
    def _columns_by_id(batch: pa.Table) -> dict[int, str]:
        found = {}
        for f in batch.schema:
            fid = field_id(f)
            if fid is not None:
                found[fid] = f.name
        return found

    def _names_at(self, batch: pa.Table) -> Any:
        """Batch column -> its name in a commit's schema, by field id (None: the batch
        carries no field ids, and images keep its names)."""
        columns = self._columns_by_id(batch)
        if not columns:
            return None

        def names_at(snapshot_id: int) -> Mapping[str, str]:
            schema = self._source.schema_at(snapshot_id, unknown_as_current=True)
            return {name: found.name for fid, name in columns.items()
                    if (found := schema.struct.field(fid)) is not None}

        return names_at

    def _previous(self) -> CommitPoint | None:
        """The commit the last marker holds (an empty batch carries it forward)."""
        marker = self._marker
        return None if marker is None else CommitPoint(marker.snapshot_id,
                                                       marker.sequence_number)


__all__ = ["DEFAULT_BATCHES_TOPIC", "KafkaSink", "KafkaSinkOptions", "resolve_key"]


def _commit_times(batch: pa.Table) -> dict[int, int]:
    """Each commit's time (epoch ms) by snapshot id, from the batch's commit columns."""
    ids = batch.column(COMMIT_SNAPSHOT_ID)
    times = batch.column(COMMIT_TIMESTAMP)
    found = {}
    for snapshot_id in pc.unique(ids).to_pylist():
        row = pc.index(ids, snapshot_id).as_py()
        found[snapshot_id] = epoch_ms(times[row].as_py()) or 0
    return found
