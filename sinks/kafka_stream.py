"""Kafka fed by a streaming query: the `kafka` sink kind, and the same for users' own jobs.

    [pipelines.sink]
    type = "kafka"
    bootstrap-servers = "broker1:9092,broker2:9092"
    topic = "lake.sales.orders"          # default: the table's name (below)
    key = ["id"]                          # default: the table's identifier fields
    [pipelines.sink.properties]           # librdkafka properties, passed as they are
    "security.protocol" = "SASL_SSL"

The other keys: `tombstones` (true: a null-valued message follows each delete),
`transactional` (true: one Kafka transaction per micro-batch; false for a broker without
transactions), `transactional-id` (default `meltwater-<pipeline>@<digest of the
checkpoint>`, stable for the pipeline and new with a new checkpoint, whose batch ids start
again from 0), `batches-topic` (default `meltwater.batches`), `create-topics` (true:
create a missing topic, with `partitions` or the broker's default), `timeout` (seconds a
broker may take to answer, default 30), `before-images` (below), `format` (`"json"`, the
default: Debezium's JSON envelope; `"json-with-schema"`: each key and value wrapped with its
Kafka Connect schema, as Kafka Connect's JsonConverter reads with `schemas.enable=true`).
`transaction-metadata` (false by default, as Debezium's `provide.transaction.metadata`:
true writes a BEGIN and an END per commit to `transaction-topic`, default
`<first name of the topic>.transaction`, and a `transaction` block in each event;
`meltwater.sinks.kafka_transactions`), `heartbeat-interval` (seconds; 0, the default, sends
none: else a heartbeat on `__debezium-heartbeat.<first name of the topic>` that often, as
Debezium's `heartbeat.interval.ms`; `meltwater.sinks.kafka_heartbeat`). What is written,
and how exactly once, is `meltwater.sinks.kafka_sink`'s and `kafka_events`' to say.

**Before-images.** `before-images = "full"` (the default) gives each update and delete
event its whole `before` row, as Debezium does for a PostgreSQL table with REPLICA
IDENTITY FULL: what consumers that retract rows need (Flink's `debezium-json` format
refuses an update without its `before`; an aggregation would otherwise retract the wrong
values). `"key"` gives `before` the key columns only, the others null, as Debezium's
PostgreSQL connector does for a delete under the default replica identity (for an update it
sends no `before`; here it carries the key): enough for consumers that apply events by key
(upsert-kafka, JDBC sinks, a compacted topic), and an upsert commit's replaced rows are
then read from their key columns instead of whole (`meltwater.stream.engine.changes.
key_images`).

**The default topic** is the table's name as Debezium names a table's topic (`<prefix>.
<schema>.<table>`): a catalog table's identifier, `lake.sales.orders`; for a table given by
location, its directory's last two names, the namespace and table of a warehouse laid out
as Iceberg's Hadoop catalog lays it out (`/warehouse/db/orders` and
`s3://bucket/warehouse/db/orders` -> `db.orders`), with every character Kafka does not
allow in a topic name made `_`.

**The stream** runs with `schema-change=fail` (a column added mid-stream restarts the query
in the new schema instead of being projected away, as for the mirrors) and pairs its
updates by the sink's key (`identifier-columns` = the key, `compute-updates=true`), which
keeps each key's rows of a commit in one micro-batch when read limits split the commit; a
pipeline may not set those options itself. Each batch carries the stream's field ids, so
images follow a renamed column by id.

From a job of one's own, `kafka_foreach_batch` is the same writer::

    writer = kafka_foreach_batch("lake.sales.orders", bootstrap_servers="broker:9092",
                                 transactional_id="orders-to-kafka")
    (spark.readStream.format("meltwater").option("identifier-columns", "id")
          .load("lake.sales.orders").writeStream.foreachBatch(writer)
          .option("checkpointLocation", ckpt).start())
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from meltwater.planner.table.table_loading import load_table
from meltwater.planner.table.table_source import TableSource, parse_table_source
from meltwater.sinks.errors import KafkaRefusedError
from meltwater.sinks.kafka_topics import default_transaction_topic
from meltwater.sinks.kinds import SinkKind, SinkOption, SinkPlacement, register_sink_kind
from meltwater.sinks.message_formats import MessageFormat
from meltwater.sinks.mirror_stream import MIRROR_SOURCE_OPTIONS, ledger_name, stream_field_ids
from meltwater.stream.engine.changes.change_modes import BeforeImages

DEFAULT_TIMEOUT_S = 30.0
# What the sink decides of its stream when the query starts (`kafka_source_options`).
KEYED_OPTIONS = ("identifier-columns", "compute-updates", "before-images")
_TOPIC_CHARACTER = re.compile(r"[^A-Za-z0-9._-]")
_MAX_TOPIC = 249


def default_topic(table: TableSource | str) -> str:
    """The topic a table's changes go to unless the configuration names one (see the
    module doc)."""
    source = parse_table_source(table) if isinstance(table, str) else table
    if source.identifier is not None:
        name = str(source.identifier)
    else:
        path = urlsplit(str(source.location)).path if "://" in str(source.location) \
            else str(source.location)
        parts = [p for p in PurePosixPath(path.replace("\\", "/")).parts if p not in ("/", "")]
        if parts and parts[-1].endswith(".metadata.json"):
            parts = parts[:-2]  # <table>/metadata/<file>
        name = ".".join(parts[-2:]) or "table"
    return _TOPIC_CHARACTER.sub("_", name)[:_MAX_TOPIC]


def _key_names(options: Mapping[str, Any], table: TableSource | str) -> list[str]:
    """The key columns by their names in the table's current schema."""
    from meltwater.sinks.kafka_sink import resolve_key

    schema = load_table(table).metadata.schema
    ids = resolve_key(schema, options.get("key"), table)
    return [schema.column_name(fid) for fid in ids]


def kafka_source_options(options: Mapping[str, Any], placement: SinkPlacement
                         ) -> dict[str, str]:
    """The stream options a kafka sink decides when its query starts: updates paired by
    its key (a table without identifier fields and no `key` is refused here, naming
    `key`), and what its events' `before` carries (`before-images`)."""
    return {"identifier-columns": ",".join(_key_names(options, placement.table)),
            "compute-updates": "true",
            "before-images": str(options.get("before-images", BeforeImages.FULL))}


def _truthy(options: Mapping[str, str], name: str) -> bool:
    return any(k.lower() == name and str(v).strip().lower() == "true"
               for k, v in options.items())


def sink_options(options: Mapping[str, Any], placement: SinkPlacement) -> Any:
    """The `KafkaSinkOptions` of a pipeline's sink configuration."""
    from meltwater.sinks.kafka_client import Connection
    from meltwater.sinks.kafka_sink import DEFAULT_BATCHES_TOPIC, KafkaSinkOptions

    topic = str(options.get("topic") or default_topic(placement.table))
    connection = Connection(str(options["bootstrap-servers"]), topic,
                            dict(options.get("properties") or {}),
                            float(options.get("timeout", DEFAULT_TIMEOUT_S)))
    key = options.get("key")
    return KafkaSinkOptions(
        connection, placement.table,
        str(options.get("transactional-id")
            or f"meltwater-{ledger_name(placement.pipeline, placement.checkpoint)}"),
        key=tuple(key) if key else None,
        tombstones=bool(options.get("tombstones", True)),
        snapshot_as_inserts=_truthy(placement.stream_options, "starting-snapshot-as-inserts"),
        batches_topic=str(options.get("batches-topic") or DEFAULT_BATCHES_TOPIC),
        transactional=bool(options.get("transactional", True)),
        create_topics=bool(options.get("create-topics", True)),
        partitions=options.get("partitions"),
        message_format=MessageFormat(options.get("format", MessageFormat.JSON)),
        transaction_topic=_transaction_topic(options, topic),
        schema_registry=_registry(options))


def _registry(options: Mapping[str, Any]) -> Any:
    """The sink's schema registry (`schema-registry-url`, `-properties`), if it names one."""
    from meltwater.sinks.kafka_avro import RegistryConfig

    url = options.get("schema-registry-url")
    if not url:
        return None
    properties = {k: str(v) for k, v in (options.get("schema-registry-properties") or {}).items()}
    return RegistryConfig(str(url), properties)


def _transaction_topic(options: Mapping[str, Any], topic: str) -> str | None:
    if not options.get("transaction-metadata", False):
        return None
    return str(options.get("transaction-topic") or default_transaction_topic(topic))


def check_kafka(options: Mapping[str, Any], placement: SinkPlacement) -> None:
    """What can be checked before the service starts, without the broker: the key (against
    the table's schema) and the client's properties (librdkafka checks their names and
    values when a client is made; nothing is sent). A broker that does not answer, or
    refuses, is the running pipeline's to report (`/health`), with retries where they may
    help."""
    from confluent_kafka import KafkaException, Producer

    from meltwater.sinks.kafka_client import PRODUCER_DEFAULTS, Causes

    _key_names(options, placement.table)
    resolved = sink_options(options, placement)
    if resolved.message_format == MessageFormat.AVRO:
        from meltwater.sinks.kafka_avro import avro_messages

        avro = avro_messages(resolved.message_format, resolved.schema_registry,
                             resolved.connection.topic)
        assert avro is not None  # for avro, or refused
        avro.check()
    config = resolved.connection.config(Causes(), **PRODUCER_DEFAULTS)
    try:
        Producer(config)
    except KafkaException as error:
        raise KafkaRefusedError(f"properties: {error.args[0].str()}") from None


def kafka_writer(frame: Any, options: Mapping[str, Any], placement: SinkPlacement) -> Any:
    """`frame.writeStream.foreachBatch(...)` writing each micro-batch to the topic, the
    batches carrying the stream's field ids."""
    from meltwater.sinks.kafka_sink import KafkaSink
    from meltwater.sinks.spark_writer import foreach_batch

    field_ids = stream_field_ids(placement.table, frame.columns)
    _start_heartbeat(options, placement)
    return frame.writeStream.foreachBatch(foreach_batch(
        functools.partial(KafkaSink, sink_options(options, placement)), field_ids,
        checkpoint=placement.checkpoint))


# The pipeline's heartbeat, by pipeline name: a query restarted (a schema change) replaces it.
_HEARTBEATS: dict[str, Any] = {}


def _start_heartbeat(options: Mapping[str, Any], placement: SinkPlacement) -> None:
    """Start the pipeline's heartbeats (`heartbeat-interval` seconds, if set), stopping
    those of its query before."""
    from meltwater.sinks.kafka_heartbeat import KafkaHeartbeat

    before = _HEARTBEATS.pop(placement.pipeline, None)
    if before is not None:
        before.stop()
    interval = float(options.get("heartbeat-interval", 0) or 0)
    if interval > 0:
        resolved = sink_options(options, placement)
        from meltwater.sinks.kafka_avro import avro_messages

        avro = avro_messages(resolved.message_format, resolved.schema_registry,
                             resolved.connection.topic)
        _HEARTBEATS[placement.pipeline] = KafkaHeartbeat(
            resolved.connection, interval, resolved.message_format,
            create_topic=resolved.create_topics, avro=avro).start()


def kafka_foreach_batch(table: str | TableSource, *, bootstrap_servers: str,
                        transactional_id: str, topic: str | None = None,
                        key: Sequence[str] | None = None,
                        properties: Mapping[str, Any] | None = None, tombstones: bool = True,
                        snapshot_as_inserts: bool = False, batches_topic: str | None = None,
                        transactional: bool = True, create_topics: bool = True,
                        partitions: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                        field_ids: Mapping[str, int] | None = None,
                        checkpoint: str | None = None,
                        message_format: MessageFormat | str = MessageFormat.JSON,
                        transaction_topic: str | None = None,
                        schema_registry_url: str | None = None,
                        schema_registry_properties: Mapping[str, str] | None = None) -> Any:
    """A function for `df.writeStream.foreachBatch(...)` writing a `format("meltwater")`
    stream of `table` to Kafka, exactly once (see the module doc). Keep `transactional_id`
    the same for the life of the query's checkpoint, and give a new one with a new
    checkpoint (its batch ids start again from 0). Pair the stream's updates by the same
    key (`option("identifier-columns", ...)`, unless the key is the identifier fields).
    `field_ids` and `checkpoint` are `meltwater.sinks.foreach_batch`'s; `message_format` is
    the sink's `format` (`MessageFormat`; `avro` takes `schema_registry_url` and the
    registry client's `schema_registry_properties`); a `transaction_topic` turns transaction
    metadata on (`meltwater.sinks.kafka_transactions`)."""
    from meltwater.sinks.kafka_client import Connection
    from meltwater.sinks.kafka_sink import DEFAULT_BATCHES_TOPIC, KafkaSink, KafkaSinkOptions
    from meltwater.sinks.spark_writer import foreach_batch

    source = parse_table_source(table) if isinstance(table, str) else table
    options = KafkaSinkOptions(
        Connection(bootstrap_servers, topic or default_topic(source), dict(properties or {}),
                   timeout_s),
        source, transactional_id, tuple(key) if key else None, tombstones,
        snapshot_as_inserts, batches_topic or DEFAULT_BATCHES_TOPIC, transactional,
        create_topics, partitions, key_hint="pass key=[...]",
        message_format=MessageFormat(message_format), transaction_topic=transaction_topic,
        schema_registry=_registry({"schema-registry-url": schema_registry_url,
                                   "schema-registry-properties": schema_registry_properties}))
    return foreach_batch(functools.partial(KafkaSink, options), field_ids,
                         checkpoint=checkpoint)


def _defaults(placement: SinkPlacement) -> dict[str, Any]:
    return {"topic": default_topic(placement.table)}


register_sink_kind(SinkKind(
    "kafka",
    {"bootstrap-servers": SinkOption(str, required=True), "topic": SinkOption(str),
     "key": SinkOption(list, names=True), "properties": SinkOption(dict),
     "tombstones": SinkOption(bool), "transactional": SinkOption(bool),
     "transactional-id": SinkOption(str), "batches-topic": SinkOption(str),
     "create-topics": SinkOption(bool), "partitions": SinkOption(int, minimum=1),
     "timeout": SinkOption((int, float), minimum=1),
     "before-images": SinkOption(str, choices=BeforeImages.texts()),
     "format": SinkOption(str, choices=MessageFormat.texts()),
     "transaction-metadata": SinkOption(bool), "transaction-topic": SinkOption(str),
     "heartbeat-interval": SinkOption((int, float), minimum=0),
     "schema-registry-url": SinkOption(str), "schema-registry-properties": SinkOption(dict)},
    kafka_writer,
    source_options=MIRROR_SOURCE_OPTIONS,
    source_options_reason="so a column added mid-stream is restarted into the events "
                          "instead of projected away",
    derived_source_options=kafka_source_options,
    derived_option_names=KEYED_OPTIONS,
    derived_options_reason="pairs updates by its message key and says what before carries: "
                           "set key or before-images in the sink instead",
    defaults=_defaults,
    check=check_kafka))
