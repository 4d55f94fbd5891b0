"""One Parquet file from row groups encoded apart, on several threads at once.

pyarrow's `ParquetWriter` encodes a row group on the calling thread, column after column,
and one writer cannot be shared: however many cores there are, a file is encoded on one.
`meltwater scan --format parquet` waited on that one core for most of its run, while the
reading had finished.

So each row group is written as a Parquet file of its own, in memory, on a worker thread
(`PartEncoder`), and `PartsWriter` puts the parts into the output in order: each part's
column chunks are copied as pyarrow wrote them, and one footer at the end lists every
part's row groups, their offsets moved by where their bytes landed
(`meltwater.stream.engine.parquet_footer`). For the same row groups and options, that is
byte for byte the file one `ParquetWriter` writes; tests/stream_tests/test_parquet_parts.py
holds it to that.

One option differs from pyarrow's defaults, and only after the data has shown it should.
pyarrow starts every column chunk with a dictionary and, for a column of mostly distinct
values (ids, amounts, timestamps, free text), hashes values until the dictionary outgrows
its 1 MiB limit, then writes the rest plain: CPU spent, and a dictionary page written, for
nothing. So the first part (number 0) is encoded with pyarrow's defaults, and every
column whose dictionary it abandoned is encoded plain in every later part, as DuckDB
decides per column (it encodes the bench table's four high-cardinality columns plain).
Later parts wait for part 0 before they start: the file is the same whatever the threads'
timing, and the first part can be made small (see `output.row_groups`) so that no part
waits long. Low-cardinality columns keep their dictionaries.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from meltwater.stream.engine.output_file import write_in_pieces
from meltwater.stream.engine.parquet_footer import (
    MAGIC,
    dictionary_abandoned,
    footer_bytes,
    move_row_group,
    split_parquet,
)
from meltwater.stream.errors import ParquetFooterError

_CAPACITY_STEP = 16 << 20


@dataclass(frozen=True)
class EncodedPart:
    """A table written as a whole Parquet file in memory, split at its footer."""

    body: memoryview  # the column chunks: everything between the leading magic and the footer
    footer: Any  # its FileMetaData (parquet.thrift)
    memory: pa.Buffer | None = None  # the buffer it was written into, reusable once written

    @property
    def rows(self) -> int:
        """The rows the part holds, as its footer says."""
        return int(self.footer.num_rows)


def part_capacity(table: pa.Table) -> int:
    """Room for a table's Parquet encoding: its Arrow data and a margin, rounded up to a
    multiple of 16 MiB so that the buffer of one row group fits the next of about the same
    size. Encoded, a table is rarely larger than its Arrow data; one that is goes to a
    growing stream instead."""
    need = table.nbytes + table.nbytes // 8 + (1 << 20)
    return -(-need // _CAPACITY_STEP) * _CAPACITY_STEP


def encode_part(table: pa.Table, schema: pa.Schema, row_group_size: int, *,
                dictionary: bool | list[str] = True,
                memory: pa.Buffer | None = None) -> EncodedPart:
    """`table` as a whole Parquet file in memory (one row group of at most
    `row_group_size` rows, unless it holds more; none when it is empty), with pyarrow's
    default options except `dictionary` (pyarrow's `use_dictionary`: all columns, or the
    listed column paths).

    It is written into `memory` (a mutable buffer of at least `part_capacity(table)`
    bytes, allocated if not given): a growing output stream doubles and copies its way up
    instead, and freshly touched memory cost about as much system time as the encoding. A
    part that does not fit is written again into a growing stream."""
    if memory is None or memory.size < part_capacity(table):
        memory = pa.allocate_buffer(part_capacity(table))
    sink = pa.FixedSizeBufferWriter(memory)
    try:
        _write_part(table, schema, row_group_size, dictionary, sink)
        data, kept = memory.slice(0, sink.tell()), memory
    except OSError:  # out of room
        stream = pa.BufferOutputStream()
        _write_part(table, schema, row_group_size, dictionary, stream)
        data, kept = stream.getvalue(), None
    body, footer = split_parquet(data)
    return EncodedPart(body, footer, kept)


def _write_part(table: pa.Table, schema: pa.Schema, row_group_size: int,
                dictionary: bool | list[str], sink: pa.NativeFile) -> None:
    with pq.ParquetWriter(sink, schema, use_dictionary=dictionary) as writer:
        if table.num_rows:
            writer.write_table(table, row_group_size=row_group_size)


class PartEncoder:
    """Encodes the row groups of one output file (`encode_part`), from any number of
    threads at once, leaving out of the dictionary the columns whose dictionary part 0
    abandoned (see the module doc).

    Parts are written into buffers taken back with `recycle` once their bytes are in the
    file. A fresh buffer costs a page fault per 4 KiB as the encoder fills it (26 ms of
    system time for a 50 MB part, against 190 ms to encode it), and Arrow's jemalloc hands
    large freed buffers back to the kernel rather than keep them."""

    def __init__(self, schema: pa.Schema, row_group_size: int, *, spares: int = 4) -> None:
        self._schema = schema
        self._row_group_size = row_group_size
        self._lock = threading.Lock()
        self._first_done = threading.Event()
        self._dictionary: bool | list[str] = True
        self._spares: list[pa.Buffer] = []
        self._keep = spares

    def _memory(self, capacity: int) -> pa.Buffer | None:
        """A spare buffer of at least `capacity` bytes, if one is kept."""
        with self._lock:
            for index, spare in enumerate(self._spares):
                if spare.size >= capacity:
                    return self._spares.pop(index)
        return None

    def recycle(self, part: EncodedPart) -> None:
        """Take back the buffer of a part whose bytes are written (the part is not read
        again), for a later part; the smallest is let go beyond `spares`."""
        if part.memory is None:
            return
        with self._lock:
            self._spares.append(part.memory)
            if len(self._spares) > self._keep:
                self._spares.remove(min(self._spares, key=lambda b: b.size))

    def encode(self, number: int, table: pa.Table) -> EncodedPart:
        """Encode `table` as part `number` of the file. Part 0 must be encoded (or be
        under way on another thread) for a later part to start: the later one waits for
        it, to learn which columns to write plain."""
        if number:
            self._first_done.wait()
            return self._encode(table, self._dictionary)
        try:
            part = self._encode(table, True)
            self._dictionary = _dictionary_kept(part.footer)
            return part
        finally:  # a failed part 0 leaves pyarrow's defaults to the others
            self._first_done.set()

    def _encode(self, table: pa.Table, dictionary: bool | list[str]) -> EncodedPart:
        return encode_part(table, self._schema, self._row_group_size, dictionary=dictionary,
                           memory=self._memory(part_capacity(table)))


def _dictionary_kept(footer: Any) -> bool | list[str]:
    """`use_dictionary` for the parts after one with this footer: every column, unless its
    row groups abandoned the dictionary of some; then the others' paths."""
    paths: list[str] = []
    abandoned: set[str] = set()
    for group in footer.row_groups or []:
        paths = [".".join(c.meta_data.path_in_schema) for c in group.columns]
        abandoned |= {p for p, c in zip(paths, group.columns, strict=True)
                      if dictionary_abandoned(c.meta_data)}
    return [p for p in paths if p not in abandoned] if abandoned else True


class PartsWriter:
    """Writes the parts `append`ed, in order, as one Parquet file to `out` (see the module
    doc); `close` writes the footer. An empty table's part makes the file if none came."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._position = 0
        self._footer: Any = None
        self._groups: list[Any] = []
        self._rows = 0

    def append(self, part: EncodedPart) -> None:
        """Copy a part's column chunks to the output and keep its row groups' metadata."""
        if self._footer is None:
            self._out.write(MAGIC)
            self._position = len(MAGIC)
            self._footer = part.footer
        elif part.footer.schema != self._footer.schema:
            raise ParquetFooterError("the parts of one Parquet file differ in schema")
        delta = self._position - len(MAGIC)  # where the body lands, less where it was
        for group in part.footer.row_groups or []:
            move_row_group(group, delta, len(self._groups))
            self._groups.append(group)
        self._rows += part.rows
        write_in_pieces(self._out, part.body)
        self._position += len(part.body)

    def close(self) -> None:
        """Write the footer: the first part's, with every part's row groups and rows."""
        if self._footer is None:
            raise ParquetFooterError("no part was appended")
        self._footer.num_rows = self._rows
        self._footer.row_groups = self._groups
        self._out.write(footer_bytes(self._footer))
