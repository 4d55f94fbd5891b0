"""What a Kafka message's key and value are written as (the Kafka sink's `format`)."""

from __future__ import annotations

from meltwater.planner.str_enum import StrEnum


class MessageFormat(StrEnum):
    """`json`: Debezium's envelope as JSON, keys as JSON objects (what Debezium's
    JsonConverter writes with `schemas.enable=false`, and what Flink's `debezium-json`,
    upsert-kafka and most consumers read). `json-with-schema`: the same, each key and value
    wrapped with its Kafka Connect schema (`meltwater.sinks.connect_json`), for Kafka
    Connect sinks (`JsonConverter` with `schemas.enable=true`). `avro`: Avro in the
    Confluent wire format (a zero byte, the 4-byte schema id, the Avro binary), each
    commit's key and value schemas registered in a schema registry
    (`meltwater.sinks.kafka_avro`), for Flink's `debezium-avro-confluent`, Kafka Connect's
    AvroConverter and the other readers of Debezium's Avro."""

    JSON = "json"
    JSON_WITH_SCHEMA = "json-with-schema"
    AVRO = "avro"
