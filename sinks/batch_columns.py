"""A change batch's columns by Iceberg field id, as a mirror writes them into SQL columns.

A batch column is matched to a field of the schema the batch is in by the field id it
carries (`meltwater.stream` batches do; so do the service's, see
`meltwater.sinks.mirror_stream`), else by name: in the batch's schema, else the table's
current one. A name those two give different ids, as after a drop and re-add, is refused
rather than guessed. A field the batch carries but its schema lacks (added later, or
dropped) is left out; change metadata and row lineage columns are not matched at all (they
are not mirrored).
"""

from __future__ import annotations

import pyarrow as pa

from meltwater.planner.spec.types import Schema
from meltwater.sinks.errors import InvalidChangesError, SchemaChangeNotMirroredError
from meltwater.stream.engine.changes.change_schema import LINEAGE_COLUMNS, METADATA_COLUMNS
from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY

NOT_MIRRORED = frozenset(METADATA_COLUMNS) | frozenset(LINEAGE_COLUMNS)


def columns_by_field_id(batch: pa.Table, schema: Schema, current: Schema, source_name: str,
                        what: str) -> dict[int, pa.ChunkedArray]:
    """The batch's columns by the field id they stand for in `schema`, the schema the batch
    is in (`current`: the table's current one, for a column with neither id nor a name in
    `schema`); `source_name` and `what` name the table and the batch in errors."""
    mapped: dict[int, pa.ChunkedArray] = {}
    unknown: list[str] = []
    top_level = {f.field_id for f in schema.fields}
    for index, field in enumerate(batch.schema):
        if field.name in NOT_MIRRORED:
            continue
        raw_id = (field.metadata or {}).get(FIELD_ID_KEY)
        field_id = (int(raw_id) if raw_id is not None
                    else _id_by_name(field.name, schema, current, source_name))
        if field_id is None:
            unknown.append(field.name)
            continue
        if field_id not in top_level:
            continue  # added after the batch's commit, or dropped: not in its rows
        if field_id in mapped:
            raise InvalidChangesError(f"{what}: batch columns {field.name!r} and another both "
                                      f"map to field id {field_id}")
        mapped[field_id] = batch.column(index)
    if unknown:
        raise InvalidChangesError(f"{what} has column(s) {', '.join(unknown)} that "
                                  f"{source_name} does not have")
    return mapped


def _id_by_name(name: str, schema: Schema, current: Schema, source_name: str) -> int | None:
    """A batch column without a field id: its name in the batch's schema, else in the
    table's current one; refused when the two give it different ids."""
    ids = {fid for fid in (_top_level_id(schema, name), _top_level_id(current, name))
           if fid is not None}
    if len(ids) > 1:
        raise SchemaChangeNotMirroredError(
            f"batch column {name!r} has no field id, and the name is field "
            f"{' and '.join(map(str, sorted(ids)))} of {source_name} (dropped and "
            "added again): give the batch field ids (meltwater.stream batches, or "
            "ForeachBatchWriter(field_ids=...))")
    return ids.pop() if ids else None


def _top_level_id(schema: Schema, name: str) -> int | None:
    for field in schema.fields:
        if field.name == name:
            return field.field_id
    return None
