"""One scan task -> Arrow record batches: field-id projection, deletes, residual.

A task names a data file (or a byte range of one), the delete files the planner matched to
it, and a residual filter. Reading it is a pipeline, one batch at a time so memory stays
bounded by the batch size however large the file:

1. **read** only the columns needed, Parquet row group by row group (a split reads only the
   row groups whose first byte lies in its range), remembering each batch's first row
   position in the *file* (position deletes count from the file's start, split or not);
2. **project** by field id: a renamed column keeps its id, so it is found under its old name
   and output under the projection's; a column added after the file was written is null
   (or its `initial-default`); promoted types (int -> long, float -> double, wider
   decimals) are cast; structs, lists and maps are matched by id all the way down;
3. **delete** rows: position deletes and deletion vectors as a mask over file positions,
   equality deletes as a null-safe anti-join (see `meltwater.stream.engine.deletes.loader`);
4. **filter** with the residual (`meltwater.stream.engine.decode.arrow_filter`), then drop
   the columns read only for step 3 or 4.

Change reconstruction reads a file under several delete sets at once
(`read_with_delete_sets`): the same pipeline without the filtering, yielding each batch with
one live mask per set, so an older file hit by new deletes is read once to compare its rows
before and after a commit, and only the row groups where a position changed are read.

Decoding files is `formats`' job, matching their columns by field id `projection`'s.

Example::

    loader = DeleteLoader(io)          # share one per task group: delete files are cached
    for task in group.tasks:
        for batch in read_task(task, projection, io, deletes=loader):
            ...
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.expressions.tree import AlwaysTrue, BoundPredicate, Expression, predicates
from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet, FileScanTask
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.reserved_field_ids import LAST_UPDATED_SEQUENCE_NUMBER_ID, ROW_ID_ID
from meltwater.planner.spec.types import NestedField, Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.arrow_constants import int64_range
from meltwater.stream.engine.decode.arrow_filter import field_paths, to_arrow_filter, type_at_path
from meltwater.stream.engine.decode.arrow_schema import (
    to_arrow_type,
)
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE
from meltwater.stream.engine.decode.formats import open_source
from meltwater.stream.engine.decode.parquet_layout import any_between
from meltwater.stream.engine.decode.projection import FileProjection

if TYPE_CHECKING:
    from meltwater.stream.engine.deletes.equality_lookup import EqualityLookup
    from meltwater.stream.engine.deletes.loader import DeleteLoader, DeletionMask





# -- the task pipeline ---------------------------------------------------------------------


class _DeleteSet:
    """One set of delete files resolved against one data file: a position mask and the
    shared equality lookup, ready to compute a batch's live mask."""

    def __init__(self, mask: DeletionMask | None, shared: _SharedEquality | None = None
                 ) -> None:
        self.mask = mask
        self.shared = shared

    def live(self, first: int, batch: pa.RecordBatch) -> pa.BooleanArray | None:
        """True for the rows of a projected batch (file positions [first, first + n)) that
        no delete of the set removes; None when all are live."""
        keep = self.mask.keep(first, batch.num_rows) if self.mask is not None else None
        deleted = self.shared.deleted(batch) if self.shared is not None else None
        if deleted is not None:
            keep = pc.invert(deleted) if keep is None else pc.and_not(keep, deleted)
        return keep


class _SharedEquality(NamedTuple):
    """A scan's shared equality lookup, applied to one data file's rows."""

    lookup: EqualityLookup
    data_file: DataFile
    sequence_number: int

    def deleted(self, batch: pa.RecordBatch) -> pa.BooleanArray | None:
        return self.lookup.deleted(batch, self.data_file, self.sequence_number)


def _equality_key_ids(applying: Sequence[EqualityDeleteSet | None],
                      sequence_number: int | None, data_file: DataFile) -> set[int]:
    """The key field ids of the equality deletes that apply to a data file (the lookup
    module is loaded only when some do: most reads have none)."""
    if sequence_number is None or all(e is None for e in applying):
        return set()
    from meltwater.stream.engine.deletes.equality_lookup import key_field_ids

    return {fid for e in applying if e is not None
            for fid in key_field_ids(e, sequence_number, data_file)}


class _OpenFile:
    """A data file opened for reading under one or more delete sets: the source, the
    projection plan (with extra columns for equality keys and filters) and each set's
    resolved deletes. Shared by `read_task` and `read_with_delete_sets` so both read,
    project and delete exactly alike."""

    def __init__(self, data_file: DataFile, projection: Schema, io: FileIO,
                 delete_sets: Sequence[Sequence[DeleteFileRef]], loader: DeleteLoader,
                 filter_types: dict[int, Any] | None = None,
                 sequence_number: int | None = None,
                 equality: Sequence[EqualityDeleteSet | None] = ()) -> None:
        self.source = open_source(data_file.file_path, data_file.file_format, io)
        self.lineage = _Lineage.for_file(data_file, projection, sequence_number)
        in_projection = field_paths(projection)
        self.in_projection = in_projection
        # the equality deletes of each delete set that apply to the file, and their keys
        applying = [e if e is not None and sequence_number is not None
                    and e.applies_to(sequence_number, data_file) else None
                    for e in (equality or [None] * len(delete_sets))]
        key_ids = _equality_key_ids(applying, sequence_number, data_file)
        extra: dict[int, pa.DataType | None] = {fid: None for fid in sorted(key_ids)
                                                if fid not in in_projection}
        for fid, type_ in (filter_types or {}).items():
            if fid not in in_projection:
                extra[fid] = to_arrow_type(type_)
        self.plan = FileProjection(self.source, projection, extra)
        self.output_names = [f.name for f in projection.fields]
        key_types, key_paths = self._key_columns(key_ids)
        self.sets = []
        for refs, shared in zip(delete_sets, applying, strict=True):
            mask = loader.deletion_mask([d.file for d in refs], data_file.file_path)
            lookup = None
            if shared is not None and sequence_number is not None:
                from meltwater.stream.engine.deletes.equality_lookup import (
                    equality_lookup,
                    for_set,
                )

                lookup = _SharedEquality(
                    equality_lookup(shared, loader, *for_set(shared, key_types, key_paths)),
                    data_file, sequence_number)
            self.sets.append(_DeleteSet(mask, lookup))

    def _key_columns(self, field_ids: Iterable[int]
                     ) -> tuple[dict[int, pa.DataType], dict[int, tuple[str, ...]]]:
        return key_columns(self.plan, field_ids, self.in_projection)

    def without_extras(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.select(self.output_names) if self.plan.extras else batch

    def project(self, first: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = self.plan.project(batch)
        return batch if self.lineage is None else self.lineage.fill(first, batch)




def key_columns(plan: FileProjection, field_ids: Iterable[int],
                in_projection: dict[int, tuple[str, ...]]
                ) -> tuple[dict[int, pa.DataType], dict[int, tuple[str, ...]]]:
    """The type and path (column, then struct fields) of each key column in a file's
    projected batches, extra columns included: what equality deletes are matched on."""
    output_schema = pa.schema(list(plan.target) + [
        pa.field(e.name, plan.extra_type(e)) for e in plan.extras])
    extra_names = {e.field_id: e.name for e in plan.extras}
    key_paths = {fid: in_projection.get(fid) or (extra_names[fid],) for fid in field_ids}
    key_types = {fid: type_at_path(output_schema, path) for fid, path in key_paths.items()}
    return key_types, key_paths


class _Lineage:
    """v3 row lineage: `_row_id` and `_last_updated_sequence_number` of each row.

    A writer stores them only for rows it copied or updated; a null means "inherited":
    the file's `first_row_id` plus the row's position, and the file's data sequence
    number. Reading them gives changes a stable row identity across updates.
    """

    def __init__(self, row_id: str | None, updated: str | None, first_row_id: int | None,
                 sequence_number: int | None) -> None:
        self.row_id, self.updated = row_id, updated
        self.first_row_id, self.sequence_number = first_row_id, sequence_number

    @classmethod
    def for_file(cls, data_file: DataFile, projection: Schema,
                 sequence_number: int | None) -> _Lineage | None:
        names = {f.field_id: f.name for f in projection.fields}
        if ROW_ID_ID not in names and LAST_UPDATED_SEQUENCE_NUMBER_ID not in names:
            return None
        return cls(names.get(ROW_ID_ID), names.get(LAST_UPDATED_SEQUENCE_NUMBER_ID),
                   data_file.first_row_id, sequence_number)

    def fill(self, first: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        columns = dict(zip(batch.schema.names, batch.columns, strict=True))
        if self.row_id is not None and self.first_row_id is not None:
            start = self.first_row_id + first
            inherited = int64_range(start, n)
            columns[self.row_id] = pc.coalesce(columns[self.row_id], inherited)
        if self.updated is not None and self.sequence_number is not None:
            columns[self.updated] = pc.coalesce(
                columns[self.updated], pa.scalar(self.sequence_number, pa.int64()))
        return pa.RecordBatch.from_arrays(list(columns.values()), schema=batch.schema)


def residual_types(residual: Expression) -> dict[int, Any]:
    """Field id -> Iceberg type of every column a residual reads (read as extras when
    outside the projection)."""
    return {p.field_id: p.type for p in predicates(residual) if isinstance(p, BoundPredicate)}


def residual_filter(residual: Expression, projection: Schema, plan: FileProjection) -> Any:
    """The residual as an Arrow expression over a projected batch (extras included), or
    None when every row passes."""
    if isinstance(residual, AlwaysTrue):
        return None
    types = residual_types(residual)
    schema = Schema(projection.fields + tuple(
        NestedField(e.field_id, e.name, types[e.field_id])
        for e in plan.extras if e.field_id in types))
    return to_arrow_filter(residual, schema)


def read_task(task: FileScanTask, projection: Schema, io: FileIO, *,
              batch_size: int = DEFAULT_BATCH_SIZE,
              deletes: DeleteLoader | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of one task, deletes and residual applied, in the columns of `projection`.

    `projection` is the table schema at the scanned snapshot, or the subset of its columns
    to return (plus any the residual needs); batches have exactly its column names and types
    (`to_arrow_schema(projection)`). Pass one `DeleteLoader` for all tasks of a group so a
    delete file that applies to many data files is read once. Empty batches are skipped.
    """
    from meltwater.stream.engine.deletes.loader import DeleteLoader

    loader = deletes if deletes is not None else DeleteLoader(io)
    opened = _OpenFile(task.data_file, projection, io, [task.deletes], loader,
                       residual_types(task.residual), task.sequence_number, [task.equality])
    plan = opened.plan
    (delete_set,) = opened.sets
    row_filter = residual_filter(task.residual, projection, plan)

    for first, batch in opened.source.batches(plan.selection, batch_size, task.start,
                                              task.length):
        batch = opened.project(first, batch)
        keep = delete_set.live(first, batch)
        if keep is not None:
            batch = batch.filter(keep)
        if row_filter is not None and batch.num_rows:
            batch = batch.filter(row_filter)
        batch = opened.without_extras(batch)
        if batch.num_rows:
            yield batch


class MaskedBatch(NamedTuple):
    """A batch of a data file read under several delete sets (see `read_with_delete_sets`)."""

    first: int  # file position of the batch's first row
    batch: pa.RecordBatch  # projected, no row removed
    live: list[pa.BooleanArray | None]  # per delete set: True = not deleted; None = all live


def read_with_delete_sets(data_file: DataFile, projection: Schema, io: FileIO,
                          delete_sets: Sequence[Sequence[DeleteFileRef]], *,
                          batch_size: int = DEFAULT_BATCH_SIZE,
                          deletes: DeleteLoader | None = None,
                          positions_of_interest: pa.Array | None = None,
                          sequence_number: int | None = None,
                          equality: Sequence[EqualityDeleteSet | None] = (),
                          ) -> Iterator[MaskedBatch]:
    """Read a data file once and say, per delete set, which of its rows are live.

    `delete_sets` are position deletes and DVs; `equality`, when given, the equality
    delete set that goes with each (its members that apply to the file, by
    `sequence_number`, count).

    A change task compares a file's rows under the deletes that applied before a commit
    and after it; reading the file once for both halves the I/O of the common case, an
    older file hit by new deletes. Batches are projected like `read_task`'s but keep every
    row (extra columns read only for equality keys are dropped after masking).

    `positions_of_interest`, sorted file positions, limits reading to the Parquet row
    groups (and the batches of other formats) holding at least one of them. Pass it when
    the sets differ only in position deletes or DVs: rows at other positions are live or
    deleted alike under every set, so they cannot change, and a small change in a large
    file then reads a few row groups instead of the file. An empty array reads nothing.
    """
    from meltwater.stream.engine.deletes.loader import DeleteLoader

    loader = deletes if deletes is not None else DeleteLoader(io)
    wanted = None
    if positions_of_interest is not None:
        if len(positions_of_interest) == 0:
            return
        wanted = _int64_view(positions_of_interest)
    opened = _OpenFile(data_file, projection, io, delete_sets, loader,
                       sequence_number=sequence_number, equality=equality)
    plan = opened.plan
    for first, batch in opened.source.batches(plan.selection, batch_size, rows=wanted):
        n = batch.num_rows
        if n == 0 or (wanted is not None and not any_between(wanted, first, first + n)):
            continue
        batch = opened.project(first, batch)
        live = [s.live(first, batch) for s in opened.sets]
        yield MaskedBatch(first, opened.without_extras(batch), live)


def read_rows_at(data_file: DataFile, projection: Schema, io: FileIO, positions: pa.Array,
                 *, sequence_number: int | None = None,
                 deletes: DeleteLoader | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[pa.RecordBatch]:
    """The rows at `positions` (sorted, distinct file positions) of a data file, projected
    as `read_task` projects them, in position order: only the row groups (and batches of
    other formats) holding one of them are read."""
    if len(positions) == 0:
        return
    positions = positions.cast(pa.int64())
    view = _int64_view(positions)
    for item in read_with_delete_sets(data_file, projection, io, [], batch_size=batch_size,
                                      deletes=deletes, positions_of_interest=positions,
                                      sequence_number=sequence_number):
        n = item.batch.num_rows
        lo = bisect.bisect_left(view, item.first)
        hi = bisect.bisect_left(view, item.first + n, lo)
        if hi > lo:
            offsets = pc.subtract(positions.slice(lo, hi - lo),
                                  pa.scalar(item.first, pa.int64()))
            yield item.batch.take(offsets)


def _int64_view(positions: pa.Array) -> Sequence[int]:
    """Sorted positions as a bisectable sequence, without a Python list."""
    positions = positions.cast(pa.int64())
    if positions.null_count:
        positions = positions.drop_null()
    data = positions.buffers()[1]
    if data is None or len(positions) == 0:
        return []
    return memoryview(data).cast("q")[positions.offset:positions.offset + len(positions)]

