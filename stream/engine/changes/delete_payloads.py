"""Change rows read from delete files instead of data files: `row` payloads, trusted deletes.

The **payload fast path** never opens the data file: when every delete file a commit added
for a file is a position delete file carrying the deleted `row`, and the deletes that
already applied can be checked on those rows (positions and DVs, or equality deletes whose
key columns the payload holds), the DELETEs are the payload rows, deduplicated by position
and minus the positions and keys already deleted before.

Equality deletes are resolved against the live rows by default, because upsert writers
emit a delete for every key they write, existing or not, and a delete matching nothing is
no change. `ChangeOptions(equality_deletes="trust-payload")` instead emits the rows of
equality delete files that hold every projected column as DELETEs without reading data:
right, and much cheaper, only for CDC writers that delete exactly the rows that exist
(each such file's rows are emitted once per commit, as written).

`meltwater.stream.engine.changes.reconstruction` reconstructs a commit and asks `DeletePayloads`
first; whatever these paths do not cover it reads from the data files.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import (
    CommitChanges,
    DeletedRowsTask,
    EqualityDeletedRowsTask,
)
from meltwater.planner.scans.tasks import DataFileRef, DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.reserved_field_ids import (
    DELETE_FILE_PATH_ID,
    DELETE_POS_ID,
    DELETE_ROW_ID,
)
from meltwater.planner.spec.types import NestedField, Schema, StructType
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.arrow_filter import field_paths, type_at_path
from meltwater.stream.engine.decode.arrow_schema import field_id, to_arrow_schema
from meltwater.stream.engine.decode.formats import open_source
from meltwater.stream.engine.decode.projection import FileProjection
from meltwater.stream.engine.deletes.loader import DeleteLoader


def delete_keys(refs: Iterable[DeleteFileRef]) -> set[tuple[str, int | None]]:
    """The delete files of some references, by key (a set of deletes compares by these)."""
    return {r.key for r in refs}


class DeletePayloads:
    """One commit's reads of delete files' rows, in the projection's columns: position
    delete payloads (each file read once per commit) and trusted equality deletes."""

    def __init__(self, projection: Schema, io: FileIO, loader: DeleteLoader,
                 batch_size: int) -> None:
        self.projection = projection
        self.io = io
        self.loader = loader
        self.batch_size = batch_size
        self.table_schema = to_arrow_schema(projection)
        self.paths = field_paths(projection)
        self._payloads: dict[str, _Payload | None] = {}  # per commit: added files only
        self._loading = threading.Lock()  # a commit's files are read on several threads

    def deleted_rows(self, data: DataFileRef, before: tuple[DeleteFileRef, ...],
                     after: tuple[DeleteFileRef, ...], added: tuple[DeleteFileRef, ...],
                     equality: EqualityDeleteSet | None) -> list[pa.RecordBatch] | None:
        """DELETE rows from the `row` payloads of the added position deletes, or None when
        the fast path does not apply (the caller then reads the data file). `equality` are
        the equality deletes live before (and after: the commit did not change them for
        this file)."""
        if not added or delete_keys(after) != delete_keys(before) | delete_keys(added) or (
                delete_keys(before) & delete_keys(added)):
            return None
        if not all(d.is_position and not d.file.is_deletion_vector for d in added):
            return None
        data_path = data.file.file_path
        applying = (None if equality is None
                    or not equality.applies_to(data.sequence_number, data.file) else equality)
        key_ids: list[int] = []
        if applying is not None:  # the lookup module, loaded for equality deletes alone
            from meltwater.stream.engine.deletes.equality_lookup import (
                equality_lookup,
                for_set,
                key_field_ids,
            )

            key_ids = sorted(key_field_ids(applying, data.sequence_number, data.file))
        parts = []
        for ref in added:
            payload = self._payload(ref.file)
            if payload is None or not payload.has_keys(key_ids):
                return None
            rows = payload.rows(data_path)
            if rows is not None:
                parts.append(rows)
        if not parts:
            return []
        table = pa.concat_tables(parts, promote_options="permissive").combine_chunks()
        # One DELETE per position, however many delete files name it.
        table = table.take(pc.sort_indices(table.column(_POS)))
        pos = table.column(_POS).combine_chunks()
        if len(pos) > 1:
            first = pa.concat_arrays([pa.array([True]),
                                      pc.not_equal(pos.slice(1), pos.slice(0, len(pos) - 1))])
            table, pos = table.filter(first), pos.filter(first)
        # Positions already deleted before the commit are not deleted again.
        mask = self.loader.deletion_mask([d.file for d in before], data_path)
        if mask is not None and table.num_rows:
            table = table.filter(pc.invert(pc.is_in(pos, value_set=mask.positions)))
        if applying is not None and table.num_rows:
            key_paths = {fid: self.paths.get(fid) or (_key_column(fid),) for fid in key_ids}
            key_types = {fid: type_at_path(table.schema, key_paths[fid]) for fid in key_ids}
            lookup = equality_lookup(applying, self.loader,
                                     *for_set(applying, key_types, key_paths))
            batch = table.combine_chunks().to_batches()[0]
            hit = lookup.deleted(batch, data.file, data.sequence_number)
            if hit is not None:
                table = table.filter(pc.invert(hit))
        return table.select(self.table_schema.names).cast(self.table_schema).to_batches(
            max_chunksize=self.batch_size)

    def _payload(self, file: DataFile) -> _Payload | None:
        with self._loading:  # one load a file, however many data files it names
            if file.file_path not in self._payloads:
                self._payloads[file.file_path] = (
                    None if _carries_no_rows(file) else _Payload.load(file, self))
            return self._payloads[file.file_path]

    def trusted_files(self, commit: CommitChanges) -> dict[str, DataFile]:
        """Equality delete files added by the commit that hold every projected column, so
        their rows can be emitted as they are (with `trust-payload`): those of the commit's
        equality change, when a task reads rows it may delete."""
        target = pa.struct(list(self.table_schema))
        found: dict[str, DataFile] = {}
        seen: set[str] = set()
        for task in commit.tasks:
            change = getattr(task, "equality", None)
            if not isinstance(task, (DeletedRowsTask, EqualityDeletedRowsTask)) \
                    or change is None:
                continue
            for ref in change.added:
                path = ref.file.file_path
                if path in seen:
                    continue
                seen.add(path)
                source = open_source(path, ref.file.file_format, self.io)
                if _covers(pa.struct(list(source.schema)), target):
                    found[path] = ref.file
        return found

    def trusted_rows(self, file: DataFile) -> Iterator[pa.RecordBatch]:
        """A trusted equality delete file's rows, projected: DELETEs as written."""
        source = open_source(file.file_path, file.file_format, self.io)
        plan = FileProjection(source, self.projection)
        for _, batch in source.batches(plan.selection, self.batch_size):
            if batch.num_rows:
                yield plan.project(batch)


_POS = "__meltwater_pos"


def _key_column(fid: int) -> str:
    return f"__meltwater_key_{fid}"


def _carries_no_rows(file: DataFile) -> bool:
    """Whether a position delete file's metrics show it has no `row` column.

    Writers record metrics for the columns they write, Iceberg Java also for the `row`
    struct's fields, so metrics on `file_path` and `pos` alone mean there is no payload
    and the file need not be opened to look: the `DeleteLoader` opens it for its positions
    anyway. Without metrics the file is opened. A wrong "no" would only cost the fast path
    (the data file is read instead), never a wrong row.
    """
    seen = file.column_sizes.keys() | file.value_counts.keys() | file.null_value_counts.keys()
    return bool(seen) and seen <= {DELETE_FILE_PATH_ID, DELETE_POS_ID}


class _Payload:
    """The rows a position delete file carries, projected, grouped by data file."""

    def __init__(self, table: pa.Table, ranges: dict[str, tuple[int, int]],
                 keys: set[int]) -> None:
        self.table = table
        self.ranges = ranges
        self.keys = keys  # field ids an equality key can be read from

    def has_keys(self, key_ids: Sequence[int]) -> bool:
        return all(fid in self.keys for fid in key_ids)

    def rows(self, data_path: str) -> pa.Table | None:
        found = self.ranges.get(data_path)
        return None if found is None else self.table.slice(*found)

    @staticmethod
    def load(file: DataFile, run: DeletePayloads) -> _Payload | None:
        """Read a position delete file's payload, or None when it has no `row` column or
        the column lacks a projected field (the data file must be read then)."""
        source = open_source(file.file_path, file.file_format, run.io)
        row = next((f for f in source.schema if field_id(f) == DELETE_ROW_ID), None)
        if row is None or not pa.types.is_struct(row.type):
            return None
        target = pa.struct(list(run.table_schema))
        if not _covers(row.type, target):
            return None
        # Equality keys a commit may need to check, beyond the projected columns: every
        # other field of the payload's top level (cheap: it is one file's payload).
        projected = set(run.paths)
        extra_ids = [fid for f in row.type
                     if (fid := field_id(f)) is not None and fid not in projected]
        wrapper = Schema((NestedField(DELETE_ROW_ID, "row", StructType(run.projection.fields)),))
        plan = FileProjection(source, wrapper,
                              dict.fromkeys([DELETE_FILE_PATH_ID, DELETE_POS_ID, *extra_ids]))
        batches = [plan.project(b)
                   for _, b in source.batches(plan.selection, 1 << 20) if b.num_rows]
        keys = projected | set(extra_ids)
        if not batches:
            return _Payload(pa.table({}), {}, keys)
        raw = pa.Table.from_batches(batches).combine_chunks()
        rows = raw.column("row").chunk(0)
        columns = {f.name: rows.field(i) for i, f in enumerate(run.table_schema)}
        columns[_POS] = raw.column(f"__meltwater_{DELETE_POS_ID}").cast(pa.int64())
        for fid in extra_ids:
            columns[_key_column(fid)] = raw.column(f"__meltwater_{fid}")
        paths = raw.column(f"__meltwater_{DELETE_FILE_PATH_ID}").chunk(0)
        fields = [*run.table_schema, pa.field(_POS, pa.int64()),
                  *(pa.field(_key_column(fid), columns[_key_column(fid)].type)
                    for fid in extra_ids)]
        table = pa.Table.from_arrays([columns[f.name] for f in fields], schema=pa.schema(fields))
        # Group by data file: sort by path, then find each path's run.
        order = pc.sort_indices(paths)
        table, paths = table.take(order), pc.take(paths, order)
        n = len(paths)
        ranges: dict[str, tuple[int, int]] = {}
        starts = [0]
        if n > 1:
            change = pc.not_equal(paths.slice(1), paths.slice(0, n - 1))
            starts += [i + 1 for i in pc.indices_nonzero(change).to_pylist()]
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else n
            ranges[paths[start].as_py()] = (start, end - start)
        return _Payload(table, ranges, keys)


def _covers(file_type: pa.DataType, target_type: pa.DataType) -> bool:
    """Whether a payload type holds every field of a target type, matched by field id."""
    if pa.types.is_struct(target_type):
        if not pa.types.is_struct(file_type):
            return False
        by_id = {field_id(file_type.field(i)): file_type.field(i)
                 for i in range(file_type.num_fields)}
        for i in range(target_type.num_fields):
            child = target_type.field(i)
            found = by_id.get(field_id(child))
            if found is None or not _covers(found.type, child.type):
                return False
        return True
    if pa.types.is_list(target_type):
        return (pa.types.is_list(file_type) or pa.types.is_large_list(file_type)) and _covers(
            file_type.value_type, target_type.value_type)
    if pa.types.is_map(target_type):
        return pa.types.is_map(file_type) and _covers(
            file_type.item_type, target_type.item_type)
    return True
