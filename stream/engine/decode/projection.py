"""Matching a file's columns to a read schema by Iceberg field id.

A renamed column keeps its id, so it is found under its old name and output under the
projection's; a column added after the file was written is null (or its
`initial-default`); promoted types (int -> long, float -> double, wider decimals) are
cast; structs, lists and maps are matched by id all the way down. A file without any
field ids is matched by name. `FileProjection` decides once per file what to read and
how to reshape it, then runs per batch with no per-row Python work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.spec.literals import to_internal
from meltwater.planner.spec.types import NestedField, PrimitiveType, Schema, child_fields
from meltwater.stream.engine.decode.arrow_constants import constant_array
from meltwater.stream.engine.decode.arrow_schema import (
    FIELD_ID_KEY,
    field_id,
    to_arrow_schema,
    to_arrow_type,
    to_arrow_value,
)
from meltwater.stream.engine.decode.formats import FileSource
from meltwater.stream.engine.decode.parquet_layout import Selection
from meltwater.stream.errors import UnreadableFileError

if TYPE_CHECKING:
    pass



# -- field-id matching ---------------------------------------------------------------------


def has_field_ids(schema: pa.Schema) -> bool:
    """Whether any field of a file's schema, at any depth, carries an Iceberg field id."""
    def any_id(field: pa.Field) -> bool:
        type_ = field.type
        return field_id(field) is not None or any(
            any_id(type_.field(i)) for i in range(type_.num_fields))
    return any(any_id(f) for f in schema)


def with_ids_by_name(schema: pa.Schema, target: pa.Schema) -> pa.Schema:
    """A file schema without field ids, with the ids of same-named target fields added.

    The fallback for files written without ids (ORC files pyarrow cannot read attributes
    from, Parquet files imported into a table): like Iceberg's name mapping, but with the
    current names only, so a column renamed since the file was written reads as null.
    """
    def match(field: pa.Field, target_field: pa.Field | None) -> pa.Field:
        if target_field is None:
            return field
        fid = field_id(target_field)
        type_ = field.type
        target_type = target_field.type
        if pa.types.is_struct(type_) and pa.types.is_struct(target_type):
            by_name = {target_type.field(i).name: target_type.field(i)
                       for i in range(target_type.num_fields)}
            type_ = pa.struct([match(type_.field(i), by_name.get(type_.field(i).name))
                               for i in range(type_.num_fields)])
        elif pa.types.is_list(type_) and pa.types.is_list(target_type):
            type_ = pa.list_(match(type_.value_field, target_type.value_field))
        elif pa.types.is_map(type_) and pa.types.is_map(target_type):
            type_ = pa.map_(match(type_.key_field, target_type.key_field),
                            match(type_.item_field, target_type.item_field))
        metadata = {FIELD_ID_KEY: str(fid).encode()} if fid is not None else None
        return pa.field(field.name, type_, field.nullable, metadata=metadata)

    by_name = {f.name: f for f in target}
    return pa.schema([match(f, by_name.get(f.name)) for f in schema])


def _children_by_id(type_: pa.DataType) -> dict[int | None, int]:
    """Child index by field id; a field without an id, looked up as None, is never found."""
    found: dict[int | None, int] = {}
    for i in range(type_.num_fields):
        fid = field_id(type_.field(i))
        if fid is not None:
            found[fid] = i
    return found


def _find_path(schema: pa.Schema, fid: int) -> list[int] | None:
    """Indices leading to a field id through structs (the only nesting a key or a filter
    can reach into), or None."""
    def visit(type_: pa.DataType, prefix: list[int]) -> list[int] | None:
        for i in range(type_.num_fields):
            child = type_.field(i)
            if field_id(child) == fid:
                return [*prefix, i]
            if pa.types.is_struct(child.type):
                found = visit(child.type, [*prefix, i])
                if found is not None:
                    return found
        return None
    return visit(pa.struct(list(schema)), [])


def _select(file_type: pa.DataType, target_type: pa.DataType) -> Literal[True] | Selection:
    """Which parts of a file column a target type needs (matched by id)."""
    if pa.types.is_struct(file_type) and pa.types.is_struct(target_type):
        by_id = _children_by_id(file_type)
        wanted: Selection = {}
        for i in range(target_type.num_fields):
            target_child = target_type.field(i)
            index = by_id.get(field_id(target_child))
            if index is not None:
                wanted[index] = _select(file_type.field(index).type, target_child.type)
        # A struct none of whose wanted fields exist still needs its validity: read one leaf.
        if wanted:
            return wanted
        return {0: True} if file_type.num_fields else True
    if pa.types.is_list(file_type) and pa.types.is_list(target_type):
        return {0: _select(file_type.value_type, target_type.value_type)}
    if pa.types.is_map(file_type) and pa.types.is_map(target_type):
        # Parquet reads a map with pruned keys as a list, so keys are always read whole.
        return {0: {0: True, 1: _select(file_type.item_type, target_type.item_type)}}
    return True


def _merge(a: Literal[True] | Selection, b: Literal[True] | Selection,
           ) -> Literal[True] | Selection:
    if a is True or b is True:
        return True
    merged = dict(a)
    for key, value in b.items():
        merged[key] = _merge(merged[key], value) if key in merged else value
    return merged


# -- projection ----------------------------------------------------------------------------


def _constant(field: pa.Field, default: pa.Scalar | None, n: int) -> pa.Array:
    if default is None:
        return pa.nulls(n, field.type)
    return constant_array(default, n)


def _project(array: pa.Array, target: pa.Field,
             defaults: dict[int | None, pa.Scalar]) -> pa.Array:
    """`array` (a file column, possibly pruned) in the shape and types of `target`."""
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    type_, target_type = array.type, target.type
    if type_.equals(target_type):
        return array
    if pa.types.is_struct(target_type):
        if not pa.types.is_struct(type_):
            raise _incompatible(type_, target)
        by_id = _children_by_id(type_)
        children = []
        for i in range(target_type.num_fields):
            child = target_type.field(i)
            fid = field_id(child)
            index = by_id.get(fid)
            children.append(_constant(child, defaults.get(fid), len(array)) if index is None
                            else _project(array.field(index), child, defaults))
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target_type), mask=mask)
    if pa.types.is_list(target_type):
        if not (pa.types.is_list(type_) or pa.types.is_large_list(type_)):
            raise _incompatible(type_, target)
        values = _project(array.values, target_type.value_field, defaults)
        mask = array.is_null() if array.null_count else None
        offsets = array.offsets.cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, values, type=target_type, mask=mask)
    if pa.types.is_map(target_type):
        if not pa.types.is_map(type_):
            raise _incompatible(type_, target)
        keys = _project(array.keys, target_type.key_field, defaults)
        items = _project(array.items, target_type.item_field, defaults)
        mask = array.is_null() if array.null_count else None
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target_type, mask=mask)
    try:
        return array.cast(target_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise UnreadableFileError(f"column {target.name!r}: cannot read {type_} as "
                             f"{target_type} ({error})") from error


def _incompatible(type_: pa.DataType, target: pa.Field) -> UnreadableFileError:
    return UnreadableFileError(f"column {target.name!r}: file has {type_}, table has {target.type}")


def _defaults(schema: Schema) -> dict[int | None, pa.Scalar]:
    """Arrow scalars of every field's `initial-default`: the value of a column added after
    a file was written, for the rows of that file."""
    found: dict[int | None, pa.Scalar] = {}

    def visit(fields: tuple[NestedField, ...]) -> None:
        for f in fields:
            if f.initial_default is not None and isinstance(f.type, PrimitiveType):
                value = to_internal(f.initial_default, f.type)
                found[f.field_id] = pa.scalar(to_arrow_value(value, f.type),
                                              to_arrow_type(f.type))
            visit(child_fields(f.type))

    visit(schema.fields)
    return found


@dataclass
class _Extra:
    """A column read only for equality deletes or the residual, dropped before output."""

    field_id: int
    name: str
    path: list[int] | None  # indices through structs in the file schema; None: not in file
    type: pa.DataType | None  # cast to this (the filter's type), or keep the file's type


class FileProjection:
    """How one file's columns become the projection's: what to read and how to reshape it.

    Built once per task; `project` then runs per batch with no per-row Python work.
    """

    def __init__(self, source: FileSource, projection: Schema,
                 extra: dict[int, pa.DataType | None] | None = None,
                 names: dict[int, str] | None = None) -> None:
        self.target = to_arrow_schema(projection)
        file_schema = source.schema
        # Files without field ids are matched by name: against the projection, and for
        # extra columns against `names` (id -> column name).
        self._by_name: pa.Schema | None = None
        if not has_field_ids(file_schema):
            self._by_name = pa.schema(list(self.target) + [
                pa.field(name, pa.null(), metadata={FIELD_ID_KEY: str(fid).encode()})
                for fid, name in (names or {}).items()])
            file_schema = with_ids_by_name(file_schema, self._by_name)
            if len(file_schema) and not has_field_ids(file_schema):
                # Not one column matched: every row would read as nulls. Iceberg Java
                # needs ids or a name mapping here; a file with neither is not this table's.
                raise UnreadableFileError(
                    f"{source.path}: the file has no field ids and none of its columns "
                    f"({', '.join(source.schema.names[:5])}) is a column of the table")
        self.file_schema = file_schema
        self.defaults = _defaults(projection)
        by_id = _children_by_id(pa.struct(list(file_schema)))
        self.sources: list[int | None] = []
        selection: Selection = {}
        for field in self.target:
            index = by_id.get(field_id(field))
            self.sources.append(index)
            if index is not None:
                wanted = _select(file_schema.field(index).type, field.type)
                selection[index] = _merge(selection.get(index, {}), wanted)
        self.extras: list[_Extra] = []
        for fid, type_ in (extra or {}).items():
            path = _find_path(file_schema, fid)
            self.extras.append(_Extra(fid, f"__meltwater_{fid}", path, type_))
            if path is not None:
                wanted = True
                for index in reversed(path[1:]):
                    wanted = {index: wanted}
                selection[path[0]] = _merge(selection.get(path[0], {}), wanted)
        self.selection = selection

    def extra_type(self, extra: _Extra) -> pa.DataType:
        """The Arrow type an extra (filter-only) column is read as: the one asked for, else the
        file's own."""
        if extra.type is not None:
            return extra.type
        if extra.path is None:
            return pa.null()
        type_ = pa.struct(list(self.file_schema))
        for index in extra.path:
            type_ = type_.field(index).type
        return type_

    def project(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A file batch (of the selected columns) as projection columns plus extras."""
        n = batch.num_rows
        if self._by_name is not None:
            batch = batch.cast(with_ids_by_name(batch.schema, self._by_name))
        by_id = {field_id(f): i for i, f in enumerate(batch.schema)}
        arrays = []
        for field, index in zip(self.target, self.sources, strict=True):
            fid = field_id(field)
            if index is None or fid not in by_id:
                arrays.append(_constant(field, self.defaults.get(fid), n))
            else:
                arrays.append(_project(batch.column(by_id[fid]), field, self.defaults))
        fields = list(self.target)
        for extra in self.extras:
            array = self._extra_array(batch, by_id, extra)
            arrays.append(array)
            fields.append(pa.field(extra.name, array.type))
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))

    def _extra_array(self, batch: pa.RecordBatch, by_id: dict[int | None, int],
                     extra: _Extra) -> pa.Array:
        if extra.path is None:
            return pa.nulls(batch.num_rows, extra.type or pa.null())
        top = self.file_schema.field(extra.path[0])
        array = batch.column(by_id[field_id(top)])
        type_ = top.type
        for index in extra.path[1:]:
            # The batch's struct may be pruned: find the child again by id.
            child_id = field_id(type_.field(index))
            type_ = type_.field(index).type
            array = pc.struct_field(array, [_children_by_id(array.type)[child_id]])
        if isinstance(array, pa.ExtensionArray):
            array = array.storage
        return array if extra.type is None else array.cast(extra.type)


