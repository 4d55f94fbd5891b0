"""`spark.readStream.format("meltwater")`: a table's change feed as a Spark stream.

The reader is a thin adapter of `meltwater.stream.watch.change_stream.ChangeStream` onto PySpark's
streaming Python data source API (Spark >= 4.2):

- `initialOffset()` / `latestOffset(start, limit)` / `partitions(start, end)` /
  `commit(end)` run in one long-lived Python process on the driver, which keeps the
  planned commits of the micro-batches in flight;
- `read(partition)` runs on executors: a partition (`meltwater.stream.spark.partitions`)
  carries its commit parts (plain, picklable change tasks and the schema to read them in)
  and the change options, opens its own FileIO and yields Arrow record batches in the
  stream's schema.

Admission control: `getDefaultReadLimit()` is the limit the options imply
(`streaming-max-files-per-micro-batch` / `maxFilesPerTrigger` -> `ReadMaxFiles`,
`streaming-max-rows-per-micro-batch` -> `ReadMaxRows`,
`streaming-max-bytes-per-micro-batch` / `maxBytesPerTrigger` -> `ReadMaxBytes`, else
`ReadAllAvailable`); when several are set the first is the one Spark sees and all of them
apply. `ReadAllAvailable` from Spark (e.g. `Trigger.Once`) ignores the options' limits.
`prepareForTriggerAvailableNow()` pins the table's newest snapshot, so
`trigger(availableNow=True)` reads everything committed before the query started, in as
many micro-batches as the limits make, and ends. Limits never change the rows the stream
emits: a commit is split only between its units, and rows that pair across them wait for
its last part (`meltwater.stream.watch.stream_offsets`, "Splitting a commit"); each partition is
read by `meltwater.stream.engine.changes.held_changes.read_parts`.

Event-driven triggers: the driver-side process also watches the table
(`meltwater.stream.watch.watcher`, started on the first offset request, stopped by `stop()`,
never sent to executors), so `latestOffset` on a table where nothing happened touches no
file. With `.option("watch-wait-ms", 1000)`, `latestOffset` waits up to that long for a
commit when nothing is new and returns as soon as the watcher sees one: with
`trigger(processingTime="0 seconds")` a micro-batch starts the moment a commit lands,
instead of Spark asking every 10 ms (`spark.sql.streaming.pollingDelay`). Stopping the query
may take up to the wait. A commit is visible to `latestOffset` once the watcher has seen it
(about a millisecond with local file events, up to 2 s polling an object store).

Example::

    query = (spark.readStream.format("meltwater")
             .option("streaming-max-files-per-micro-batch", 100)
             .load("/warehouse/db/orders")
             .writeStream.format("parquet").option("checkpointLocation", "/chk/orders")
             .trigger(availableNow=True).start("/archive/orders_changes"))
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from meltwater.planner.changes.micro_batch import UNLIMITED, Budget, pack_parts
from meltwater.planner.errors import StreamError
from meltwater.stream.engine.changes.change_schema import METADATA_COLUMNS
from meltwater.stream.engine.keys.index_location import table_indexes
from meltwater.stream.errors import SchemaChangedError
from meltwater.stream.spark.arrow_types import conform, spark_arrow_schema
from meltwater.stream.spark.options import stream_read
from meltwater.stream.spark.partitions import (
    ChangePartition,
    io_properties_of,
    read_partition,
)
from meltwater.stream.watch.change_stream import ChangeStream
from meltwater.stream.watch.stream_offsets import StreamOffset

log = logging.getLogger(__name__)


def _unfit_for_stream(what: str) -> SchemaChangedError:
    """A value that does not fit the stream's type, e.g. of a column widened from int to
    long after the stream started, fails the micro-batch naming the column (a
    `SchemaChangedError`: a restarted query reads the new schema)."""
    return SchemaChangedError(f"{what}; the table's schema changed after the stream started: "
                       "restart the query to read the new schema")


class MeltwaterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The change feed of the table in `options`, in the Spark schema `schema`."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = dict(options)
        self.schema = schema
        self.read_options = stream_read(self.options)  # fail early on a bad option
        if not set(schema.fieldNames()) & set(METADATA_COLUMNS):
            raise StreamError(
                "the stream's schema has no change metadata columns (_change_type, ...): "
                "Spark asked the source for a schema without telling it the read is a "
                "stream; add a streaming option (e.g. .option('starting', 'earliest')) or "
                "pass .schema(stream_schema_for(options)) to readStream")
        self._stream: ChangeStream | None = None  # driver state, created on first use
        self._last: StreamOffset | None = None
        self._arrow: pa.Schema | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader into the read function sent to executors: send the
        # options and schema, never the driver's planning state.
        state = dict(self.__dict__)
        state["_stream"] = None
        state["_last"] = None
        state["_arrow"] = None
        return state

    @property
    def stream(self) -> ChangeStream:
        """The driver's change stream, created on first use (executors never need one)."""
        if self._stream is None:
            self._stream = ChangeStream(self.read_options, self.schema.fieldNames())
        return self._stream

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint starts, as Spark stores it."""
        offset = self.stream.initial_offset()
        self._last = offset
        return offset.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """The limit of a micro-batch from the options (`maxFilesPerTrigger`, ...); everything
        available when none is set."""
        read = self.read_options
        if read.max_files is not None:
            return ReadMaxFiles(read.max_files)
        if read.max_rows is not None:
            return ReadMaxRows(read.max_rows)
        if read.max_bytes is not None:
            return ReadMaxBytes(read.max_bytes)
        return ReadAllAvailable()

    def budget(self, limit: ReadLimit | None) -> Budget:
        """The limits of a micro-batch: Spark's `limit` and the options' other limits."""
        if limit is None or isinstance(limit, ReadAllAvailable):
            return UNLIMITED
        read = self.read_options
        files, rows, size = read.max_files, read.max_rows, read.max_bytes
        if isinstance(limit, ReadMaxFiles):
            files = limit.max_files
        elif isinstance(limit, ReadMaxRows):
            rows = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            size = limit.max_bytes
        else:  # ReadMinRows and future limits: waiting for more data is not supported
            log.warning("read limit %r is not supported; reading what the options allow",
                        limit)
        return Budget(files, rows, size)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch after `start`, as far as `limit` lets it read."""
        end = self.stream.latest_offset(StreamOffset.from_json(start), self.budget(limit))
        self._last = end
        return end.to_json()

    def reportLatestOffset(self) -> dict | None:
        """The offset at the table's newest snapshot, for Spark's progress reports."""
        latest = self.stream.report_latest(self._last)
        return None if latest is None else latest.to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to the newest snapshot there is now, then stop."""
        self.stream.pin_target()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The micro-batch's commit parts between two offsets, packed into partitions of about
        the split size."""
        stream = self.stream
        parts = stream.parts(StreamOffset.from_json(start), StreamOffset.from_json(end))
        groups = pack_parts(parts, stream.split_target())
        table = stream.load()
        io = io_properties_of(table)  # the newest credentials the driver has
        indexes = table_indexes(stream.read.key_index_dir, table)
        return [ChangePartition(tuple(group), stream.options, io_properties=io,
                                key_indexes=indexes)
                for group in groups]

    def commit(self, end: dict) -> None:
        """Spark committed a micro-batch: drop what the stream planned for it."""
        if self._stream is not None:
            self._stream.forget(StreamOffset.from_json(end))

    def stop(self) -> None:
        """The query stopped: close the stream and the table's watcher."""
        if self._stream is not None:
            self._stream.close()  # stops the table's watcher
        self._stream = None

    # -- executors ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition on an executor, as Arrow batches in the stream's Spark schema."""
        assert isinstance(partition, ChangePartition), partition
        if self._arrow is None:
            self._arrow = spark_arrow_schema(self.schema)
        for batch in read_partition(partition):
            if batch.num_rows:
                yield conform(batch, self._arrow, _unfit_for_stream)
