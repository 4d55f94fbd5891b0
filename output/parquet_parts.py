"""One Parquet file from row groups encoded apart, on several threads at once.

pyarrow's `ParquetWriter` encodes a row group on the calling thread, column after column,
and one writer cannot be shared: however many cores there are, a file is encoded on one.
`meltwater scan --format parquet` waited on that one core for most of its run, while the
reading had finished.

So each row group is cut into pieces, runs of neighbouring columns (`column_runs`), and
each piece is written as a Parquet file of its own, in memory, on a worker thread
(`PartEncoder`); `PartsWriter` puts the pieces into the output in order: their column
chunks copied as pyarrow wrote them, the pieces of one row group joined into one row group,
and one footer at the end lists every row group, its offsets moved by where its bytes
landed (`meltwater.output.parquet_footer`). pyarrow encodes every column chunk on
its own, so for the same row groups and options that is byte for byte the file one
`ParquetWriter` writes; tests/output_tests/test_parquet_parts.py holds it to that. Cutting
row groups into columns keeps every core busy to the end: the last row group, which starts
when the reading ends, is encoded on all of them rather than on one.

One option differs from pyarrow's defaults, and only after the data has shown it should.
pyarrow starts every column chunk with a dictionary and, for a column of mostly distinct
values (ids, amounts, timestamps, free text), hashes values until the dictionary outgrows
its 1 MiB limit, then writes the rest plain: CPU spent, and a dictionary page written, for
nothing. So the first row group (number 0) is encoded with pyarrow's defaults, and every
column whose dictionary it abandoned is encoded plain in every later row group, as DuckDB
decides per column (it encodes the bench table's four high-cardinality columns plain).
Later pieces wait for the first row group's pieces of the same columns: the file is the
same whatever the threads' timing, and the first row group can be made small (see
`output.row_groups`) so that no piece waits long. Low-cardinality columns keep their
dictionaries.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from meltwater.output.errors import ParquetFooterError
from meltwater.output.files import BytesSink, write_in_pieces
from meltwater.output.parquet_footer import (
    MAGIC,
    dictionary_abandoned,
    footer_bytes,
    join_row_groups,
    move_row_group,
    split_parquet,
)

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


def column_runs(table: pa.Table, pieces: int) -> list[range]:
    """A table's top-level columns cut into runs of neighbours, each run closed once it
    holds 1/`pieces` of the table's Arrow bytes (so there are at most `pieces`; one column
    larger than that is a run of its own): the pieces of a row group encoded apart."""
    if table.num_columns == 0:
        return [range(0)]
    share = table.nbytes / max(1, pieces)
    runs: list[range] = []
    start, held = 0, 0
    for index, column in enumerate(table.columns):
        held += column.nbytes
        if held >= share:
            runs.append(range(start, index + 1))
            start, held = index + 1, 0
    if start < table.num_columns:
        runs.append(range(start, table.num_columns))
    return runs


class PartEncoder:
    """Encodes the pieces of the row groups of one output file (`encode_part`), from any
    number of threads at once, leaving out of the dictionary the columns whose dictionary
    the first row group abandoned (see the module doc).

    Pieces are written into buffers taken back with `recycle` once their bytes are in the
    file. A fresh buffer costs a page fault per 4 KiB as the encoder fills it, a sizable
    share of the encoding's own time."""

    def __init__(self, schema: pa.Schema, row_group_size: int, *, spares: int = 4) -> None:
        self._schema = schema
        self._row_group_size = row_group_size
        self._lock = threading.Lock()
        # Per top-level column: set once row group 0's piece holding it is encoded, when
        # `_leaves` has its leaf paths, each with whether its dictionary was abandoned.
        self._decided = [threading.Event() for _ in schema]
        self._leaves: dict[int, list[tuple[str, bool]]] = {}
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

    def encode(self, number: int, columns: range, table: pa.Table) -> EncodedPart:
        """Encode `table`, the `columns` (top-level indices) of row group `number`, as a
        Parquet file of its own. Row group 0's pieces must be encoded (or be under way on
        other threads) for a later piece to start: it waits for those holding its columns,
        to learn which to write plain."""
        schema = pa.schema([self._schema.field(i) for i in columns])
        if number:
            for index in columns:
                self._decided[index].wait()
            return self._encode(table, schema, self._dictionary(columns))
        try:
            part = self._encode(table, schema, True)
            self._note_abandoned(columns, part.footer)
            return part
        finally:  # a failed piece leaves pyarrow's defaults to the others
            for index in columns:
                self._decided[index].set()

    def _encode(self, table: pa.Table, schema: pa.Schema,
                dictionary: bool | list[str]) -> EncodedPart:
        return encode_part(table, schema, self._row_group_size, dictionary=dictionary,
                           memory=self._memory(part_capacity(table)))

    def _note_abandoned(self, columns: range, footer: Any) -> None:
        names = {self._schema.field(i).name: i for i in columns}
        leaves: dict[int, list[tuple[str, bool]]] = {}
        for group in (footer.row_groups or [])[:1]:
            for chunk in group.columns:
                path = chunk.meta_data.path_in_schema
                leaves.setdefault(names[path[0]], []).append(
                    (".".join(path), dictionary_abandoned(chunk.meta_data)))
        with self._lock:
            self._leaves.update(leaves)

    def _dictionary(self, columns: range) -> bool | list[str]:
        """`use_dictionary` for a later piece of these columns: all of them, unless row
        group 0 abandoned the dictionary of some; then the others' paths."""
        with self._lock:
            leaves = [leaf for index in columns for leaf in self._leaves.get(index, [])]
        if not any(abandoned for _, abandoned in leaves):
            return True
        return [path for path, abandoned in leaves if not abandoned]


class PartsWriter:
    """Writes the parts `append`ed, in order, as one Parquet file of `schema` to `out`
    (see the module doc); `close` writes the footer, and makes a file of no rows if no part
    came."""

    def __init__(self, out: BytesSink, schema: pa.Schema) -> None:
        self._out = out
        self._position = 0
        # The footer one writer gives this schema (its schema, metadata and column orders),
        # to which the row groups are added.
        self._footer = encode_part(schema.empty_table(), schema, 1).footer
        self._leaves = _leaf_paths(self._footer.schema)
        self._groups: list[Any] = []
        self._open: list[list[Any]] = []  # the row groups of the pieces of an unended one

    def append(self, part: EncodedPart, *, ends_row_group: bool = True) -> None:
        """Copy a part's column chunks to the output. A part holds the next columns of a
        row group (all of them, or the first of the pieces it was cut into); with
        `ends_row_group` false, the next parts' columns join its row group."""
        if not self._position:
            self._out.write(MAGIC)
            self._position = len(MAGIC)
        delta = self._position - len(MAGIC)  # where the body lands, less where it was
        groups = part.footer.row_groups or []
        for offset, group in enumerate(groups):
            move_row_group(group, delta, len(self._groups) + offset)
        self._open.append(groups)
        write_in_pieces(self._out, part.body)
        self._position += len(part.body)
        if ends_row_group:
            self._end_row_groups()

    def _end_row_groups(self) -> None:
        pieces, self._open = self._open, []
        if len({len(groups) for groups in pieces}) > 1:
            raise ParquetFooterError("the parts of one row group differ in row groups")
        for side_by_side in zip(*pieces, strict=True):
            group = join_row_groups(list(side_by_side))
            if [tuple(c.meta_data.path_in_schema) for c in group.columns] != self._leaves:
                raise ParquetFooterError("the parts of a row group do not hold the file's "
                                         "columns in order")
            self._groups.append(group)

    def close(self) -> None:
        """Write the footer, listing every row group and their rows."""
        if self._open:
            raise ParquetFooterError("the last row group was not ended")
        if not self._position:
            self._out.write(MAGIC)
        self._footer.num_rows = sum(g.num_rows for g in self._groups)
        self._footer.row_groups = self._groups
        self._out.write(footer_bytes(self._footer))


def _leaf_paths(elements: list[Any]) -> list[tuple[str, ...]]:
    """The paths of the leaf columns of a footer's schema (its `SchemaElement`s, depth
    first, each group followed by its `num_children` children), in the file's order."""
    paths: list[tuple[str, ...]] = []

    def walk(index: int, parent: tuple[str, ...]) -> int:
        element = elements[index]
        path = (*parent, element.name)
        if not element.num_children:
            paths.append(path)
            return index + 1
        index += 1
        for _ in range(element.num_children):
            index = walk(index, path)
        return index

    index = 1
    for _ in range(elements[0].num_children or 0):
        index = walk(index, ())
    return paths
