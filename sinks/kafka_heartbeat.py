"""Heartbeats for the Kafka sink (`heartbeat-interval`, seconds; off by default, as
Debezium's `heartbeat.interval.ms`): a message every interval on
`__debezium-heartbeat.<prefix>`, so a consumer tells a quiet table from a stopped
pipeline.

Debezium's shapes: key `{"serverName": "<prefix>"}`, value `{"ts_ms": <when sent>}` (with
`format = "json-with-schema"`, each wrapped with its Connect schema). The prefix is the
topic's first dotted name, as for the transaction topic.

Heartbeats are sent from a thread of their own with an idempotent producer of their own,
outside the batches' Kafka transactions: they carry no data and need no exactly-once. A
heartbeat the broker does not take is logged (once, until one is taken again) and the
pipeline goes on; its batches report the broker's state themselves.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, Producer

from meltwater.sinks.connect_json import with_schema
from meltwater.sinks.errors import SinkError
from meltwater.sinks.kafka_client import PRODUCER_DEFAULTS, Causes, Connection, ensure_topic
from meltwater.sinks.kafka_topics import heartbeat_topic, topic_prefix
from meltwater.sinks.message_formats import MessageFormat

if TYPE_CHECKING:
    from meltwater.sinks.kafka_avro import AvroMessages

log = logging.getLogger("meltwater.sinks.kafka")

_KEY_SCHEMA = json.dumps({
    "type": "struct", "optional": False, "name": "io.debezium.connector.common.ServerNameKey",
    "fields": [{"type": "string", "optional": False, "field": "serverName"}]},
    separators=(",", ":"))
_VALUE_SCHEMA = json.dumps({
    "type": "struct", "optional": False, "name": "io.debezium.connector.common.Heartbeat",
    "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}]}, separators=(",", ":"))


_AVRO_KEY = {"type": "record", "name": "ServerNameKey",
             "namespace": "io.debezium.connector.common",
             "fields": [{"name": "serverName", "type": "string"}]}
_AVRO_VALUE = {"type": "record", "name": "Heartbeat", "namespace": "io.debezium.connector.common",
               "fields": [{"name": "ts_ms", "type": "long"}]}


class KafkaHeartbeat:
    """Sends a heartbeat every `interval_s` seconds until stopped."""

    def __init__(self, connection: Connection, interval_s: float,
                 message_format: MessageFormat = MessageFormat.JSON, *,
                 create_topic: bool = True, avro: AvroMessages | None = None) -> None:
        self.connection = connection
        self._avro = avro
        self._create = create_topic
        self.interval_s = interval_s
        self.topic = heartbeat_topic(connection.topic)
        self._format = message_format
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="meltwater-kafka-heartbeat",
                                        daemon=True)

    def start(self) -> KafkaHeartbeat:
        """Start sending; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending, and wait for the thread (a heartbeat being sent is let go)."""
        self._stop.set()
        self._thread.join(timeout=self.connection.timeout_s + 1)

    @property
    def running(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def message(self, ts_ms: int) -> tuple[bytes, bytes]:
        """One heartbeat's key and value."""
        server = {"serverName": topic_prefix(self.connection.topic)}
        if self._format == MessageFormat.AVRO:
            assert self._avro is not None  # made with the sink's registry
            return (self._avro.encode(f"{self.topic}-key", _AVRO_KEY, server, "a heartbeat"),
                    self._avro.encode(f"{self.topic}-value", _AVRO_VALUE, {"ts_ms": ts_ms},
                                      "a heartbeat"))
        key = json.dumps(server)
        value = json.dumps({"ts_ms": ts_ms})
        if self._format == MessageFormat.JSON_WITH_SCHEMA:
            key, value = with_schema(_KEY_SCHEMA, key), with_schema(_VALUE_SCHEMA, value)
        return key.encode(), value.encode()

    def _run(self) -> None:
        try:
            ensure_topic(self.connection, self.topic, create=self._create, partitions=1,
                         what="heartbeat topic")
        except SinkError as error:
            self._failed(str(error))
        causes = Causes()
        producer = Producer(self.connection.config(causes, **PRODUCER_DEFAULTS))
        try:
            while not self._stop.wait(self.interval_s):
                self._send(producer)
        finally:
            producer.flush(0)

    def _send(self, producer: Producer) -> None:
        key, value = self.message(int(time.time() * 1000))
        try:
            producer.produce(self.topic, key=key, value=value)
            left = producer.flush(min(self.interval_s, self.connection.timeout_s))
        except (KafkaException, BufferError, SinkError) as error:
            self._failed(str(error))
            return
        if left:
            self._failed(f"{left} heartbeat(s) not delivered yet")
        elif self._failing:
            self._failing = False
            log.info("heartbeats to %s delivered again", self.topic)

    def _failed(self, why: str) -> None:
        if not self._failing:
            self._failing = True
            log.warning("heartbeat to %s not delivered: %s", self.topic, why)
