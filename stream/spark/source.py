"""The `meltwater` Spark data source (PySpark's Python Data Source API, pyspark >= 4.2).

Register once per session, then read Iceberg tables by catalog identifier or location::

    import meltwater.stream
    meltwater.stream.register(spark)

    spark.read.format("meltwater").load("lake.db.orders")                  # a catalog table
    spark.read.format("meltwater").option("catalog.uri", "https://...")     # its properties,
        .option("catalog.credential", "id:secret").load("lake.db.orders")  # over pyiceberg's
    spark.read.format("meltwater").load("/warehouse/db/orders")            # by location
    spark.read.format("meltwater").option("snapshot-id", 5003).load(T)     # time travel
    spark.read.format("meltwater").option("as-of-timestamp", "2026-11-01T00:00:00Z").load(T)
    spark.read.format("meltwater").option("branch", "audit").load(T)       # or "tag"
    spark.read.format("meltwater").option("start-snapshot-id", 5003).load(T)   # changes
    spark.read.format("meltwater").option("startingVersion", 5004)          # Spark 4.2 names,
        .option("endingVersion", 5010).load(T)                               # inclusive
    spark.readStream.format("meltwater").load(T)                             # the change feed

Snapshot reads return the snapshot's rows, merge-on-read deletes applied, in the snapshot's
schema. Change reads (any of `start-snapshot-id`, `start-sequence-number`,
`start-timestamp`, `startingVersion`, `startingTimestamp`, or `read-changes=true`) return
the change rows of the range with `_change_type`, `_change_ordinal`, `_commit_snapshot_id`,
`_commit_sequence_number` and `_commit_timestamp` (and `_row_id`,
`_last_updated_sequence_number` on v3 tables); every option is described in
`meltwater.stream.spark.options`.

Schemas: Iceberg `timestamptz` is Spark TIMESTAMP, `timestamp` TIMESTAMP_NTZ; decimals,
binary, structs, lists and maps map one to one; `uuid` and `fixed` read as BINARY, `time`
as TIME(6), and nanosecond timestamps are truncated to microseconds (Spark's precision;
`meltwater.stream.spark.arrow_types`).

Filters in WHERE clauses are pushed to meltwater where its semantics are exactly Spark's
(`meltwater.stream.spark.filters`); the batch reader logs what was pushed at INFO.
`register` turns on `spark.sql.python.filterPushdown.enabled`, which Spark requires for a
Python source that takes filters (switching it off again makes reads fail, naming it).

SQL, as far as pyspark 4.3 allows for Python data sources:

- works: ``CREATE TEMPORARY VIEW orders USING meltwater OPTIONS (path '/warehouse/db/orders')``
  then ``SELECT ... FROM orders``, with the read options in ``OPTIONS (...)``
  (``'snapshot-id' '5003'``, ``'start-snapshot-id' '5003'``, ...);
- does not: ``SELECT * FROM meltwater.`/warehouse/db/orders``` (Spark answers
  UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY); ``CREATE TABLE t USING meltwater OPTIONS (path
  ...)`` is accepted, but Spark keeps `path` as the catalog table's location and does not
  hand it back to the source, so reading `t` fails asking for a table; SQL time travel
  (``SELECT ... VERSION AS OF``) is refused by Spark (UNSUPPORTED_FEATURE.TIME_TRAVEL) on
  the view: put `snapshot-id`, `as-of-timestamp`, `branch` or `tag` in the view's OPTIONS.

Streaming: `spark.readStream.format("meltwater")` is served by
`meltwater.stream.spark.stream_reader.MeltwaterStreamReader`. Spark calls `schema()` the same way
for batch and streaming loads, so the source cannot tell them apart there: `schema()` answers
the change schema when the options name a change range, `read-changes=true`, or any
streaming-only option (`starting`, `starting-snapshot-as-inserts`,
`stream-from-timestamp`, `streaming-*`, `maxFilesPerTrigger`, `schema-change`, ...); with
none of those, a plain `readStream...load(T)` gets the snapshot schema.
`stream_schema_for(options)` gives the stream's schema to pass explicitly
(`spark.readStream.schema(stream_schema_for(opts))`), as `meltwater serve` does.

Errors: bad options and tables raise meltwater's typed errors with one-line messages; Spark
wraps them (AnalysisException / PythonException) with the message kept in its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

from meltwater.stream.spark.options import table_source

# `batch_reader` (readers, reconstruction, pyarrow.compute) is imported where it is used:
# Spark unpickles this module's data source in a fresh Python process for the driver side
# of every streaming query, which only needs `stream_reader` and the planner.

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class MeltwaterDataSource(DataSource):
    """Iceberg tables by identifier or location: snapshot reads, change reads and the
    change stream."""

    @classmethod
    def name(cls) -> str:
        """The format name Spark registers the source under: `spark.read.format("meltwater")`."""
        return "meltwater"

    def schema(self) -> StructType:
        """The read's Spark schema, resolved from the options against the table's metadata."""
        from meltwater.stream.spark.arrow_types import spark_schema
        from meltwater.stream.spark.batch_reader import resolve_read

        read = resolve_read(self.options)
        # Pin the metadata file: the reader plans against the table this schema describes,
        # even when a commit lands between analysis and planning.
        self._metadata_location = read.table.metadata_location
        return spark_schema(read.arrow_schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader, planning against the metadata file `schema()` resolved."""
        from meltwater.stream.spark.batch_reader import MeltwaterBatchReader

        return MeltwaterBatchReader(self.options, schema,
                                    getattr(self, "_metadata_location", None))

    def streamReader(self, schema: StructType) -> Any:
        """The stream reader of a `readStream` query."""
        from meltwater.stream.spark.stream_reader import MeltwaterStreamReader

        return MeltwaterStreamReader(self.options, schema)


def change_schema_for(options: Mapping[str, str]) -> StructType:
    """The schema of change rows for these options: the table schema of the range's end
    (the current snapshot when no end is given) and the change metadata columns."""
    from meltwater.planner.table.table_loading import load_table
    from meltwater.stream.spark.arrow_types import spark_schema
    from meltwater.stream.spark.batch_reader import resolve_read

    table = load_table(table_source(options))
    return spark_schema(resolve_read(options, changes=True, table=table).arrow_schema)


def stream_schema_for(options: Mapping[str, str]) -> StructType:
    """The schema of `readStream.format("meltwater")` with these options: change rows in the
    table's current schema, as the stream reader emits them, wherever the stream starts.

    Pass it to `readStream.schema(...)` and Spark does not ask `schema()`, which cannot tell
    a stream from a batch read: a stream given no streaming option would get the snapshot
    schema, and a start option (`start-snapshot-id`, ...) would be resolved against the
    table's history even when the query resumes from its checkpoint, where a start snapshot
    expired since no longer matters."""
    from meltwater.planner.changes.change_range import RangeRequest
    from meltwater.planner.table.table_loading import load_table
    from meltwater.stream.engine.changes.change_feed import change_feed
    from meltwater.stream.spark.arrow_types import spark_schema
    from meltwater.stream.spark.options import row_options

    table = load_table(table_source(options))
    request = RangeRequest.empty_at(table.metadata.current_snapshot_id)
    return spark_schema(change_feed(table, request, row_options(options)).output_schema)


def register(spark: Any) -> None:
    """Make `spark.read.format("meltwater")` (and readStream, and SQL `USING meltwater`)
    available in a session, with filter push-down on. A Spark Connect session's server is
    checked first: its Python must import meltwater (`meltwater.stream.spark.connect`)."""
    from meltwater.stream.spark.connect import check_server, is_connect_session

    if is_connect_session(spark):
        check_server(spark)
    spark.dataSource.register(MeltwaterDataSource)
    spark.conf.set(PUSHDOWN_CONF, "true")


__all__ = ["MeltwaterDataSource", "change_schema_for", "register", "stream_schema_for"]
