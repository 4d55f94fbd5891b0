"""The `kafka` sink's client: confluent-kafka (librdkafka) set up, and its errors in our words.

**Producer defaults** (`PRODUCER_DEFAULTS`; the sink's `properties` override any of them):
`partitioner = murmur2_random`, librdkafka's Murmur2 partitioner, which puts a keyed
message in the partition Apache Kafka's Java producer (and Kafka Streams, Kafka Connect,
Debezium) puts it in: `(murmur2(key) & 0x7fffffff) % partitions`, so other producers of the
same keys agree (librdkafka's own default, `consistent_random`, is CRC32 and does not);
`enable.idempotence` and `acks = all`, which a transactional producer needs anyway and
which keep each partition's order through retries.

**Errors** (`translate`): what restarting can heal is a `SinkUnavailableError` (retryable:
a broker that does not answer, a timeout, a coordinator moving); what it cannot is a
`KafkaRefusedError` naming the problem (refused credentials or TLS, a topic that may not be
written, an event over a size limit, a fenced producer, a broker without transactions).
librdkafka reports a failed connection's cause (refused credentials, say) through its error
callback, not through the call that timed out: each client here collects those (`Causes`)
and a timeout is explained by the latest of them.

**The batches topic** records, inside each batch's transaction, which batch a pipeline's
`transactional.id` wrote last (`BatchMarker`, keyed by the transactional id, partition 0,
compacted when the sink creates the topic). `last_marker` reads it back with a
`read_committed` consumer, up to the high watermark the topic had when asked, so that a
restart knows whether Spark's replay of a batch was already committed.

librdkafka's own log lines go to the `meltwater.sinks.kafka` logger.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from meltwater.sinks.errors import (
    BrokerAuthenticationError,
    KafkaRefusedError,
    MessageTooLargeError,
    ProducerFencedError,
    SinkError,
    SinkUnavailableError,
    TopicUnavailableError,
)

log = logging.getLogger("meltwater.sinks.kafka")

PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "acks": "all",
}
# Codes a retry may heal: the broker did not answer (yet), or a timeout of ours.
UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                         KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT,
                         KafkaError._RESOLVE})
AUTHENTICATION = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                            KafkaError._SSL})
AUTHORIZATION = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED,
                           KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                           KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           KafkaError.GROUP_AUTHORIZATION_FAILED})
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
UNKNOWN_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                    KafkaError.INVALID_PRODUCER_EPOCH})
UNSUPPORTED = frozenset({KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION})
CREATE_REFUSED = AUTHORIZATION | frozenset({KafkaError.POLICY_VIOLATION,
                                            KafkaError.INVALID_REPLICATION_FACTOR,
                                            KafkaError.INVALID_PARTITIONS,
                                            KafkaError.INVALID_CONFIG})


class Causes:
    """The errors librdkafka's error callback reported lately (the cause of a timeout)."""

    def __init__(self) -> None:
        self.errors: deque[KafkaError] = deque(maxlen=16)

    def __call__(self, error: KafkaError) -> None:
        """Keep an error librdkafka reports (its `error_cb`)."""
        self.errors.append(error)

    def cause(self) -> KafkaError | None:
        """The most telling recent error: refused credentials over anything else, then the
        latest one."""
        for error in reversed(self.errors):
            if error.code() in AUTHENTICATION:
                return error
        return self.errors[-1] if self.errors else None


@dataclass(frozen=True)
class Connection:
    """Where the sink writes and how to reach it: brokers, topic, the user's properties."""

    bootstrap_servers: str
    topic: str
    properties: Mapping[str, Any]
    timeout_s: float = 30.0

    def config(self, causes: Causes, **ours: Any) -> dict[str, Any]:
        """A client configuration: ours, then the user's properties over it, then the
        brokers, the error callback and the logger."""
        return {**ours, **self.properties, "bootstrap.servers": self.bootstrap_servers,
                "error_cb": causes, "logger": log}


def translate(error: KafkaError, connection: Connection, doing: str,
              causes: Causes | None = None) -> SinkError:
    """A librdkafka error as the sink's error (see the module doc)."""
    code = error.code()
    if code in UNREACHABLE and causes is not None:
        cause = causes.cause()
        if cause is not None and cause.code() not in (KafkaError._ALL_BROKERS_DOWN,):
            error, code = cause, cause.code()
    text = f"{error.name()}: {error.str()}"
    servers = connection.bootstrap_servers
    if code in AUTHENTICATION:
        return BrokerAuthenticationError(
            f"Kafka broker {servers} refused the connection while {doing} ({text}): check "
            "security.protocol and the sasl.* / ssl.* properties of the sink")
    if code in AUTHORIZATION:
        return TopicUnavailableError(f"topic {connection.topic}: not authorized while {doing} "
                                     f"({text}): grant the sink's principal the rights")
    if code in UNKNOWN_TOPIC:
        return TopicUnavailableError(f"topic {connection.topic} does not exist ({doing}: "
                                     f"{text})")
    if code in TOO_LARGE:
        return MessageTooLargeError(f"topic {connection.topic}: the broker refused a message "
                                    f"as too large while {doing} ({text}): raise the topic's "
                                    "max.message.bytes")
    if code in FENCED:
        return ProducerFencedError(f"the sink's producer was fenced while {doing} ({text}): "
                                   "another process writes with this pipeline's "
                                   "transactional-id; stop it")
    if code in UNSUPPORTED:
        return KafkaRefusedError(f"Kafka broker {servers} does not support what the sink "
                                 f"needs while {doing} ({text}); a broker without "
                                 "transactions needs transactional = false")
    if code in UNREACHABLE or error.retriable():
        return SinkUnavailableError(f"Kafka broker {servers} unavailable while {doing} "
                                    f"({text})")
    return KafkaRefusedError(f"Kafka refused {doing} ({text})")


def raised(error: BaseException) -> KafkaError | None:
    """The KafkaError a confluent-kafka exception carries."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0],
                                                                        KafkaError):
        return error.args[0]
    return None


# -- topics -----------------------------------------------------------------------------------


def ensure_topic(connection: Connection, name: str, *, create: bool,
                 partitions: int | None = None, config: Mapping[str, str] | None = None,
                 what: str = "topic") -> bool:
    """Make sure topic `name` exists: create it if missing and allowed (`partitions`, or
    the broker's default); True if it was created. A topic that is missing and may not be
    created is a TopicUnavailableError naming it. Listing all topics, not the one: a
    metadata request naming a topic makes brokers with auto-creation create it."""
    causes = Causes()
    admin = AdminClient(connection.config(causes))
    where = f"listing the topics of {connection.bootstrap_servers}"
    try:
        metadata = admin.list_topics(timeout=connection.timeout_s)
    except KafkaException as error:
        kafka = raised(error)
        if kafka is None:
            raise
        admin.poll(0)  # serves the error callback: what the failure came from
        raise translate(kafka, connection, where, causes) from None
    if name in metadata.topics and metadata.topics[name].error is None:
        return False
    if not create:
        raise TopicUnavailableError(f"{what} {name} does not exist on "
                                    f"{connection.bootstrap_servers}: create it, or let the "
                                    "sink create it (create-topics = true)")
    topic = NewTopic(name, num_partitions=partitions or -1, replication_factor=-1,
                     config=dict(config or {}))
    future = admin.create_topics([topic], request_timeout=connection.timeout_s)[name]
    try:
        future.result()
    except KafkaException as error:
        kafka = raised(error)
        if kafka is None:
            raise
        if kafka.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        if kafka.code() in CREATE_REFUSED:
            raise TopicUnavailableError(
                f"{what} {name} does not exist on {connection.bootstrap_servers} and the "
                f"broker refused to create it ({kafka.name()}: {kafka.str()}): create it, "
                "or grant the sink's principal the right to") from None
        raise translate(kafka, connection, f"creating {what} {name}", causes) from None
    log.info("created %s %s on %s", what, name, connection.bootstrap_servers)
    return True


# -- the batches topic --------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchMarker:
    """What a pipeline's transaction records of its batch (see the module doc).
    `transaction` names the attempt; every message of it carries it in a header."""

    transactional_id: str
    batch_id: int
    transaction: str
    topic: str
    events: int
    snapshot_id: int | None
    sequence_number: int | None
    written_at: str
    # a commit the batches so far began and did not end: [snapshot id, its change events]
    # (`kafka_transactions.OpenCommit`); None without transaction metadata
    open_commit: list[int] | None = None

    @staticmethod
    def now() -> str:
        """The time a marker is written, ISO-8601 UTC."""
        return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")

    def to_json(self) -> bytes:
        """The marker as the batches topic holds it."""
        return json.dumps(asdict(self)).encode()

    @staticmethod
    def from_json(value: bytes) -> BatchMarker:
        """A marker read from the batches topic."""
        obj = json.loads(value)
        return BatchMarker(**{k: obj.get(k) for k in BatchMarker.__dataclass_fields__})


MARKER_WINDOW = 256


def last_marker(connection: Connection, batches_topic: str, key: str) -> BatchMarker | None:
    """The newest committed marker keyed `key` in partition 0 of `batches_topic`, None if
    there is none. Read backwards in growing windows from the high watermark the partition
    had when asked, with `read_committed`; a window is read to that watermark, so a marker
    committed before the call is never missed (another producer's open transaction below
    it holds the read back until it ends, up to the connection's timeout)."""
    causes = Causes()
    consumer = Consumer(connection.config(
        causes, **{"group.id": f"meltwater-marker-reader-{key}",
                   "isolation.level": "read_committed", "enable.auto.commit": False,
                   "enable.partition.eof": True, "auto.offset.reset": "earliest"}))
    partition = TopicPartition(batches_topic, 0)
    doing = f"reading the batches topic {batches_topic}"
    try:
        low, high = consumer.get_watermark_offsets(partition, timeout=connection.timeout_s,
                                                   cached=False)
        end, window = high, MARKER_WINDOW
        while end > low:
            start = max(low, end - window)
            # the first window is read to the watermark, which open transactions may hold
            # back; the ones below it are past every transaction by then
            found = _read_window(consumer, connection, batches_topic, key, start, end,
                                 high if end == high else end, causes)
            if found is not None:
                return found
            end, window = start, window * 4
        return None
    except KafkaException as error:
        kafka = raised(error)
        if kafka is None:
            raise
        raise translate(kafka, connection, doing, causes) from None
    finally:
        consumer.close()


def _read_window(consumer: Consumer, connection: Connection, topic: str, key: str,
                 start: int, end: int, high: int, causes: Causes) -> BatchMarker | None:
    """The last marker keyed `key` at offsets [start, end), reading until the position
    reaches `high`."""
    consumer.assign([TopicPartition(topic, 0, start)])
    deadline = time.monotonic() + connection.timeout_s
    found = None
    while True:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            offset = message.offset()
            if offset is not None and offset < end and message.key() == key.encode():
                value = message.value()
                if value is not None:
                    found = BatchMarker.from_json(value)
        elif message is not None:
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise translate(error, connection, f"reading the batches topic {topic}",
                                causes)
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
        if position >= high:
            return found
        if time.monotonic() > deadline:
            raise SinkUnavailableError(
                f"reading the batches topic {topic}: offset {high} not readable after "
                f"{connection.timeout_s:.0f}s (at {position}): an open transaction of "
                "another producer holds it back")
