"""`format = "avro"`: the Kafka sink's messages as Avro in the Confluent wire format, their
schemas in a schema registry.

    [pipelines.sink]
    type = "kafka"
    format = "avro"
    schema-registry-url = "https://registry:8081"
    [pipelines.sink.schema-registry-properties]    # confluent-kafka's SchemaRegistryClient
    "basic.auth.user.info" = "user:secret"

Each commit's key and value schemas (`avro_schema`: Debezium's envelope, the commit's
columns) are registered under the topic's subjects, `<topic>-key` and `<topic>-value`
(Confluent's TopicNameStrategy), through confluent-kafka's `SchemaRegistryClient`; the
registry answers a schema it holds with its id, so registering again costs a lookup once
per process. A message is the zero byte, the schema id (4 bytes, big-endian) and the record
written by fastavro: what confluent-kafka's `AvroDeserializer`, Kafka Connect's
AvroConverter and Flink's `debezium-avro-confluent` read.

A schema the registry refuses (a column added as required under BACKWARD compatibility, a
type changed beyond Avro's promotions) stops the pipeline with one line naming the subject,
the snapshot and the registry's words (`KafkaRefusedError`: retrying cannot help); a
registry that does not answer is retried as a broker that does not is
(`SinkUnavailableError`).
"""

from __future__ import annotations

import functools
import io
import json
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from meltwater.output.change_events import epoch_ms
from meltwater.sinks.avro_schema import avro_rows, envelope_schema, key_schema
from meltwater.sinks.connect_json import schema_name
from meltwater.sinks.errors import KafkaRefusedError, SinkUnavailableError
from meltwater.sinks.message_formats import MessageFormat
from meltwater.stream.engine.changes.change_schema import (
    COMMIT_SEQUENCE_NUMBER,
    COMMIT_SNAPSHOT_ID,
    COMMIT_TIMESTAMP,
)

_MAGIC = b"\x00"


@dataclass(frozen=True)
class RegistryConfig:
    """Where the schema registry is, and the client's other properties (auth, TLS)."""

    url: str
    properties: Mapping[str, str]


@dataclass(frozen=True)
class _Writer:
    """A registered schema: its id and fastavro's parsed form."""

    schema_id: int
    parsed: Any

    def encode(self, record: Mapping[str, Any] | None) -> bytes:
        """The record in the Confluent wire format."""
        out = io.BytesIO()
        out.write(_MAGIC + struct.pack(">I", self.schema_id))
        _fastavro_writer()(out, self.parsed, record)
        return out.getvalue()


@functools.cache
def _fastavro_writer() -> Any:
    """Fastavro's `schemaless_writer`, imported once (it loads with the first Avro sink)."""
    from fastavro import schemaless_writer

    return schemaless_writer


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What the registry client raises when the registry does not answer: errors of the
    HTTP library it uses (httpx2, else httpx: confluent-kafka picks), and the OS's."""
    try:
        import httpx2 as http  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        import httpx as http  # type: ignore[import-not-found,no-redef,unused-ignore]
    return (http.HTTPError, OSError)


class AvroMessages:
    """The registry's side of Avro messages for one topic: schemas registered once each."""

    def __init__(self, config: RegistryConfig, topic: str) -> None:
        self.config = config
        self.topic = topic
        self._client: Any = None
        self._writers: dict[tuple[str, str], _Writer] = {}
        self._lock = threading.Lock()

    def writer(self, subject: str, schema: dict[str, Any], what: str) -> _Writer:
        """The writer of `schema` under `subject`, registering it the first time."""
        text = json.dumps(schema, separators=(",", ":"))
        with self._lock:
            found = self._writers.get((subject, text))
        if found is not None:
            return found
        from confluent_kafka.schema_registry import Schema
        from fastavro import parse_schema

        schema_id = self._register(subject, Schema(text, "AVRO"), what)
        found = _Writer(schema_id, parse_schema(schema))
        with self._lock:
            self._writers[(subject, text)] = found
        return found

    def check(self) -> None:
        """Make the registry's client (nothing is sent): properties it does not know, or
        values it refuses, are one line."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        if self._client is None:
            try:
                self._client = SchemaRegistryClient({"url": self.config.url,
                                                     **self.config.properties})
            except (ValueError, TypeError) as error:
                raise KafkaRefusedError(f"schema-registry-properties: {error}") from None

    def _register(self, subject: str, schema: Any, what: str) -> int:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        self.check()
        try:
            return int(self._client.register_schema(subject, schema))
        except SchemaRegistryError as error:
            status = error.http_status_code
            words = f"{error.error_message} (HTTP {status}, error {error.error_code})"
            if status in (408, 429) or status >= 500:
                raise SinkUnavailableError(
                    f"schema registry {self.config.url}: {words}, registering {subject} "
                    f"for {what}") from None
            raise KafkaRefusedError(
                f"schema registry {self.config.url} refused the schema of {what} for subject "
                f"{subject}: {words}") from None
        except _transport_errors() as error:  # the client's transport: no answer
            raise SinkUnavailableError(
                f"schema registry {self.config.url} cannot be reached ({type(error).__name__}: "
                f"{str(error)[:200]}), registering {subject} for {what}") from None

    def encode(self, subject: str, schema: dict[str, Any], record: Mapping[str, Any],
               what: str) -> bytes:
        """`record` written by `schema`, registered under `subject`, Confluent-framed."""
        return self.writer(subject, schema, what).encode(record)

    def rendering(self, table_name: str, transaction_metadata: bool, images: pa.Table,
                  keys: pa.Table, first: dict[str, Any], produced: int) -> AvroRendering:
        """How one commit's messages are written (`kafka_events.Rendering`)."""
        return AvroRendering(self, table_name, transaction_metadata, images, keys, first,
                             produced)


def avro_messages(message_format: MessageFormat, registry: RegistryConfig | None,
                  topic: str) -> AvroMessages | None:
    """The registry's side of a sink's messages: for `avro` only, which needs a registry."""
    if message_format != MessageFormat.AVRO:
        return None
    if registry is None:
        raise KafkaRefusedError("schema-registry-url: format \"avro\" needs the schema "
                                "registry's URL")
    return AvroMessages(registry, topic)


class AvroRendering:
    """One commit's keys and envelopes as Avro (`kafka_events.Rendering`)."""

    def __init__(self, messages: AvroMessages, table_name: str, transaction_metadata: bool,
                 images: pa.Table, keys: pa.Table, first: dict[str, Any], produced: int
                 ) -> None:
        namespace = schema_name(table_name)
        snapshot_id = int(first[COMMIT_SNAPSHOT_ID])
        what = f"snapshot {snapshot_id}"
        self._key_writer = messages.writer(f"{messages.topic}-key",
                                           key_schema(list(keys.schema), namespace), what)
        self._value_writer = messages.writer(
            f"{messages.topic}-value",
            envelope_schema(list(images.schema), namespace,
                            transaction=transaction_metadata), what)
        self._images = avro_rows(images)
        self._keys = avro_rows(keys)
        self._snapshot_id = snapshot_id
        # fastavro's tuple notation, (branch name, datum), names a union's branch: without
        # it fastavro finds the branch by checking the image against the record's schema,
        # a third of an event's encoding (12 -> 8 us a value, 7 columns)
        self._image = f"{namespace}.Value"
        self._transactions = transaction_metadata
        self._source = {"table": table_name, "snapshot_id": snapshot_id,
                        "sequence_number": first.get(COMMIT_SEQUENCE_NUMBER),
                        "ts_ms": epoch_ms(first.get(COMMIT_TIMESTAMP))}
        self._produced = produced

    def key(self, row: int) -> bytes:
        """The key record, Confluent-framed."""
        return self._key_writer.encode(self._keys[row])

    def value(self, before: int | None, after: int | None, op: str, order: int) -> bytes:
        """The envelope record, Confluent-framed."""
        image = self._image  # the union's branch named: fastavro need not find it
        record: dict[str, Any] = {
            "before": None if before is None else (image, self._images[before]),
            "after": None if after is None else (image, self._images[after]),
            "source": self._source, "op": op, "ts_ms": self._produced}
        if self._transactions:
            record["transaction"] = {"id": str(self._snapshot_id), "total_order": order,
                                     "data_collection_order": order}
        return self._value_writer.encode(record)
