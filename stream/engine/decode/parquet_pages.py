"""Rows named by position, read from the Parquet pages that hold them.

Iceberg Java (parquet-mr) writes an OffsetIndex for every column chunk: where each data
page starts and the position of its first row (20,000 rows a page by default). pyarrow
reads no less than a column chunk and cannot read that index. So where the rows a read
wants (the positions a deletion vector or a position delete names, the rows an equality
delete matched) sit in few of a row group's pages, the columns are read from a Parquet file
made in memory (`page_file`): each chunk's dictionary page and the data pages needed, copied
as they are, behind a footer naming only them; columns whose pages are cut at the same rows
share one such file. pyarrow decodes that file as any other; nothing here decodes a value.

What is trusted, and what is checked first (any doubt, raised here as a ValueError, reads
the row group whole, as before, so this is never the reason for a wrong row):
- only top-level primitive columns are read by page: their pages hold whole rows, one
  value or null each. Other columns (structs, lists, maps), and columns without an
  OffsetIndex, are read whole for the row group and cut to the same rows;
- the OffsetIndex's pages must tile the column chunk, from the dictionary page (or the
  chunk's start) to its end; the header of each chosen page, and of the chunk's first and
  last, must count the rows the index implies for it (a v1 page's `num_values`, a v2
  page's `num_rows`): an index shifted by a row shows at its ends;
- the decoded column must hold exactly the rows of its pages, and cast to the type the
  whole read gives (else the whole read);
- when the pages needed hold half a row group's rows or more, or the row group holds
  fewer than `parquet_layout.MIN_PAGED_GROUP_ROWS` rows, it is read whole: page reads
  would buy little.

What was decoded and checked of a file (its footer, OffsetIndexes, the pages whose
headers agreed with them) is kept per process (`FileFacts`, the last `KEPT_FILES` files,
by path and size: data files never change), so a reader that comes back to a file (a
stream, the service, each commit of an upsert job reaching the same older files) decodes
no Thrift for it again; where a reader keeps a key index, also on disk beside it
(`page_metadata.persist_under`), so the next command decodes no OffsetIndex either.

Each batch is a run of consecutive rows from a wanted row to a later one (rows between
wanted rows further apart than `CLUSTER_GAP` are left out), so every wanted row is in one
of them; a caller checks positions, as it does for whole row groups (`FileSource.batches`).
"""

from __future__ import annotations

import bisect
import itertools
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from meltwater.stream.engine.decode.page_file import (
    MAGIC,
    ChunkPages,
    decode_columns,
    dictionary_strings,
)
from meltwater.stream.engine.decode.page_metadata import FileFacts, facts_of, keep, restore, save
from meltwater.stream.engine.decode.parquet_thrift import parquet_thrift

# Read by page only while the pages needed hold less than this share of the row group.
MAX_PAGED_SHARE = 0.5
# Wanted rows closer than this share a batch (the rows between them come along): a batch
# costs its callers a few hundred microseconds, a row a few nanoseconds.
CLUSTER_GAP = 1024
# Enough of a page to decode its header (statistics make some headers long: a longer one
# fails to decode, and that page's row group is read whole).
_HEADER_BYTES = 16 * 1024
_TAIL = struct.Struct("<I4s")

# (offset, length) -> the bytes (or a pyarrow Buffer: no copy is made of what a read gives);
# pyarrow's NativeFile.read_at, or a seek and a read
ReadRange = Callable[[int, int], "bytes | pa.Buffer"]
_DICTIONARY = -1  # in a chunk's checked pages: its dictionary page was found to be one


@dataclass(frozen=True)
class _Run:
    """Consecutive pages of one column: rows [start, end) of the row group, decoded from
    `offset` in that column's array."""

    start: int
    end: int
    offset: int


@dataclass(frozen=True)
class _Column:
    """One selected top-level column of a row group, as read: the array holding its runs."""

    field: pa.Field
    values: pa.Array | pa.ChunkedArray
    runs: tuple[_Run, ...]


@dataclass(frozen=True)
class _Pages:
    """One column's chosen pages as read, and the row runs of the row group they hold."""

    pages: ChunkPages
    runs: tuple[_Run, ...]


class PageReader:
    """Reads one Parquet file's row groups by page. The footer (as Thrift) is read on the
    first use; a footer this cannot read (encrypted, damaged) turns page reads off."""

    def __init__(self, read_range: ReadRange, file_size: int, file: Any,
                 path: str | None = None) -> None:
        self._read = read_range
        self._size = file_size
        self._file = file  # the pyarrow ParquetFile: whole column reads and the Arrow schema
        self._key = None if path is None else (path, file_size)  # what the process keeps
        self._facts: FileFacts | None = None
        self._usable = True

    def read(self, group: int, first: int, fields: Sequence[int],
             whole_paths: Callable[[int], list[str]], rows: Sequence[int],
             batch_size: int) -> list[tuple[int, pa.RecordBatch]] | None:
        """Batches of row group `group` (whose first row is file position `first`) holding
        every file position in `rows` (sorted, all in the group), for the top-level fields
        `fields` (file order); None when the group is better read whole (module doc).
        `whole_paths(i)` names the Parquet leaves a whole read of field i selects."""
        footer = self._footer_or_none()
        if footer is None:
            return None
        assert self._facts is not None  # read with the footer
        known = self._facts.extent()
        try:
            batches = self._read_group(footer, group, first, fields, whole_paths, rows,
                                       batch_size)
        except (OSError, ValueError, EOFError, pa.ArrowException, _thrift_errors()):
            return None
        if self._key is not None and self._facts.extent() > known:
            save(self._key, self._facts)  # where page facts are kept on disk
        return batches

    # -- the footer ------------------------------------------------------------------------

    def _footer_or_none(self) -> Any:
        if not self._usable:
            return None
        if self._facts is None:
            facts = None if self._key is None else facts_of(self._key)
            if facts is None:
                try:
                    facts = self._read_footer()
                except (OSError, ValueError, EOFError, _thrift_errors()):
                    self._usable = False
                    return None
                if self._key is not None:
                    restore(self._key, facts)  # what an earlier process saved, if kept
                    keep(self._key, facts)
            self._facts = facts
        return self._facts.footer

    def _read_footer(self) -> FileFacts:
        if self._size < 12:
            raise ValueError("too short")
        length, magic = _TAIL.unpack(bytes(self._read(self._size - 8, 8)))
        if magic != MAGIC or length + 12 > self._size:
            raise ValueError("no plain footer")  # PARE: an encrypted footer
        thrift = parquet_thrift()
        raw = bytes(self._read(self._size - 8 - length, length))
        footer = thrift.decode(thrift.module.FileMetaData(), raw)
        return FileFacts(footer, _top_level_leaves(footer.schema), footer_crc=zlib.crc32(raw))

    # -- one row group -----------------------------------------------------------------------

    def _read_group(self, footer: Any, group: int, first: int, fields: Sequence[int],
                    whole_paths: Callable[[int], list[str]], rows: Sequence[int],
                    batch_size: int) -> list[tuple[int, pa.RecordBatch]] | None:
        row_group = footer.row_groups[group]
        n = row_group.num_rows
        wanted = [r - first for r in rows]
        arrow_schema = self._file.schema_arrow
        plans: dict[int, tuple[Any, Any, list[int], list[int], tuple[int, int]]] = {}
        paged_rows = 0
        facts = self._facts
        assert facts is not None  # read with the footer
        for index in fields:
            leaf = facts.leaves.get(index)
            if leaf is None:
                continue
            chunk = row_group.columns[leaf]
            if not chunk.offset_index_offset or not chunk.offset_index_length:
                continue
            offsets = facts.offsets.get((group, leaf))
            if offsets is None:
                offsets = facts.offsets[(group, leaf)] = self._offset_index(chunk)
            starts = self._page_starts(offsets, n)
            if starts is None:
                return None
            chosen = sorted({bisect.bisect_right(starts, r) - 1 for r in wanted})
            plans[index] = (chunk, offsets, starts, chosen, (group, leaf))
            paged_rows += sum(starts[p + 1] - starts[p] for p in chosen)
        if not plans or paged_rows >= MAX_PAGED_SHARE * n * len(plans):
            return None
        paged = {}
        for index, (chunk, offsets, starts, chosen, (group, leaf)) in plans.items():
            checked = facts.checked.setdefault((group, leaf), set())
            paged[index] = self._paged(chunk, offsets, starts, chosen, checked)
        decoded = _decoded(footer, paged)
        columns = []
        for index in fields:
            field = arrow_schema.field(index)
            if index in paged:
                columns.append(_as_column(field, decoded[index], paged[index]))
            else:
                columns.append(self._whole(group, whole_paths(index), n))
        return _batches(columns, wanted, first, batch_size)

    def _offset_index(self, chunk: Any) -> Any:
        thrift = parquet_thrift()
        return thrift.decode(thrift.module.OffsetIndex(),
                             bytes(self._read(chunk.offset_index_offset,
                                              chunk.offset_index_length)))

    def _page_starts(self, offsets: Any, rows: int) -> list[int] | None:
        """Each page's first row (an `OffsetIndex`'s), then the row group's row count; None
        if not increasing from 0."""
        starts = [p.first_row_index for p in offsets.page_locations]
        starts.append(rows)
        if not starts or starts[0] != 0 or any(b <= a for a, b in itertools.pairwise(starts)):
            return None
        return starts

    def _paged(self, chunk: Any, offsets: Any, starts: list[int], chosen: list[int],
               checked: set[int]) -> _Pages:
        """One column's chosen pages, read and checked (not decoded: `_decoded`).
        `checked`: the pages whose headers were found to agree with the index before
        (not decoded again); those checked now are added."""
        thrift = parquet_thrift()
        meta = chunk.meta_data
        locations = offsets.page_locations
        chunk_start = min(o for o in (meta.dictionary_page_offset, meta.data_page_offset)
                          if o)
        chunk_end = chunk_start + meta.total_compressed_size
        if locations[0].offset < chunk_start:
            raise ValueError("the first data page starts before its column chunk")
        _check_tiling(locations, chunk_end)
        for page in {0, len(locations) - 1} - set(chosen) - checked:  # a shifted index
            head = self._read(locations[page].offset,                     # shows at its ends
                              min(_HEADER_BYTES, locations[page].compressed_page_size))
            _check_page_rows(thrift, head, starts[page + 1] - starts[page])
            checked.add(page)
        parts: list[bytes | pa.Buffer] = []
        prefix = 0
        if chunk_start < locations[0].offset:  # the dictionary page
            dictionary = self._read(chunk_start, locations[0].offset - chunk_start)
            if _DICTIONARY not in checked:
                header = thrift.decode(thrift.module.PageHeader(),
                                       bytes(memoryview(dictionary)[:_HEADER_BYTES]))
                if header.type != thrift.module.PageType.DICTIONARY_PAGE:
                    raise ValueError("bytes before the first data page are no dictionary")
                checked.add(_DICTIONARY)
            parts.append(dictionary)
            prefix = len(dictionary)
        size = prefix
        runs: list[_Run] = []
        rows = 0
        for page in chosen:
            location = locations[page]
            if not chunk_start <= location.offset < location.offset \
                    + location.compressed_page_size <= chunk_end:
                raise ValueError("a page outside its column chunk")
            data = self._read(location.offset, location.compressed_page_size)
            count = starts[page + 1] - starts[page]
            if page not in checked:
                _check_page_rows(thrift, data, count)
                checked.add(page)
            if runs and runs[-1].end == starts[page]:
                runs[-1] = _Run(runs[-1].start, starts[page + 1], runs[-1].offset)
            else:
                runs.append(_Run(starts[page], starts[page + 1], rows))
            parts.append(data)
            size += len(data)
            rows += count
        pages = ChunkPages(chunk, tuple(parts), prefix, size, rows,
                           as_dictionary=dictionary_strings(thrift, meta))
        return _Pages(pages, tuple(runs))

    def _whole(self, group: int, paths: list[str], rows: int) -> _Column:
        table = self._file.read_row_group(group, columns=paths)
        return _Column(table.schema.field(0), table.column(0), (_Run(0, rows, 0),))


def _decoded(footer: Any, paged: dict[int, _Pages]) -> dict[int, pa.Array]:
    """Each paged column's values: columns whose chosen pages hold the same rows (a writer
    that cuts every column's pages at the same rows, as parquet-mr does at its row limit)
    are decoded from one page file, the others from one each."""
    alike: dict[tuple[_Run, ...], list[int]] = {}
    for index, column in paged.items():
        alike.setdefault(column.runs, []).append(index)
    decoded: dict[int, pa.Array] = {}
    for indices in alike.values():
        values = decode_columns(parquet_thrift(), footer, [paged[i].pages for i in indices])
        decoded.update(zip(indices, values, strict=True))
    return decoded


def _as_column(field: pa.Field, values: pa.Array, paged: _Pages) -> _Column:
    """A paged column as read, checked: it must hold its pages' rows and cast to the type
    the whole read gives."""
    if len(values) != paged.pages.rows:
        raise ValueError("the pages decoded to other row counts")
    if values.type != field.type:
        if pa.types.is_dictionary(field.type) or isinstance(field.type, pa.ExtensionType):
            raise ValueError("a type the page file cannot give")
        values = values.cast(field.type)
    return _Column(field, values, paged.runs)


def _thrift_errors() -> type[Exception]:
    """What thriftpy2 raises on bytes that are no struct it knows (loaded with it)."""
    from thriftpy2.thrift import TException

    return TException


def _top_level_leaves(schema: list[Any]) -> dict[int, int]:
    """Top-level fields that are one primitive leaf, not repeated: field index -> leaf
    index (leaves numbered in schema order, as column chunks are)."""
    found: dict[int, int] = {}
    leaf = 0
    position = 1  # schema[0] is the root

    def walk(at: int) -> tuple[int, int]:
        """(the next element after the subtree at `at`, the leaves in it)."""
        children = schema[at].num_children or 0
        if not children:
            return at + 1, 1
        nxt, leaves = at + 1, 0
        for _ in range(children):
            nxt, count = walk(nxt)
            leaves += count
        return nxt, leaves

    repeated = parquet_thrift().module.FieldRepetitionType.REPEATED
    for index in range(schema[0].num_children or 0):
        element = schema[position]
        after, count = walk(position)
        if count == 1 and not element.num_children and element.repetition_type != repeated:
            found[index] = leaf
        leaf += count
        position = after
    return found


def _check_tiling(locations: list[Any], chunk_end: int) -> None:
    """The data pages must follow each other without a gap and end the column chunk."""
    for page, after in itertools.pairwise(locations):
        if page.offset + page.compressed_page_size != after.offset:
            raise ValueError("the OffsetIndex's pages do not follow each other")
    if locations[-1].offset + locations[-1].compressed_page_size != chunk_end:
        raise ValueError("the OffsetIndex's pages do not end the column chunk")


def _check_page_rows(thrift: Any, data: bytes | pa.Buffer, rows: int) -> None:
    """The page's own header must count `rows` rows (a flat column: a value or null each)."""
    header = thrift.decode(thrift.module.PageHeader(), bytes(memoryview(data)[:_HEADER_BYTES]))
    kind = header.type
    if kind == thrift.module.PageType.DATA_PAGE:
        counted = header.data_page_header.num_values
    elif kind == thrift.module.PageType.DATA_PAGE_V2:
        counted = header.data_page_header_v2.num_rows
    else:
        raise ValueError("not a data page")
    if counted != rows:
        raise ValueError("a page's header and the OffsetIndex disagree")


def _batches(columns: list[_Column], wanted: list[int], first: int,
             batch_size: int) -> list[tuple[int, pa.RecordBatch]]:
    """The wanted rows, in batches of the consecutive rows every column holds from one
    wanted row to the next (`_clusters`), each batch with its first row's position."""
    spans = [(0, 1 << 62)]
    for column in columns:
        spans = _intersect(spans, [(r.start, r.end) for r in column.runs])
    schema = pa.schema([c.field for c in columns])
    out: list[tuple[int, pa.RecordBatch]] = []
    for lo, hi in spans:
        inside = wanted[bisect.bisect_left(wanted, lo):bisect.bisect_left(wanted, hi)]
        for cluster_start, cluster_end in _clusters(inside):
            for start in range(cluster_start, cluster_end, batch_size):
                end = min(cluster_end, start + batch_size)
                arrays = [_slice(c, start, end) for c in columns]
                out.append((first + start, pa.RecordBatch.from_arrays(arrays, schema=schema)))
    return out


def _clusters(rows: list[int]) -> list[tuple[int, int]]:
    """Sorted rows as [start, end) runs from a row to the last one after it that is less
    than `CLUSTER_GAP` rows away: what a batch of a page read holds. Every row a caller
    then projects, masks by deletes and gives lineage to is a row it wanted or one near
    it, not the rest of a 20,000-row page (a deletion vector's 1,000 rows at 200M rows
    were 20M rows of such work)."""
    runs: list[tuple[int, int]] = []
    for row in rows:
        if runs and row - runs[-1][1] < CLUSTER_GAP:
            runs[-1] = (runs[-1][0], row + 1)
        else:
            runs.append((row, row + 1))
    return runs


def _slice(column: _Column, start: int, end: int) -> pa.Array:
    run = column.runs[bisect.bisect_right([r.start for r in column.runs], start) - 1]
    values = column.values.slice(run.offset + start - run.start, end - start)
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def read_range_of(handle: Any) -> ReadRange:
    """How to read a range of an open file: pyarrow's `read_at`, else a seek and a read."""
    if isinstance(handle, pa.NativeFile):
        def read_at(offset: int, length: int) -> bytes | pa.Buffer:
            return handle.read_at(length, offset)  # bytes, or a Buffer for some files

        return read_at

    def seek_and_read(offset: int, length: int) -> bytes:
        handle.seek(offset)
        return bytes(handle.read(length))

    return seek_and_read


def file_size_of(handle: Any) -> int:
    """An open file's size in bytes."""
    if isinstance(handle, pa.NativeFile):
        return int(handle.size())
    position = handle.tell()
    size = int(handle.seek(0, 2))
    handle.seek(position)
    return size
