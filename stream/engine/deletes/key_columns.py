"""A data file's key columns, read alone and kept: what equality deletes are matched on.

A change read finds the rows a commit's equality deletes remove by their keys (the
deletes' `equality_ids` columns): it reads only those columns of the data files the deletes
may reach, a few bytes a row where the whole row is tens or hundreds, and reads whole rows
only where a key matched. The columns are kept on a shelf of the reader's `DeleteLoader`
(`KeyColumns`; its cache is bounded by bytes), so a range or a stream reads each file's
keys once however many commits' deletes reach it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema
from meltwater.stream.engine.decode.formats import open_source
from meltwater.stream.engine.decode.projection import FileProjection
from meltwater.stream.engine.deletes.cache import ArrowShelf
from meltwater.stream.engine.deletes.loader import DeleteLoader

_READ_BATCH = 1 << 20


@dataclass(frozen=True)
class KeyColumnsKey:
    """A data file's key columns as a reader of one projection reads them."""

    data_file: str  # its path
    key_ids: tuple[int, ...]
    read_schema: str  # the projection's Arrow schema, as text: the columns' types and names


class KeyColumns(ArrowShelf[KeyColumnsKey, pa.Table]):
    """Data files' key columns, in position order."""


def key_names(projection: Schema, key_ids: Sequence[int]) -> dict[int, str]:
    """The column each key field is read into: its name in the projection, or for a field
    outside the projection's top level the extra column a reader of the projection reads
    it into (`meltwater.stream.engine.scans.reader`), so lookups built for either are one."""
    top = {f.field_id: f.name for f in projection.fields}
    return {fid: top.get(fid, f"__meltwater_{fid}") for fid in key_ids}


def key_table(data_file: DataFile, projection: Schema, key_ids: Sequence[int], io: FileIO,
              loader: DeleteLoader) -> pa.Table:
    """Every row's key columns in position order, named by `key_names`, read as a reader
    of `projection` would read them: a column of the projection by its type there (an
    older file's narrower column widened, a column added later as its initial default),
    any other one as the file has it. Cached in `loader`."""
    key = KeyColumnsKey(data_file.file_path, tuple(key_ids), str(to_arrow_schema(projection)))
    return loader.shelf(KeyColumns).get(key, lambda: _read(data_file, projection, key_ids, io))


def _read(data_file: DataFile, projection: Schema, key_ids: Sequence[int], io: FileIO
          ) -> pa.Table:
    source = open_source(data_file.file_path, data_file.file_format, io)
    top = {f.field_id: f for f in projection.fields}
    fields = tuple(top[fid] for fid in key_ids if fid in top)
    extras: dict[int, pa.DataType | None] = {fid: None for fid in key_ids if fid not in top}
    names = {f.field_id: f.name for f in projection.fields}
    plan = FileProjection(source, Schema(fields), extras, names=names)
    by_id = {f.field_id: f.name for f in fields}
    by_id.update({e.field_id: e.name for e in plan.extras})
    columns = [by_id[fid] for fid in key_ids]
    batches = [plan.project(batch).select(columns)
               for _, batch in source.batches(plan.selection, _READ_BATCH)]
    if not batches:
        types = {f.name: f.type for f in plan.target}
        types.update({e.name: plan.extra_type(e) for e in plan.extras})
        return pa.schema([pa.field(name, types[name]) for name in columns]).empty_table()
    return pa.Table.from_batches(batches).combine_chunks()

