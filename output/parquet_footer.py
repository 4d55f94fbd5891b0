"""Parquet footers, read and written with the format's own Thrift definition.

A Parquet file is the magic `PAR1`, its column chunks, its footer (a `FileMetaData` struct
in Thrift's compact protocol), the footer's length (4 bytes, little-endian) and the magic
again. Nothing in a column chunk says where it is in the file; only the footer does. That
is what lets `meltwater.output.parquet_parts` join Parquet files encoded apart into
one: their column chunks are copied as they are, and one footer lists every row group with
its offsets moved by where its bytes landed.

The structs are parquet-format's `parquet.thrift`, vendored unchanged and loaded by
thriftpy2 (`meltwater.stream.engine.decode.parquet_thrift`, which the reader's page index
uses too). A field that definition does not know would be lost on the way
through (Thrift skips unknown fields), so `split_parquet` refuses a footer that does not
encode back to its own bytes: a newer pyarrow writing a newer field makes the Parquet
output fail in one line, never written with the field missing.
"""

from __future__ import annotations

import struct
from typing import Any

from meltwater.output.errors import ParquetFooterError
from meltwater.stream.engine.decode.parquet_thrift import DEFINITION
from meltwater.stream.engine.decode.parquet_thrift import parquet_thrift as load_parquet_thrift

MAGIC = b"PAR1"
_LENGTH = struct.Struct("<I")

# The offsets in a footer (parquet.thrift), by struct. 0 means "none" wherever it appears:
# no part of a Parquet file starts at 0, where its magic is.
_ROW_GROUP_OFFSETS = ("file_offset",)
_COLUMN_CHUNK_OFFSETS = ("file_offset", "offset_index_offset", "column_index_offset")
_COLUMN_META_DATA_OFFSETS = ("data_page_offset", "index_page_offset",
                             "dictionary_page_offset", "bloom_filter_offset")


def parquetload_parquet_thrift() -> Any:
    """parquet.thrift as a module of Thrift structs (`FileMetaData`, `RowGroup`, ...)."""
    return load_parquet_thrift().module


def split_parquet(data: Any) -> tuple[memoryview, Any]:
    """A whole Parquet file in memory (bytes or a pyarrow Buffer) as its body (everything
    between the leading magic and the footer) and its footer, a `FileMetaData`."""
    view = memoryview(data)
    if len(view) < 12 or view[:4] != MAGIC or view[-4:] != MAGIC:
        raise ParquetFooterError("not a Parquet file: no PAR1 magic at both ends")
    (length,) = _LENGTH.unpack(view[-8:-4])
    start = len(view) - 8 - length
    if start < len(MAGIC):
        raise ParquetFooterError(f"Parquet footer length {length} is longer than the file")
    raw = bytes(view[start:-8])
    thrift = load_parquet_thrift()
    footer = thrift.decode(thrift.module.FileMetaData(), raw)
    if thrift.encode(footer) != raw:
        raise ParquetFooterError(
            f"this pyarrow writes Parquet footer fields that {DEFINITION.name} does not know; "
            "meltwater needs a newer parquet.thrift to join row groups")
    return view[len(MAGIC):start], footer


def footer_bytes(footer: Any) -> bytes:
    """The end of a Parquet file: `footer` encoded, its length and the magic."""
    raw = load_parquet_thrift().encode(footer)
    return raw + _LENGTH.pack(len(raw)) + MAGIC


def dictionary_abandoned(meta_data: Any) -> bool:
    """Whether the writer of a column chunk (its `ColumnMetaData`) began with a dictionary
    and fell back to plain pages: its dictionary outgrew the writer's limit. Known from
    the page encoding counts, when the writer kept them (pyarrow does)."""
    thrift = parquetload_parquet_thrift()
    stats = meta_data.encoding_stats or []
    data_pages = (thrift.PageType.DATA_PAGE, thrift.PageType.DATA_PAGE_V2)
    return (any(s.page_type == thrift.PageType.DICTIONARY_PAGE for s in stats)
            and any(s.page_type in data_pages and s.encoding == thrift.Encoding.PLAIN
                    for s in stats))


def _shift(struct_: Any, names: tuple[str, ...], delta: int) -> None:
    for name in names:
        value = getattr(struct_, name)
        if value:
            setattr(struct_, name, value + delta)


def join_row_groups(groups: list[Any]) -> Any:
    """One `RowGroup` from row groups that hold different columns of the same rows, in
    order: what one writer writes for those columns side by side (its byte counts are the
    sums of theirs, its first byte that of the first)."""
    joined = groups[0]
    if any(g.num_rows != joined.num_rows for g in groups):
        raise ParquetFooterError("the parts of one row group differ in rows")
    if len(groups) > 1:
        joined.columns = [chunk for group in groups for chunk in group.columns]
        joined.total_byte_size = sum(g.total_byte_size for g in groups)
        if joined.total_compressed_size is not None:
            joined.total_compressed_size = sum(g.total_compressed_size or 0 for g in groups)
    return joined


def move_row_group(group: Any, delta: int, ordinal: int) -> None:
    """Move a `RowGroup` whose column chunks were `delta` bytes earlier in the file they
    were written to: every offset it holds, and its ordinal if it has one."""
    _shift(group, _ROW_GROUP_OFFSETS, delta)
    if group.ordinal is not None:
        group.ordinal = ordinal
    for chunk in group.columns:
        if chunk.file_path is not None or chunk.crypto_metadata is not None:
            raise ParquetFooterError("cannot move a row group whose columns are in other "
                                     "files or encrypted")
        _shift(chunk, _COLUMN_CHUNK_OFFSETS, delta)
        if chunk.meta_data is not None:
            _shift(chunk.meta_data, _COLUMN_META_DATA_OFFSETS, delta)
