"""How a mirror table follows an Iceberg schema by field id: the DDL from one layout to another.

The mirror's columns are recorded by field id (`column_record`). Given that record and the
columns a batch's schema wants (`sql_schema.mirror_columns`), `plan_schema_change` returns
the statements, in this order:

1. drops: a recorded field id the schema no longer has was dropped in Iceberg, and its
   column is dropped (with `keep_dropped`, kept and no longer written: the caller warns);
2. renames: a recorded id under another name is renamed (through temporary names when
   two columns swap or shift names, so no statement meets a name still in use);
3. type changes: Iceberg's promotions (int -> long, float -> double, decimal precision)
   alter the column where the declared SQL type changes (PostgreSQL; SQLite declares one
   storage class for both sides); a batch of an older, narrower schema keeps the wider
   column; any other change of a recorded column's SQL type is refused;
4. adds: an id the record lacks is a new column, also when it reuses the name of a dropped
   one (the old column went in step 1, so the re-added column starts empty, as in Iceberg).

A name the plan needs that a column the mirror does not own holds (a kept dropped column,
or someone's own column) is refused, never reused: the error names the column.

`bootstrap` records a table that older code created without a record, matching its column
names against a schema once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from meltwater.sinks.column_record import RecordedColumn
from meltwater.sinks.errors import SchemaChangeNotMirroredError
from meltwater.sinks.sql_schema import (
    Column,
    add_column_sql,
    drop_column_sql,
    is_promotion,
    rename_column_sql,
    retype_sql,
    widen_sql,
)

_TEMPORARY = "_meltwater_renaming_{}"


@dataclass(frozen=True)
class Step:
    """One DDL statement and the column it concerns (for the error if the database refuses)."""

    sql: str
    action: str  # drop, rename, retype, add
    column: str


@dataclass
class SchemaPlan:
    """The DDL to run, the record afterwards, and the dropped columns kept (to warn of)."""

    steps: list[Step] = field(default_factory=list)
    record: list[RecordedColumn] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def plan_schema_change(table: str, recorded: dict[int, RecordedColumn],
                       existing: Sequence[str], target: Sequence[Column], *,
                       key_ids: Sequence[int] = (), keep_dropped: bool = False) -> SchemaPlan:
    """The DDL taking the mirror table from `recorded` to `target` (see the module doc).

    `existing` are the table's column names as the database has them now.
    """
    plan = SchemaPlan(record=[RecordedColumn(c.field_id, c.name, c.sql_type) for c in target])
    wanted = {c.field_id: c for c in target}
    names = set(existing)
    for fid in key_ids:
        if fid in recorded and fid not in wanted:
            raise SchemaChangeNotMirroredError(
                f"mirror table {table}: key column {recorded[fid].name!r} (field id {fid}) "
                "was dropped from the Iceberg table; a mirror by key cannot follow")

    for fid, dropped in sorted(recorded.items()):
        if fid in wanted:
            continue
        if keep_dropped:
            plan.kept.append(dropped.name)
        else:
            plan.steps.append(Step(drop_column_sql(table, dropped.name), "drop", dropped.name))
            names.discard(dropped.name)

    owned = {recorded[fid].name for fid in wanted if fid in recorded}
    renames = [(recorded[c.field_id].name, c) for c in target
               if c.field_id in recorded and recorded[c.field_id].name != c.name]
    leaving = {old for old, _ in renames}
    for _, column in renames:
        if column.name in names and column.name not in owned:
            _taken(table, column, "renamed to")
    if any(c.name in leaving for _, c in renames):  # names shift among columns: two steps
        for old_name, column in renames:
            temporary = _TEMPORARY.format(column.field_id)
            if temporary in names:
                _taken(table, Column(temporary, column.field_id, column.type, ""), "renamed via")
            plan.steps.append(Step(rename_column_sql(table, old_name, temporary), "rename",
                                   old_name))
        renames = [(_TEMPORARY.format(c.field_id), c) for _, c in renames]
    for old_name, column in renames:
        plan.steps.append(Step(rename_column_sql(table, old_name, column.name), "rename",
                               old_name))
    names = (names - leaving) | {c.name for _, c in renames}

    for index, column in enumerate(target):
        old = recorded.get(column.field_id)
        if old is None or old.sql_type == column.sql_type:
            continue
        if is_promotion(column.sql_type, old.sql_type):  # an older, narrower schema's batch
            plan.record[index] = RecordedColumn(column.field_id, column.name, old.sql_type)
            continue
        if not is_promotion(old.sql_type, column.sql_type):
            raise SchemaChangeNotMirroredError(
                f"mirror table {table}: column {column.name!r} (field id {column.field_id}) "
                f"changes type from {old.sql_type} to {column.sql_type}, which is not a "
                "promotion the mirror can apply; recreate the mirror table")
        plan.steps.append(Step(retype_sql(table, column), "retype", column.name))

    for column in target:
        if column.field_id in recorded:
            continue
        if column.name in names:
            _taken(table, column, "added as")
        plan.steps.append(Step(add_column_sql(table, column), "add", column.name))
        names.add(column.name)
    return plan


def bootstrap(table: str, existing: dict[str, str],
              schema_columns: Sequence[Column]) -> tuple[list[RecordedColumn], list[Step]]:
    """The record of a table made without one, by matching its column names against
    `schema_columns`, and the widenings its declared types still need."""
    record, steps = [], []
    for column in schema_columns:
        declared = existing.get(column.name)
        if declared is None:
            continue  # added by the first batch's schema change
        record.append(RecordedColumn(column.field_id, column.name, column.sql_type))
        widen = widen_sql(table, column, declared)
        if widen is not None:
            steps.append(Step(widen, "retype", column.name))
    return record, steps


def _taken(table: str, column: Column, how: str) -> None:
    raise SchemaChangeNotMirroredError(
        f"mirror table {table}: field id {column.field_id} is to be {how} column "
        f"{column.name!r}, but a column the mirror does not own has that name (a dropped "
        "column kept by keep-dropped-columns, or one added by hand): rename or drop it")
