"""Batch reads and the stream hand Spark the same values: one treatment of Spark's types,
nanosecond timestamps included (Iceberg v3 has them, Spark does not). Spark-free: the
readers' `read` runs as an executor runs it, on hand-built partitions of one data file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StructType as SparkStruct
from pyspark.sql.types import TimestampNTZType, TimestampType

from meltwater.planner.changes.change_tasks import AddedRowsTask, ChangeCommit, CommitChanges
from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.errors import StreamError
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.types import LONG, NestedField, PrimitiveType, Schema, StructType
from meltwater.stream.engine.changes.change_columns import change_schema
from meltwater.stream.engine.changes.change_schema import ChangeOptions
from meltwater.stream.errors import UnreadableFileError
from meltwater.stream.spark import batch_reader, stream_reader
from meltwater.stream.spark.arrow_types import conform, spark_arrow_schema, spark_schema
from meltwater.stream.spark.partitions import ChangePartition

ID = b"PARQUET:field_id"
NANOS = [-1_500, 1_700_000_000_123_456_789, None]  # one before 1970, one with nanoseconds
MICROS = [-1, 1_700_000_000_123_456, None]  # truncated toward zero, as Arrow casts
PROJECTION = Schema((
    NestedField(1, "id", LONG),
    NestedField(2, "ts", PrimitiveType("timestamp_ns")),
    NestedField(3, "st", StructType((NestedField(4, "tz", PrimitiveType("timestamptz_ns")),))),
))


def _field(name: str, type_: pa.DataType, fid: int) -> pa.Field:
    return pa.field(name, type_, metadata={ID: str(fid).encode()})


def _commit(tmp_path) -> CommitChanges:
    tz = pa.timestamp("ns", tz="UTC")
    schema = pa.schema([_field("id", pa.int64(), 1), _field("ts", pa.timestamp("ns"), 2),
                        _field("st", pa.struct([_field("tz", tz, 4)]), 3)])
    rows = pa.table([pa.array([1, 2, 3], pa.int64()), pa.array(NANOS, pa.timestamp("ns")),
                     pa.array([{"tz": v} for v in NANOS], schema.field("st").type)],
                    schema=schema)
    path = tmp_path / "nanos.parquet"
    pq.write_table(rows, path, coerce_timestamps=None)
    data = DataFile(FileContent.DATA, str(path), "PARQUET", 0, (), 3, path.stat().st_size)
    commit = ChangeCommit(0, 7, 1, 0, "append")
    return CommitChanges(commit, (AddedRowsTask(commit, data, 1),))


def test_batch_and_stream_reads_agree_on_nanosecond_timestamps(tmp_path):
    changes = _commit(tmp_path)
    spark = spark_schema(change_schema(PROJECTION))
    assert isinstance(spark["ts"].dataType, TimestampNTZType)
    nested = spark["st"].dataType
    assert isinstance(nested, SparkStruct) and isinstance(nested["tz"].dataType, TimestampType)
    options = ChangeOptions()
    path = {"path": str(tmp_path)}

    partition = ChangePartition((CommitPart(changes, PROJECTION, 0, len(changes.tasks)),),
                                options)
    batch = batch_reader.MeltwaterBatchReader(path, spark, changes=True)
    from_batch = list(batch.read(partition))
    stream = stream_reader.MeltwaterStreamReader({**path, "starting": "earliest"}, spark)
    from_stream = list(stream.read(partition))

    target = spark_arrow_schema(spark)
    got = pa.Table.from_batches(from_batch, schema=target)
    assert got.equals(pa.Table.from_batches(from_stream, schema=target))
    assert got["ts"].cast(pa.int64()).to_pylist() == MICROS
    tz = [None if s is None else s["tz"] for s in got["st"].to_pylist()]
    assert [None if v is None else int(v.timestamp() * 1_000_000) for v in tz] == MICROS


def test_only_columns_holding_nanoseconds_are_truncated():
    """A value that does not fit its column fails naming the column, even beside a
    nanosecond column whose cast may lose precision (a whole-batch unsafe cast would wrap
    it around silently)."""
    batch = pa.record_batch([pa.array(NANOS, pa.timestamp("ns")),
                             pa.array([1, 2**40, None], pa.int64())], names=["ts", "n"])
    target = pa.schema([("ts", pa.timestamp("us")), ("n", pa.int32())])

    def refuse(what: str) -> Exception:
        return UnreadableFileError(what)

    with pytest.raises(UnreadableFileError, match="column n: values of type int64"):
        conform(batch, target, refuse)
    fits = batch.set_column(1, "n", pa.array([1, 2, None], pa.int64()))
    conformed = conform(fits, target, lambda what: StreamError(what))
    assert conformed.schema.equals(target)
    assert conformed.column("ts").cast(pa.int64()).to_pylist() == MICROS
