"""Departing rows with their key only (`before-images=key`): what they are read with and
how they are brought to the table's columns.

A sink that applies changes by key (a database mirror, a compacted topic) uses of a row
that left (DELETE, UPDATE_BEFORE) only its key. An upsert commit's departing rows are its
keys' old rows, spread over every page of the older files: read whole, they cost a decode
of most of the table for each commit, where their keys alone are a fraction of it. With
key images the commit's whole-file and equality deletes read the departing rows' key
columns only (and the columns the row filter or a key share needs, nulled once used);
every other departing row, read whole where its read is shared with arriving rows, has
the same columns nulled, so every departing row looks the same whichever way it was read.

Worked example: identifier `id`, columns (id, v). A commit's equality delete of id 7
removes (7, "a") and its data file adds (7, "b"): with key images the rows are
UPDATE_BEFORE (7, null) and UPDATE_AFTER (7, "b"). A row deleted and re-inserted unchanged
(carry-over) cannot be told apart from an update without the old values, so such a pair
is kept as an update (`ChangeOptions` turns `keep_carryover` on).
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from meltwater.planner.expressions.tree import AlwaysTrue, Expression, referenced_field_ids
from meltwater.planner.spec.types import Schema
from meltwater.stream.engine.changes.change_schema import (
    ChangeOptions,
    key_image_columns,
    key_schema,
)
from meltwater.stream.engine.decode.arrow_schema import nullable_except, to_arrow_schema


class KeyImages:
    """The departing rows of one commit's read, as key images."""

    def __init__(self, projection: Schema, kept: frozenset[str], looked_at: Collection[int]
                 ) -> None:
        self.kept = kept
        # what departing rows are read with: the kept columns, and those a filter or a key
        # share looks at before they are nulled
        read = {f.name for f in key_schema(projection, looked_at).fields} | kept
        self.read_projection = Schema(tuple(f for f in projection.fields if f.name in read),
                                      projection.schema_id, projection.identifier_field_ids)
        self.table_schema = nullable_except(to_arrow_schema(projection), kept)
        # column name -> a null array of its type, sliced for each batch (`pa.nulls` for
        # every column of every batch was a tenth of a key-image read of 1,000 files)
        self._nulls: dict[str, pa.Array] = {}

    @classmethod
    def of(cls, projection: Schema, options: ChangeOptions, row_filter: Expression,
           share_ids: Collection[int] = ()) -> KeyImages | None:
        """The key images of a read (None: departing rows are read whole)."""
        kept = key_image_columns(projection, options)
        if kept is None:
            return None
        looked_at = set(share_ids)
        if not isinstance(row_filter, AlwaysTrue):
            looked_at |= referenced_field_ids(row_filter)
        return cls(projection, kept, looked_at)

    def widened(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch read with `read_projection` in the table's columns, the others null."""
        return self._nulled(batch, set(batch.schema.names))

    def imaged(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A departing row batch in the table's columns with only the kept ones' values."""
        return self._nulled(batch, self.kept)

    def _nulled(self, batch: pa.RecordBatch, keep: Collection[str]) -> pa.RecordBatch:
        n = batch.num_rows
        return pa.RecordBatch.from_arrays(
            [batch.column(f.name) if f.name in keep else self._null(f, n)
             for f in self.table_schema], schema=self.table_schema)

    def _null(self, field: pa.Field, rows: int) -> pa.Array:
        """`rows` nulls of the field's type: a slice of one array kept per column (safe
        across reading threads: at worst two threads each build one)."""
        nulls = self._nulls.get(field.name)
        if nulls is None or len(nulls) < rows:
            nulls = pa.nulls(max(rows, 1024), field.type)
            self._nulls[field.name] = nulls
        return nulls.slice(0, rows)
