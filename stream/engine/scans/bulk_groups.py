"""Which Parquet tasks one Arrow dataset scan can read together: the bulk scan's groups.

A group is tasks whose files need the same file fields (names, types and field ids, nested
ones included), so one dataset schema fits every fragment and Arrow never matches a column
by name where the ids would disagree (`bulk_scan`'s "Same mapping"). Each file's footer is
read once here, several at a time from an object store (`remote_reads`), and what follows
from a footer's schema alone (the projection plan, the group) is worked out once per
distinct schema. A split task becomes one `Piece` per contiguous run of the row groups
whose first byte lies in its range. Tasks that cannot join a group (other formats, files
no filesystem Arrow can open reaches, unreadable footers) are returned for `read_task`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from meltwater.planner.expressions.tree import Expression
from meltwater.planner.scans.tasks import FileScanTask
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.arrow_filter import field_paths
from meltwater.stream.engine.decode.arrow_schema import field_id, to_arrow_type
from meltwater.stream.engine.decode.formats import FileSource, without_extensions
from meltwater.stream.engine.decode.parquet_layout import row_group_runs
from meltwater.stream.engine.decode.projection import FileProjection
from meltwater.stream.engine.decode.remote_reads import read_each, waits_on_network
from meltwater.stream.engine.deletes.equality_lookup import key_field_ids
from meltwater.stream.engine.scans.reader import residual_types


@dataclass
class Piece:
    """One fragment of one task: a whole file, or a contiguous run of its row groups."""

    task: int  # index into the group's tasks
    fragment: Any  # pyarrow.dataset.ParquetFileFragment
    key: tuple[str, int]  # (path as the scan reports it, first row group id)
    first: int  # file position of the fragment's first row
    size: int  # Parquet bytes it reads, about: its task's, shared among its pieces


@dataclass
class BulkGroup:
    """Tasks whose files share the fields a scan needs: one Arrow dataset scan."""

    filesystem: Any
    schema: pa.Schema  # the dataset schema: the needed file fields, ids in field metadata
    direct: bool  # those fields are the projection's (names, types, ids): no reshaping
    tasks: list[FileScanTask] = field(default_factory=list)
    plans: list[FileProjection] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)


class _SchemaSource(FileSource):
    """A file known by its footer's schema only, for building a `FileProjection` without
    opening the file again from Python (Arrow's scan reads it)."""

    def __init__(self, path: str, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema


def _extras(projection: Schema, residual: Expression, key_ids: frozenset[int]
            ) -> dict[int, pa.DataType | None]:
    """Columns read only for the residual or for equality delete keys, as `read_task`
    asks `FileProjection` for them."""
    in_projection = field_paths(projection)
    extras: dict[int, pa.DataType | None] = {fid: None for fid in sorted(key_ids)
                                             if fid not in in_projection}
    extras.update({fid: to_arrow_type(type_) for fid, type_ in residual_types(residual).items()
                   if fid not in in_projection})
    return extras


def task_key_ids(task: FileScanTask) -> frozenset[int]:
    """The equality key columns reading the task needs."""
    if task.equality is None:
        return frozenset()
    return frozenset(key_field_ids(task.equality, task.sequence_number, task.data_file))


def _same_fields(a: pa.Field, b: pa.Field) -> bool:
    """Same name, type (nullability of children included) and field ids all the way down:
    a file column that can be output as a projection column unchanged."""
    if a.name != b.name or field_id(a) != field_id(b) or not a.type.equals(b.type):
        return False
    return all(_same_fields(a.type.field(i), b.type.field(i))
               for i in range(a.type.num_fields))


def _is_direct(plan: FileProjection, physical: pa.Schema) -> bool:
    """Whether the projection is exactly some of the file's top-level fields."""
    if plan.extras or any(index is None for index in plan.sources):
        return False
    return all(_same_fields(physical.field(index), target)
               for index, target in zip(plan.sources, plan.target, strict=True))


def _field_key(f: pa.Field) -> tuple[Any, ...]:
    """A hashable identity of a field: name, type, nullability and field ids, nested."""
    return (f.name, str(f.type), f.nullable, field_id(f),
            tuple(_field_key(f.type.field(i)) for i in range(f.type.num_fields)))


def _row_group_runs(fragment: Any, start: int, length: int | None
                    ) -> list[tuple[int, list[int]]] | None:
    """For a split: contiguous runs of the row groups whose first byte lies in
    [start, start + length), each with the file position of its first row. None for a
    whole file. As `ParquetSource.batches` selects row groups."""
    return None if length is None else row_group_runs(fragment.metadata, start, length)


def candidates(tasks: Sequence[FileScanTask], projection: Schema
               ) -> tuple[list[FileScanTask], list[FileScanTask]]:
    """Tasks the Arrow scan may read (to be confirmed by their footers in `partition`) and
    the rest, for `read_task`: what can be told without opening a file."""
    if not projection.fields:
        return [], list(tasks)
    maybe: list[FileScanTask] = []
    rest: list[FileScanTask] = []
    for task in tasks:
        if task.data_file.file_format.upper() == "PARQUET":
            maybe.append(task)
        else:
            rest.append(task)
    return maybe, rest


def partition(tasks: Sequence[FileScanTask], projection: Schema, io: FileIO
              ) -> tuple[list[BulkGroup], list[FileScanTask]]:
    """Split tasks into groups the Arrow scan can read and the rest, for `read_task`.

    Reads each Parquet footer once (Arrow caches it in the fragment for the scan; from an
    object store several at a time, see `remote_reads`). What
    follows from a footer's schema alone (the projection plan, the group) is worked out
    once per distinct schema, so the pass costs little more than the footer reads.
    """
    maybe, rest = candidates(tasks, projection)
    if not maybe:
        return [], rest
    import pyarrow.dataset as ds

    file_format = ds.ParquetFileFormat()

    def open_footer(task: FileScanTask) -> _Footer | None:
        """The task's file opened and its footer read; None if that fails, or if the FileIO
        reads through no filesystem Arrow can be handed."""
        try:
            resolved = io.resolve(task.data_file.file_path)
            if resolved is None:
                return None
            filesystem, path = resolved
            whole = file_format.make_fragment(path, filesystem,
                                              file_size=_manifest_size(task.data_file))
            return _Footer(filesystem, path, whole, whole.physical_schema,
                           _row_group_runs(whole, task.start, task.length))
        except (OSError, pa.ArrowException, ValueError):
            return None

    footers = read_each(maybe, open_footer,
                        concurrently=waits_on_network(io, maybe[0].data_file.file_path))
    groups: dict[tuple[Any, ...], BulkGroup] = {}
    extras_of: dict[Any, dict[int, pa.DataType | None]] = {}
    plans: dict[tuple[Any, ...], _Plan | None] = {}
    seen: set[tuple[str, int]] = set()
    for task, footer in zip(maybe, footers, strict=True):
        data_file = task.data_file
        if footer is None:
            rest.append(task)  # the per-task path reports it, naming the file
            continue
        filesystem, path, whole, physical, runs = footer
        key_ids = task_key_ids(task)
        try:
            extras = extras_of.get((task.residual, key_ids))
            if extras is None:
                extras = extras_of[(task.residual, key_ids)] = _extras(
                    projection, task.residual, key_ids)
        except TypeError:  # an unhashable literal
            extras = _extras(projection, task.residual, key_ids)
        plan_key = (physical.remove_metadata().serialize().to_pybytes(),
                    tuple(sorted((fid, str(t)) for fid, t in extras.items())))
        if plan_key not in plans:
            plans[plan_key] = _plan(data_file.file_path, physical, projection, extras)
        found = plans[plan_key]
        if found is None:  # duplicate names, or no file column is needed
            rest.append(task)
            continue
        plan, columns, fields_key = found
        pieces = ([(0, None)] if runs is None
                  else [(first, groups_) for first, groups_ in runs])
        keys = [(path, 0 if groups_ is None else groups_[0]) for _, groups_ in pieces]
        if any(key in seen for key in keys):
            rest.append(task)  # a fragment the scan's tags could not tell apart
            continue
        seen.update(keys)
        group_key = (id(filesystem), *fields_key)
        group = groups.get(group_key)
        if group is None:
            group = groups[group_key] = BulkGroup(
                filesystem, pa.schema([physical.field(i) for i in columns]), fields_key[0])
        index = len(group.tasks)
        group.tasks.append(task)
        group.plans.append(plan)
        size = max(1, (data_file.file_size_in_bytes if task.length is None else task.length)
                   // len(pieces))
        for (first, row_groups), key in zip(pieces, keys, strict=True):
            fragment = whole if row_groups is None else file_format.make_fragment(
                path, filesystem, row_groups=row_groups, file_size=_manifest_size(data_file))
            group.pieces.append(Piece(index, fragment, key, first, size))
    return list(groups.values()), rest


_Plan = tuple[FileProjection, list[int], tuple[Any, ...]]


class _Footer(NamedTuple):
    """A data file opened for the scan: where it is, its footer's schema, its row groups."""

    filesystem: Any
    path: str
    whole: Any  # the whole file's fragment, its footer cached in it
    physical: pa.Schema
    runs: list[tuple[int, list[int]]] | None


def _manifest_size(data_file: DataFile) -> int | None:
    """The file's size as its manifest entry records it, for Arrow to find the footer without
    asking the store (an S3 HEAD per fragment, two per file: 400 of the 1,404 requests of the
    S3 benchmark's scan), as Iceberg Java opens data files with the manifest's length. None
    when the entry has no usable size, so Arrow asks. On S3 a size that does not match the
    object fails the footer read, which sends the task to the per-task reader (it asks the
    store); Arrow's local filesystem takes the size from the file whatever this says."""
    size = data_file.file_size_in_bytes
    return size if isinstance(size, int) and size > 0 else None


def _plan(location: str, physical: pa.Schema, projection: Schema,
          extras: dict[int, pa.DataType | None]) -> _Plan | None:
    """For one footer schema: the projection plan, the file columns to scan and the key of
    the group they belong to; None when such files are not for the bulk scan."""
    names = physical.names
    if len(set(names)) != len(names):
        return None
    plan = FileProjection(_SchemaSource(location, without_extensions(physical)),
                          projection, extras)
    columns = sorted(plan.selection)
    if not columns:
        return None
    direct = _is_direct(plan, physical)
    if direct:  # scan the columns in projection order, to use them as they come
        columns = [index for index in plan.sources if index is not None]
    return plan, columns, (direct, tuple(_field_key(physical.field(i)) for i in columns))
