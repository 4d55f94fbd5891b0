"""A record batch stream as one Parquet file, its row groups encoded on worker threads
while the read goes on (`meltwater.output.parquet_parts`).

Apart from `writers`, whose other formats run without what this loads (pyarrow.parquet,
thriftpy2 and the Thrift definition): a change read written as JSON lines does not pay
for it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from meltwater.output.errors import OutputError
from meltwater.output.files import WriteBack, output_destination
from meltwater.output.parquet_parts import (
    EncodedPart,
    PartEncoder,
    PartsWriter,
    column_runs,
)
from meltwater.output.pipeline import ordered_map, writing_behind

# Row groups of at most 512Ki rows (half `pq.write_table`'s 1Mi), and at most this much
# Arrow memory each, so a wide table's row groups stay bounded too. Batches from a scan are
# far smaller (one per data file), and a row group per batch cost much more to encode:
# every column chunk starts a new dictionary, and for high-cardinality columns most values
# go through the dictionary before Parquet gives up on it. Half of 1Mi costs a little more
# to encode but halves what is in flight (two row groups being encoded and the next being
# gathered), so the whole process touches fewer fresh pages and is no slower.
ROW_GROUP_ROWS = 512 * 1024
ROW_GROUP_BYTES = 128 * 1024 * 1024
# The first row group of a Parquet output is smaller: the parts after it wait for it to be
# encoded (`PartEncoder.encode`), and it is enough rows for a column of distinct 64-bit
# values, or of strings, to outgrow pyarrow's 1 MiB dictionary.
FIRST_ROW_GROUP_ROWS = 256 * 1024


def row_groups(batches: Iterable[pa.RecordBatch], schema: pa.Schema, *,
               rows: int = ROW_GROUP_ROWS, size: int = ROW_GROUP_BYTES,
               first_rows: int | None = None) -> Iterator[pa.Table]:
    """The batches gathered into tables of `rows` rows (the first `first_rows`, if given;
    the last fewer), or fewer rows once they hold `size` bytes. Zero-copy: the tables
    reference the batches' buffers."""
    pending: list[pa.RecordBatch] = []
    count = nbytes = 0
    limit = min(first_rows or rows, rows)
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        nbytes += batch.nbytes
        while count >= limit or (count and nbytes >= size):
            table = pa.Table.from_batches(pending, schema)
            take = min(count, limit)
            limit = rows
            yield table.slice(0, take)
            rest = table.slice(take)
            pending, count, nbytes = rest.to_batches(), rest.num_rows, rest.nbytes
    if count:
        yield pa.Table.from_batches(pending, schema)


def parquet_workers() -> int:
    """Threads encoding row groups' pieces at once: one per core, two at least (so
    encoding overlaps reading), four at most (each holds a piece and its encoding)."""
    return max(2, min(4, os.cpu_count() or 2))


def write_parquet(reader: pa.RecordBatchReader, output: str | None) -> int:
    """Row groups of up to `ROW_GROUP_ROWS` rows (the first `FIRST_ROW_GROUP_ROWS`), each
    cut into up to two pieces per worker (runs of columns), each piece encoded as a Parquet
    file of its own on `parquet_workers()` threads while the scan reads on, then copied
    into one file in order on a writer thread, each written back to disk as it comes
    (`meltwater.output.parquet_parts`). pyarrow's defaults, as `pq.write_table` has
    them (Snappy, format 2.6), except that a column whose dictionary the first row group
    had to abandon is written plain in the others."""
    if not output:
        raise OutputError("--format parquet needs --output PATH")
    schema = reader.schema
    workers = parquet_workers()
    pieces = 2 * workers
    # Pieces alive at once: two row groups' worth (those encoding and waiting their turn),
    # and the one being written.
    encoder = PartEncoder(schema, ROW_GROUP_ROWS, spares=pieces + 2)
    groups = row_groups(reader, schema, rows=ROW_GROUP_ROWS, first_rows=FIRST_ROW_GROUP_ROWS)

    def cut(tables: Iterable[pa.Table]) -> Iterator[_Piece]:
        for number, group in enumerate(tables):
            runs = column_runs(group, pieces)
            for index, columns in enumerate(runs):
                yield _Piece(number, columns, group.select(list(columns)),
                             last=index == len(runs) - 1)

    def encode(piece: _Piece) -> tuple[EncodedPart, bool]:
        return encoder.encode(piece.number, piece.columns, piece.table), piece.last

    count = 0
    with output_destination(output, text=False) as binary, \
            contextlib.closing(ordered_map(encode, cut(groups), workers=workers,
                                           ahead=2 * pieces - workers)) as encoded:
        sink = WriteBack(binary)
        # Made by the writer thread when the first part comes: making one loads the Thrift
        # definition (thriftpy2 and parquet.thrift), which the scan would
        # otherwise wait for before reading its first file.
        writers: list[PartsWriter] = []

        def writer() -> PartsWriter:
            if not writers:
                writers.append(PartsWriter(sink, schema))
            return writers[0]

        def append(item: tuple[EncodedPart, bool]) -> None:
            part, last = item
            writer().append(part, ends_row_group=last)
            encoder.recycle(part)

        with writing_behind(append) as write:
            for part, last in encoded:
                write((part, last))
                count += part.rows if last else 0
        writer().close()
    return count


@dataclass(frozen=True)
class _Piece:
    """Some neighbouring columns of one row group, to be encoded on their own."""

    number: int  # the row group's
    columns: range  # top-level column indices
    table: pa.Table
    last: bool  # the row group's last piece
