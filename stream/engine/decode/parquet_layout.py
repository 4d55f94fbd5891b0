"""Where things are in a Parquet file: the row groups a split or a set of positions
needs, and the leaf columns a selection names (for `formats` and the bulk scan)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Literal

import pyarrow as pa

# Row groups of fewer rows are read whole, without looking at their pages (`parquet_pages`,
# not even loaded for them): decoding one takes a few milliseconds a column, which is what
# loading parquet.thrift (thriftpy2 parses the IDL: about 60 ms, once per process) and
# decoding a footer would cost a small commit that pages could not save.
MIN_PAGED_GROUP_ROWS = 200_000

# A selection of a file's columns, mirroring its Arrow schema: for each wanted top-level
# field index, either True (the whole subtree) or the wanted child indices, recursively.
Selection = dict[int, "Literal[True] | Selection"]


def row_group_runs(metadata: Any, start: int = 0, length: int | None = None,
                   rows: Sequence[int] | None = None) -> list[tuple[int, list[int]]]:
    """The row groups a split reads, as contiguous runs, each with the file position of
    its first row: those whose first byte lies in [start, start + length) (every one, for
    a whole file) and, given sorted row positions `rows`, that hold one of them."""
    runs: list[tuple[int, list[int]]] = []
    position = 0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        in_split = length is None or start <= row_group_offset(group) < start + length
        if in_split and (rows is None
                         or any_between(rows, position, position + group.num_rows)):
            if runs and runs[-1][1][-1] == index - 1:
                runs[-1][1].append(index)
            else:
                runs.append((position, [index]))
        position += group.num_rows
    return runs


def row_group_offset(group: Any) -> int:
    """Where a row group starts: its first column chunk's dictionary page, else data page.

    This is the offset Iceberg writes as a split offset, so a split [start, start + length)
    owns exactly the row groups starting in it.
    """
    chunk = group.column(0)
    offset = chunk.data_page_offset
    if chunk.has_dictionary_page and chunk.dictionary_page_offset is not None:
        offset = min(offset, chunk.dictionary_page_offset)
    return offset


def parquet_leaf_paths(file: Any, schema: pa.Schema, selection: Selection) -> list[str]:
    """Parquet leaf column paths for a selection: leaves are numbered in schema order."""
    leaves: list[int] = []
    counter = 0

    def count(type_: pa.DataType) -> int:
        if type_.num_fields == 0:
            return 1
        return sum(count(type_.field(i).type) for i in range(type_.num_fields))

    def visit(type_: pa.DataType, wanted: Literal[True] | Selection, first: int) -> None:
        if wanted is True or type_.num_fields == 0:
            leaves.extend(range(first, first + count(type_)))
            return
        for i in range(type_.num_fields):
            child = type_.field(i).type
            if i in wanted:
                visit(child, wanted[i], first)
            first += count(child)

    for index, field in enumerate(schema):
        if index in selection:
            visit(field.type, selection[index], counter)
        counter += count(field.type)
    parquet_schema = file.schema
    return [parquet_schema.column(i).path for i in leaves]


def any_between(positions: Sequence[int], lo: int, hi: int) -> bool:
    """Whether sorted `positions` hold a value in [lo, hi)."""
    i = bisect.bisect_left(positions, lo)
    return i < len(positions) and positions[i] < hi
