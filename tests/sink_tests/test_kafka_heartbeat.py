"""Heartbeats (`heartbeat-interval`): Debezium's messages on `__debezium-heartbeat.<prefix>`
at the interval while the pipeline runs, in either format; a broker that does not answer
is logged once and the heartbeat goes on; stopping it stops its thread."""

from __future__ import annotations

import json
import logging
import time

import pytest
from kafka_read import decoded, read_topic
from loopback_ports import free_port

from meltwater.sinks.kafka_avro import RegistryConfig, avro_messages
from meltwater.sinks.kafka_client import Connection
from meltwater.sinks.kafka_heartbeat import KafkaHeartbeat
from meltwater.sinks.message_formats import MessageFormat


def _until(condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f}s"
        time.sleep(0.1)


@pytest.mark.parametrize("message_format", list(MessageFormat))
def test_heartbeats_are_debeziums_messages_on_the_prefixs_heartbeat_topic(
        kafka_broker, schema_registry, message_format):
    began = int(time.time() * 1000)
    avro = avro_messages(message_format, RegistryConfig(schema_registry.url, {}),
                         "lake.sales.orders")
    heartbeat = KafkaHeartbeat(Connection(kafka_broker.bootstrap, "lake.sales.orders", {}, 10),
                               0.2, message_format, avro=avro).start()
    try:
        assert heartbeat.topic == "__debezium-heartbeat.lake"
        found = _until(lambda: len(read_topic(kafka_broker.bootstrap, heartbeat.topic)) >= 3
                       and read_topic(kafka_broker.bootstrap, heartbeat.topic), "3 heartbeats")
    finally:
        heartbeat.stop()
    assert not heartbeat.running
    ended = int(time.time() * 1000)
    keys = [decoded(m.key) for m in found]
    values = [decoded(m.value) for m in found]
    assert keys == [{"serverName": "lake"}] * len(found)
    times = [v["ts_ms"] for v in values]
    assert set(values[0]) == {"ts_ms"} and times == sorted(times)
    assert began <= times[0] and times[-1] <= ended
    if message_format == MessageFormat.AVRO:
        assert found[0].value[:1] == b"\x00"  # Confluent's wire format
    else:
        framed = json.loads(found[0].value)
        assert ("schema" in framed) == (message_format == MessageFormat.JSON_WITH_SCHEMA)


def test_a_broker_that_does_not_answer_is_logged_once_and_the_heartbeat_goes_on(caplog):
    caplog.set_level(logging.WARNING, logger="meltwater.sinks.kafka")
    nobody = f"127.0.0.1:{free_port()}"
    heartbeat = KafkaHeartbeat(Connection(nobody, "lake.orders", {}, 1), 0.2,
                               create_topic=False).start()
    try:
        _until(lambda: [r for r in caplog.records if "heartbeat" in r.getMessage()],
               "warning about the heartbeat")
        assert heartbeat.running
    finally:
        heartbeat.stop()
    assert not heartbeat.running
    warnings = [r.getMessage() for r in caplog.records if "heartbeat" in r.getMessage()]
    assert len(warnings) == 1 and "__debezium-heartbeat.lake" in warnings[0]
