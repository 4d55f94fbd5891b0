"""Destinations for change streams, each applying batches exactly once by batch id.

A sink (`base.Sink`) takes the change batches of `meltwater.stream` (Arrow) or of the Spark
source (through `spark_writer.foreach_batch`) and applies each once: a batch id it already
holds is skipped, so Spark's replay of a batch after a crash changes nothing. Sinks
register under URL schemes; `open_sink(url, **options)` opens the one a URL names.

The database mirror (`mirror.Mirror`, schemes `sqlite`, `postgresql`, `postgres`) keeps a
SQL table equal to an Iceberg table by key columns: the net effect of each batch per key
(`net_effect`) is applied in one transaction together with a row in `meltwater_ledger`
(`ledger`), which is how it knows what it has applied and how far it got (`reached()`).
SQLite (stdlib) is the embedded default; PostgreSQL (psycopg 3, COPY for bulk rows) the
production target. `sql_schema` maps Iceberg types to SQL types, `sql_values` converts
Arrow columns to what each database stores, `database` opens one by URL, `batch_columns`
matches a batch's columns to field ids.

`source_table` is how every sink (and the service's progress) sees the source table: a
snapshot's parent, sequence number and schema, the commit a batch reaches, and whether a
batch id is Spark's replay of a batch already applied (a ledger's check and a Kafka
marker's).

The changelog archive and the console (`archive`) are Spark's own streaming sinks, set up
for change rows; Spark's file sink log makes the archive exactly once without a ledger.
Kafka (`kafka_stream`, `kafka_sink`, `kafka_events`, `kafka_client`) gets Debezium
envelopes keyed by the key columns, one Kafka transaction per micro-batch, the batch id
recorded in the same transaction; `kafka_foreach_batch` is that writer for a job of one's
own. A pipeline names its sink by kind (`kinds`: sqlite, postgres, parquet, json, console,
kafka);
each kind says its configuration keys and how a streaming query writes to it.

    import meltwater.sinks, meltwater.stream

    mirror = meltwater.sinks.open_sink("sqlite:///var/lib/meltwater/orders.db",
                                       table="orders", source="/warehouse/db/orders")
    start = mirror.reached()  # None on the first run
    changes = meltwater.stream.changes("/warehouse/db/orders",
                                       from_snapshot_id=start.snapshot_id if start else None)
    mirror.apply(start.batch_id + 1 if start else 0, changes)
"""

from meltwater.sinks import archive, kafka_stream, mirror_stream  # noqa: F401  (their kinds)
from meltwater.sinks.base import (
    BatchResult,
    ChangeInput,
    Position,
    Sink,
    open_sink,
    register_sink,
    sink_schemes,
)
from meltwater.sinks.errors import SinkError
from meltwater.sinks.kafka_stream import kafka_foreach_batch
from meltwater.sinks.kinds import SinkKind, register_sink_kind, sink_kind, sink_kind_names
from meltwater.sinks.mirror import Mirror
from meltwater.sinks.spark_writer import ForeachBatchWriter, foreach_batch

__all__ = ["BatchResult", "ChangeInput", "ForeachBatchWriter", "Mirror", "Position", "Sink",
           "SinkError", "SinkKind", "foreach_batch", "kafka_foreach_batch", "open_sink",
           "register_sink", "register_sink_kind", "sink_kind", "sink_kind_names",
           "sink_schemes"]
