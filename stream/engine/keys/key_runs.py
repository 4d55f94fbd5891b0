"""One data file's keys sorted with their row positions: what a key index searches.

A run is a record batch of two columns, `key` (ascending, no nulls) and `pos` (the row's
0-based position in the data file, int32), built once from the file's key column read in
position order. Finding the rows that hold some keys is then two binary searches a key
(`pyarrow.compute.search_sorted`), whatever the file's size: a commit's thousand keys cost
microseconds against a run of millions of rows, where matching them against the decoded key
column touches every row.

A run holds every row of its file, live or not: which rows are live depends on the deletes
of the snapshot read, which the reader judges for the few rows found. A run therefore never
goes stale while its file exists (Iceberg data files are immutable).

Worked example: a file's key column [7, 3, 9, 3] gives the run key [3, 3, 7, 9], pos
[1, 3, 0, 2]; keys {3, 8} find positions [1, 3] (both holding 3) and nothing for 8.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.stream.engine.decode.arrow_constants import int64_range
from meltwater.stream.engine.keys.key_blocks import is_binary_like

KEY = "key"
POS = "pos"
MAX_RUN_ROWS = 2**31 - 1  # positions are int32: 4 bytes a row


def indexable(key_type: pa.DataType) -> bool:
    """Whether keys of this type have one total order a run can be sorted by: integers,
    strings, binaries, dates and timestamps (floats are not: NaN and -0.0 compare apart
    from how equality deletes match them)."""
    return bool(pa.types.is_integer(key_type) or pa.types.is_string(key_type)
                or pa.types.is_large_string(key_type) or pa.types.is_binary(key_type)
                or pa.types.is_large_binary(key_type) or pa.types.is_date(key_type)
                or pa.types.is_timestamp(key_type))


def run_schema(key_type: pa.DataType) -> pa.Schema:
    """The schema of a run of keys of `key_type`."""
    return pa.schema([pa.field(KEY, key_type, nullable=False),
                      pa.field(POS, pa.int32(), nullable=False)])


def sorted_run(keys: pa.Array | pa.ChunkedArray) -> pa.RecordBatch:
    """The run of a file's key column (every row, in position order). Rows with a null key
    are left out: an index is only asked for non-null keys."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if len(keys) > MAX_RUN_ROWS:
        raise ValueError(f"a run holds at most {MAX_RUN_ROWS} rows, not {len(keys)}")
    if not keys.null_count and _ascending(keys):  # a file written in key order, as a load
        if is_binary_like(keys.type):  # offsets from 0, as the segment file will hold
            keys = pa.concat_arrays([keys])  # them (`key_blocks` sums them)
        return pa.RecordBatch.from_arrays([keys, int64_range(0, len(keys)).cast(pa.int32())],
                                          schema=run_schema(keys.type))
    order = pc.array_sort_indices(keys, null_placement="at_end")
    if keys.null_count:
        order = order.slice(0, len(keys) - keys.null_count)
    return pa.RecordBatch.from_arrays([keys.take(order), order.cast(pa.int32())],
                                      schema=run_schema(keys.type))


def _ascending(keys: pa.Array) -> bool:
    """Whether the keys are in ascending order already (one comparison of neighbours)."""
    if len(keys) < 2:
        return True
    return bool(pc.all(pc.less_equal(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py())


def find(run: pa.RecordBatch, needles: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(positions, keys) of the run's rows whose key is one of `needles` (sorted, distinct,
    no nulls, of the run's key type): positions ascending (int64), each row's key beside."""
    keys = run.column(0)
    first = pc.search_sorted(keys, needles, side="left")
    last = pc.search_sorted(keys, needles, side="right")
    counts = pc.subtract(last, first)
    hit = pc.indices_nonzero(counts)
    if len(hit) == 0:
        return pa.array([], pa.int64()), keys.slice(0, 0)
    starts = first.take(hit).to_pylist()
    ends = last.take(hit).to_pylist()
    rows = pa.Table.from_batches([run.slice(s, e - s)
                                  for s, e in zip(starts, ends, strict=True)])
    order = pc.sort_indices(rows.column(1))
    rows = rows.take(order)
    return (rows.column(1).combine_chunks().cast(pa.int64()),
            rows.column(0).combine_chunks())
