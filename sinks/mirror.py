"""The database mirror: a SQL table kept equal to an Iceberg table, by key, exactly once.

    mirror = Mirror("postgresql://app@db:5432/analytics", table="orders",
                    source="/warehouse/db/orders")          # keys: the identifier fields
    for batch_id, batch in enumerate(batches):              # e.g. one batch per commit
        mirror.apply(batch_id, batch)                       # BatchResult(upserted=..., ...)
    mirror.reached()                                        # Position(batch_id, snapshot_id, ...)

Opening a mirror reads the Iceberg table's current schema (`source` is a table location,
or a `Schema`), creates the mirror table if missing (columns typed by `sql_schema`, the key
columns as primary key) plus the `meltwater_ledger`, adds columns the table gained since
and widens columns Iceberg widened (int -> long, float -> double, decimal precision). Key
columns are `key_columns` if given, else the table's identifier fields.

`apply(batch_id, changes)` runs in one transaction: if the ledger holds the batch id, it
is skipped (Spark replays the last batch after a crash); otherwise the batch's net effect
per key (`net_effect`) is applied, deletes then upserts, and the ledger row is written.

Batch columns are matched to mirror columns by Iceberg field id when they carry one
(`meltwater.stream` batches do; a renamed column still lands in its column), else by
name (Spark DataFrames). A mirror column the batch lacks is written as null: the rows of
an older schema did not have it. Change metadata and row lineage columns are not mirrored.
A batch column the mirror does not know makes it re-read the table's schema once (a column
added since it opened is then added); a field id the table no longer has is a dropped
column and is left out; an unknown name without a field id is an error.

Schema changes the mirror does not follow: a column renamed in Iceberg after the mirror
table was created appears as a new column (the old one keeps its values and is no longer
written; drop it by hand), and other type changes are left to the operator.

The position a batch records is its last commit's. A Spark micro-batch that ends inside a
commit (read limits split a commit bigger than the limit) records that commit, though
the rest of it comes in the next batch; `meltwater.stream.offsets` explains the splitting.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pyarrow as pa

from meltwater.planner.metadata import load_table
from meltwater.planner.types import Schema
from meltwater.sinks.base import BatchResult, ChangeInput, Position, as_table, register_sink
from meltwater.sinks.database import POSTGRES_SCHEMES, SQLITE_SCHEMES, connect
from meltwater.sinks.errors import (
    BatchMismatch,
    InvalidChanges,
    InvalidKeyColumn,
    MirrorTableMismatch,
    MissingKeyColumns,
)
from meltwater.sinks.ledger import Ledger, LedgerEntry
from meltwater.sinks.net_effect import net_effect
from meltwater.sinks.sql_schema import (
    Column,
    add_column_sql,
    check_key_type,
    create_table_sql,
    mirror_columns,
    widen_sql,
)
from meltwater.sinks.sql_values import conform
from meltwater.stream.arrow_schema import FIELD_ID_KEY, to_arrow_type
from meltwater.stream.change_schema import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SEQUENCE_NUMBER,
    COMMIT_SNAPSHOT_ID,
    LINEAGE_COLUMNS,
    METADATA_COLUMNS,
)

_KEPT_METADATA = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_SEQUENCE_NUMBER)
_NOT_MIRRORED = frozenset(METADATA_COLUMNS) | frozenset(LINEAGE_COLUMNS)


class Mirror:
    """A SQL table mirroring an Iceberg table by key (see the module doc)."""

    def __init__(self, url: str, *, table: str, source: str | Schema,
                 key_columns: Sequence[str] | None = None, pipeline: str | None = None) -> None:
        """Open (and create if needed) mirror table `table` in the database at `url`.

        `pipeline` names this stream of batches in the ledger (default: `table`); give each
        stream writing one database its own, and a new one when a stream restarts from a
        new checkpoint, since its batch ids start again from 0.
        """
        self.table = table
        self.pipeline = pipeline or table
        self._source = source
        self._key_names = list(key_columns) if key_columns else None
        self._dropped_ids: set[int] = set()
        self._db = connect(url)
        self.name = self._db.dialect
        try:
            self._ledger = Ledger(self._db, self.pipeline)
            self._open(self._current_schema())
        except BaseException:
            self._db.close()
            raise

    # -- the Sink protocol ---------------------------------------------------------------

    def apply(self, batch_id: int, changes: ChangeInput, *, snapshot_id: int | None = None,
              sequence_number: int | None = None) -> BatchResult:
        """Apply one batch of change rows exactly once (see the module doc).

        The ledger records the commit the batch reaches: `snapshot_id` / `sequence_number`
        when the caller knows it (the end of a range it read, which an empty batch cannot
        tell), else the batch's last commit, else (empty) the previous batch's.
        """
        batch = as_table(changes)
        what = f"batch {batch_id} of pipeline {self.pipeline!r}"
        effect = net_effect(self._prepare(batch, what), self.keys, what)
        if snapshot_id is None:
            snapshot_id, sequence_number = effect.snapshot_id, effect.sequence_number
        with self._db.transaction():
            done = self._ledger.find(batch_id)
            if done is not None:
                _check_replay(done, batch.num_rows, snapshot_id, what)
                return BatchResult(batch_id, True, batch.num_rows, 0, 0,
                                   _position(self._ledger.last()))
            deleted = upserted = 0
            if effect.absent.num_rows:
                deleted = self._db.delete(self.table, self.key_columns, effect.absent)
            if effect.present.num_rows:
                upserted = self._db.upsert(self.table, self.columns, self.keys,
                                           effect.present)
            if snapshot_id is None:  # an empty batch: the position does not move
                previous = self._ledger.last()
                if previous is not None:
                    snapshot_id, sequence_number = previous.snapshot_id, previous.sequence_number
            entry = LedgerEntry(self.pipeline, batch_id, snapshot_id, sequence_number,
                                batch.num_rows, upserted, deleted,
                                dt.datetime.now(dt.timezone.utc))
            self._ledger.record(entry)
        return BatchResult(batch_id, False, batch.num_rows, upserted, deleted, _position(entry))

    def reached(self) -> Position | None:
        """The pipeline's last applied batch and the newest commit applied, if any."""
        return _position(self._ledger.last())

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------

    @property
    def _source_name(self) -> str:
        if isinstance(self._source, Schema):
            return f"the given schema (id {self._source.schema_id})"
        return f"table {self._source}"

    def _current_schema(self) -> Schema:
        if isinstance(self._source, Schema):
            return self._source
        return load_table(self._source).metadata.schema

    def _open(self, schema: Schema) -> None:
        """Take `schema` as the mirror's: create or extend the table, ensure the ledger."""
        columns = mirror_columns(schema, self._db.dialect)
        keys = self._keys(schema, columns)
        with self._db.transaction():
            existing = self._db.table_columns(self.table)
            if existing is None:
                self._db.execute(create_table_sql(self.table, columns, keys))
            else:
                primary = self._db.primary_key(self.table)
                if primary != set(keys):
                    raise MirrorTableMismatch(
                        f"mirror table {self.table} has primary key "
                        f"({', '.join(sorted(primary)) or 'none'}), not the key columns "
                        f"({', '.join(keys)}); drop it or choose another table name")
                for column in columns:
                    if column.name not in existing:
                        self._db.execute(add_column_sql(self.table, column))
                        continue
                    widen = widen_sql(self.table, column, existing[column.name])
                    if widen is not None:
                        self._db.execute(widen)
            self._ledger.ensure()
        self.schema = schema
        self.columns = columns
        self.keys = keys
        by_name = {c.name: c for c in columns}
        self.key_columns = [by_name[k] for k in keys]
        self._by_id = {c.field_id: c for c in columns}
        self._by_name = by_name

    def _keys(self, schema: Schema, columns: list[Column]) -> list[str]:
        names = self._key_names or [schema.column_name(fid)
                                    for fid in schema.identifier_field_ids]
        if not names:
            raise MissingKeyColumns(
                f"{self._source_name} has no identifier fields and no key columns were given: "
                "pass key_columns=[...] (or set the table's identifier fields, e.g. "
                "ALTER TABLE ... SET IDENTIFIER FIELDS id)")
        by_name = {c.name: c for c in columns}
        for name in names:
            if name not in by_name:
                raise InvalidKeyColumn(
                    f"key column {name!r} is not a top-level column of {self._source_name} "
                    f"(columns: {', '.join(by_name)})")
            check_key_type(by_name[name], self._source_name)
        return list(names)

    # -- batches -------------------------------------------------------------------------

    def _prepare(self, batch: pa.Table, what: str) -> pa.Table:
        """The batch in the mirror's columns and types, plus the change metadata it needs."""
        mapped, new_ids, unknown = self._match(batch)
        if (new_ids or unknown) and not isinstance(self._source, Schema):
            self._open(self._current_schema())  # columns added since the mirror opened
            mapped, new_ids, unknown = self._match(batch)
        self._dropped_ids.update(new_ids)  # ids the table no longer has: dropped columns
        if unknown:
            raise InvalidChanges(f"{what} has column(s) {', '.join(unknown)} that "
                                 f"{self._source_name} does not have")
        arrays = []
        for column in self.columns:
            array = mapped.get(column.name)
            if array is None:
                if column.name in self.keys:
                    raise InvalidChanges(f"{what} lacks key column {column.name!r}")
                array = pa.nulls(batch.num_rows, to_arrow_type(column.type))
            try:
                arrays.append(conform(array, column))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise InvalidChanges(f"{what}: column {column.name!r} of type {array.type} "
                                     f"does not convert to {column.type}: {e}") from None
        kept = [name for name in _KEPT_METADATA if name in batch.column_names]
        return pa.table(arrays + [batch.column(name) for name in kept],
                        names=[c.name for c in self.columns] + kept)

    def _match(self, batch: pa.Table) -> tuple[dict[str, pa.ChunkedArray], set[int], list[str]]:
        """Batch columns by mirror column name; field ids and names the mirror lacks."""
        mapped: dict[str, pa.ChunkedArray] = {}
        new_ids: set[int] = set()
        unknown: list[str] = []
        for index, field in enumerate(batch.schema):
            if field.name in _NOT_MIRRORED:
                continue
            raw_id = (field.metadata or {}).get(FIELD_ID_KEY)
            if raw_id is not None:
                field_id = int(raw_id)
                column = self._by_id.get(field_id)
                if column is None:
                    if field_id not in self._dropped_ids:
                        new_ids.add(field_id)
                    continue
            else:
                column = self._by_name.get(field.name)
                if column is None:
                    unknown.append(field.name)
                    continue
            if column.name in mapped:
                raise InvalidChanges(f"batch columns {field.name!r} and another both map to "
                                     f"mirror column {column.name!r}")
            mapped[column.name] = batch.column(index)
        return mapped, new_ids, unknown


def _check_replay(done: LedgerEntry, rows: int, snapshot_id: int | None, what: str) -> None:
    """A replay must be the batch the ledger holds: same rows, up to the same commit."""
    if done.row_count != rows or (snapshot_id is not None and snapshot_id != done.snapshot_id):
        raise BatchMismatch(
            f"{what} was applied with {done.row_count} change rows up to snapshot "
            f"{done.snapshot_id}, and now arrives with {rows} rows up to snapshot "
            f"{snapshot_id}: the stream's checkpoint and the ledger disagree (a stream "
            "restarted from a new checkpoint needs a new pipeline name)")


def _position(entry: LedgerEntry | None) -> Position | None:
    if entry is None:
        return None
    return Position(entry.batch_id, entry.snapshot_id, entry.sequence_number, entry.applied_at)


for _scheme in SQLITE_SCHEMES + POSTGRES_SCHEMES:
    register_sink(_scheme, Mirror)
