"""Spark's types for meltwater's Arrow batches: the schema Spark is told, and batches made
to fit the schema Spark reads them in. Batch reads and the stream share it, so a table
reads the same in both.

Iceberg `timestamptz` is Spark TIMESTAMP, `timestamp` TIMESTAMP_NTZ; decimals, binary,
structs, lists and maps map one to one; `fixed` and `uuid` become BINARY and `time`
TIME(6). Spark's timestamps hold microseconds, so Iceberg v3's `timestamp_ns` and
`timestamptz_ns` become microsecond timestamps: each column holding nanoseconds (at any
depth: a struct's field, a list's elements) is cast with truncation, as PySpark's own
Arrow conversion of nanosecond data does (toward zero, by Arrow's cast); every other
column is cast safely, so a value that does not fit (a long in an int column, a user's
schema that does not match the table) fails naming its column instead of wrapping around.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """Spark's view of an engine schema (see the module doc)."""
    return from_arrow_schema(arrow_schema)


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks `read()`'s batches against (as its worker builds it)."""
    return to_arrow_schema(schema, timezone="UTC")


def holds_nanoseconds(type_: pa.DataType) -> bool:
    """Whether values of `type_` have nanosecond parts Spark cannot hold, at any depth."""
    if pa.types.is_timestamp(type_) or pa.types.is_time(type_):
        return type_.unit == "ns"
    return any(holds_nanoseconds(type_.field(i).type) for i in range(type_.num_fields))


def conform(batch: pa.RecordBatch, schema: pa.Schema,
            mismatch: Callable[[str], Exception]) -> pa.RecordBatch:
    """`batch` in the columns, order and types of `schema` (columns matched by name).

    A column whose values do not fit raises `mismatch(description)`: what a mismatch
    means, and what to do about it, depends on the read (a user's schema, a stream whose
    table changed its schema).
    """
    batch = batch.select(schema.names)
    if batch.schema.equals(schema):
        return batch
    columns = []
    for column, target in zip(batch.columns, schema, strict=True):
        if column.type == target.type:
            columns.append(column)
            continue
        try:
            columns.append(column.cast(target.type, safe=not holds_nanoseconds(column.type)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise mismatch(f"column {target.name}: values of type {column.type} do not fit "
                           f"the type {target.type} ({error})") from None
    return pa.RecordBatch.from_arrays(columns, schema=schema)
