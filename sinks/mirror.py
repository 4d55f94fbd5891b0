"""The database mirror: a SQL table kept equal to an Iceberg table, by key, exactly once.

    mirror = Mirror("postgresql://app@db:5432/analytics", table="orders",
                    source="/warehouse/db/orders")          # keys: the identifier fields
    for batch_id, batch in enumerate(batches):              # e.g. one batch per commit
        mirror.apply(batch_id, batch)                       # BatchResult(upserted=..., ...)
    mirror.reached()                                        # Position(batch_id, snapshot_id, ...)

Opening a mirror reads the Iceberg table's current schema (`source` is a table location,
or a `Schema`), checks every column maps to SQL (`sql_schema`) and the key, and creates the
mirror table if missing (the key columns as primary key) plus `meltwater_ledger` and
`meltwater_columns`. Key columns are `key_columns` if given, else the table's identifier
fields; they are held by field id, so a renamed key column stays the key.

`apply(batch_id, changes)` runs in one transaction: if the ledger holds the batch id, it
is skipped (Spark replays the last batch after a crash); otherwise the mirror table is
brought to the batch's schema, the batch's net effect per key (`net_effect`) is applied,
deletes then upserts, and the ledger row is written.

**Schema changes, by field id.** A batch's schema is that of the commit it reaches (the
`snapshot_id` given, else its last commit's `_commit_snapshot_id`; a `Schema` source is
always itself). `meltwater_columns` (`column_record`) says which SQL column holds which
field id; `schema_sync` plans the DDL from that record to the batch's schema: a rename
renames the column, a drop drops it (`keep_dropped_columns=True` keeps it, no longer
written, with a warning), a new field id is a new column even under an old name (the old
column goes first), and Iceberg's widenings alter the type (PostgreSQL; SQLite's declared
storage classes need none). The DDL and the new record commit in the transaction of the
batch that first carries the schema, with its rows and ledger entry (both databases have
transactional DDL), so a crash leaves the old layout or the new one whole. A change the
database cannot express, or a name held by a column the mirror does not own, fails the
batch with `SchemaChangeNotMirroredError` naming the column; nothing is ever left silently stale.
A table created by older code has no record: the first open records it by matching its
column names against the table's current schema (columns it cannot match are left alone
and named in a warning).

Batch columns are matched to the schema's fields by the Iceberg field id they carry, else
by name (`batch_columns`); a field the batch carries but its schema lacks (added later, or
dropped) is left out. A field of the batch's schema the batch lacks is refused if the table
still has it (a stream started before the column was added would otherwise lose its
values: restart the stream), and dropped from the mirror now if the table dropped it
since. With a `Schema` source, a missing column is written as null (the rows of an older
schema did not have it). Change metadata and row lineage columns are not mirrored.

The position a batch records is the commit it reaches: `snapshot_id` when the caller
gives it, else its last commit's (an empty batch carries the previous position forward).
A caller that knows the stream offset the batch ends at (`end`: the service's mirrors read
it from the query's checkpoint) gets the truest position: the newest snapshot the mirror
then holds whole (`StreamOffset.held_snapshot`), which moves on over commits without
changes too, and is the parent of a commit a Spark micro-batch ends inside (read limits
split a commit bigger than the limit; `meltwater.stream.watch.stream_offsets` explains the
splitting): without `end`, such a batch records that commit, though the rest of it comes in
the next batch. """

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

import pyarrow as pa

from meltwater.planner.spec.types import Schema
from meltwater.planner.table.table_source import TableSource
from meltwater.sinks.base import BatchResult, ChangeInput, Position, as_table, register_sink
from meltwater.sinks.batch_columns import columns_by_field_id
from meltwater.sinks.column_record import ColumnRecord, RecordedColumn
from meltwater.sinks.database import POSTGRES_SCHEMES, SQLITE_SCHEMES, connect
from meltwater.sinks.errors import (
    InvalidChangesError,
    InvalidKeyColumnError,
    MirrorTableMismatchError,
    MissingKeyColumnsError,
    SchemaChangeNotMirroredError,
    SinkError,
    SinkUnavailableError,
)
from meltwater.sinks.ledger import Ledger, LedgerEntry
from meltwater.sinks.net_effect import net_effect
from meltwater.sinks.schema_sync import Step, bootstrap, plan_schema_change
from meltwater.sinks.source_table import (
    NO_COMMIT,
    AppliedBatch,
    BatchRecord,
    CommitPoint,
    SourceTable,
    batch_reach,
    check_replay,
    key_column_names,
    last_commit,
    stated_end,
)
from meltwater.sinks.sql_schema import (
    Column,
    check_key_type,
    create_table_sql,
    mirror_columns,
)
from meltwater.sinks.sql_values import conform
from meltwater.stream.engine.changes.change_schema import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SEQUENCE_NUMBER,
    COMMIT_SNAPSHOT_ID,
)
from meltwater.stream.engine.decode.arrow_schema import to_arrow_type
from meltwater.stream.watch.stream_offsets import StreamOffset

log = logging.getLogger(__name__)

_KEPT_METADATA = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_SEQUENCE_NUMBER)


class Mirror:
    """A SQL table mirroring an Iceberg table by key (see the module doc)."""

    def __init__(self, url: str, *, table: str, source: str | TableSource | Schema,
                 key_columns: Sequence[str] | None = None, pipeline: str | None = None,
                 keep_dropped_columns: bool = False, dry_run: bool = False,
                 key_hint: str = "pass key_columns=[...]") -> None:
        """Open (and create if needed) mirror table `table` in the database at `url`.

        `pipeline` names this stream of batches in the ledger (default: `table`); give each
        stream writing one database its own, and a new one when a stream restarts from a
        new checkpoint, since its batch ids start again from 0. `keep_dropped_columns`
        keeps the SQL column of a column dropped in Iceberg (see the module doc).
        `dry_run` checks all of that and changes nothing (`sinks.database.connect`).
        `key_hint` is how the caller's user gives key columns, for the error that asks for
        them (the service's configuration says `key = [...]`).
        """
        self.table = table
        self.pipeline = pipeline or table
        self._source = source
        self._key_names = list(key_columns) if key_columns else None
        self._key_hint = key_hint
        self.keep_dropped_columns = keep_dropped_columns
        self._table = None if isinstance(source, Schema) else SourceTable(source)
        self._db = connect(url, dry_run=dry_run)
        self.name: str = self._db.dialect
        try:
            self._ledger = Ledger(self._db, self.pipeline)
            self._record = ColumnRecord(self._db, table)
            self._open(self._current_schema())
        except BaseException:
            self._db.close()
            raise

    # -- the Sink protocol ---------------------------------------------------------------

    def apply(self, batch_id: int, changes: ChangeInput, *, snapshot_id: int | None = None,
              sequence_number: int | None = None,
              end: StreamOffset | None = None) -> BatchResult:
        """Apply one batch of change rows exactly once (see the module doc).

        The ledger records the commit the batch reaches: `snapshot_id` / `sequence_number`
        when the caller knows it (the end of a range it read, which an empty batch cannot
        tell), else the batch's last commit, else (empty) the previous batch's. `end`, the
        stream offset the batch ends at, replaces `snapshot_id` and `sequence_number`: the
        rows are in the schema of the commit it reaches, and the ledger records the newest
        snapshot the mirror then holds whole (see the module doc).
        """
        batch = as_table(changes)
        what = f"batch {batch_id} of pipeline {self.pipeline!r}"
        # the commit whose schema the rows are in: `end`'s (not the one held whole there),
        # the one given, else the rows' last
        reach = snapshot_id if end is None else end.snapshot_id
        with self._db.transaction():
            stated = stated_end(end, snapshot_id, sequence_number, self._table)
            done = self._ledger.find(batch_id)
            if done is not None:
                check_replay(BatchRecord.LEDGER,
                             AppliedBatch(done.batch_id, done.row_count, done.snapshot_id),
                             AppliedBatch(batch_id, batch.num_rows,
                                          None if stated is None else stated.snapshot_id),
                             what)
                return BatchResult(batch_id, True, batch.num_rows, 0, 0,
                                   _position(self._ledger.last()))
            last = last_commit(batch) if reach is None else NO_COMMIT
            deleted = upserted = 0
            schema = self._batch_schema(batch, reach if reach is not None else last.snapshot_id)
            if schema is not None:
                prepared, keys = self._prepare(batch, schema, what)
                effect = net_effect(prepared, [k.name for k in keys], what)
                if effect.absent.num_rows:
                    deleted = self._db.delete(self.table, keys, effect.absent)
                if effect.present.num_rows:
                    upserted = self._db.upsert(self.table, self.columns,
                                               [k.name for k in keys], effect.present)
            reached = batch_reach(batch, stated, self._previous, last=last)
            entry = LedgerEntry(self.pipeline, batch_id, reached.snapshot_id,
                                reached.sequence_number, batch.num_rows, upserted, deleted,
                                dt.datetime.now(dt.timezone.utc))
            self._ledger.record(entry)
        return BatchResult(batch_id, False, batch.num_rows, upserted, deleted, _position(entry))

    def reached(self) -> Position | None:
        """The pipeline's last applied batch and the newest commit applied, if any."""
        return _position(self._ledger.last())

    def close(self) -> None:
        """Close the database connection; the mirror cannot be used afterwards."""
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
        """The table's current schema, read now (a `Schema` source: itself)."""
        if self._table is None:
            assert isinstance(self._source, Schema)
            return self._source
        return self._table.read().schema

    def _latest_schema(self) -> Schema:
        """The table's current schema as last read (read once if never)."""
        if self._table is None:
            assert isinstance(self._source, Schema)
            return self._source
        return self._table.metadata.schema

    def _previous(self) -> CommitPoint | None:
        """The commit the ledger's last entry holds (an empty batch carries it forward)."""
        previous = self._ledger.last()
        return None if previous is None else CommitPoint(previous.snapshot_id,
                                                         previous.sequence_number)

    def _open(self, schema: Schema) -> None:
        """Check the schema maps to SQL, resolve the key, create or record the table."""
        columns = mirror_columns(schema, self._db.dialect)
        self._key_ids = self._keys(schema, columns)
        with self._db.setup_transaction():
            self._ledger.ensure()
            self._record.ensure()
            existing = self._db.table_columns(self.table)
            recorded = self._record.read()
            key_names = [schema.column_name(fid) for fid in self._key_ids]
            if existing is None:
                self._db.execute(create_table_sql(self.table, columns, key_names))
                recorded = {c.field_id: RecordedColumn(c.field_id, c.name, c.sql_type)
                            for c in columns}
                self._record.write(list(recorded.values()))
            elif not recorded:
                record, steps = bootstrap(self.table, existing, columns)
                self._run(steps)
                self._record.write(record)
                recorded = {r.field_id: r for r in record}
                unmatched = sorted(set(existing) - {r.name for r in record})
                log.warning("mirror table %s had no column record (made by an older "
                            "meltwater): recorded %d column(s) by name against %s%s",
                            self.table, len(record), self._source_name,
                            f"; left alone, not written: {', '.join(unmatched)}"
                            if unmatched else "")
            if existing is not None:
                key_names = [recorded[fid].name if fid in recorded else schema.column_name(fid)
                             for fid in self._key_ids]
                primary = self._db.primary_key(self.table)
                if primary != set(key_names):
                    raise MirrorTableMismatchError(
                        f"mirror table {self.table} has primary key "
                        f"({', '.join(sorted(primary)) or 'none'}), not the key columns "
                        f"({', '.join(key_names)}); drop it or choose another table name")
        self._recorded = recorded
        self.schema = schema
        self.columns = [c for c in columns if c.field_id in recorded]

    def _keys(self, schema: Schema, columns: list[Column]) -> list[int]:
        names = key_column_names(self._key_names, schema)
        if not names:
            raise MissingKeyColumnsError(
                f"{self._source_name} has no identifier fields and no key columns were given: "
                f"{self._key_hint} (or set the table's identifier fields, e.g. "
                "ALTER TABLE ... SET IDENTIFIER FIELDS id)")
        by_name = {c.name: c for c in columns}
        for name in names:
            if name not in by_name:
                raise InvalidKeyColumnError(
                    f"key column {name!r} is not a top-level column of {self._source_name} "
                    f"(columns: {', '.join(by_name)})")
            check_key_type(by_name[name], self._source_name)
        return [by_name[name].field_id for name in names]

    def _sync(self, columns: list[Column]) -> None:
        """Bring the mirror table to `columns` by field id (inside the batch's transaction)."""
        existing = self._db.table_columns(self.table) or {}
        # read in the transaction: a batch that failed after its DDL rolled the record back
        self._recorded = self._record.read()
        plan = plan_schema_change(self.table, self._recorded, list(existing), columns,
                                  key_ids=self._key_ids,
                                  keep_dropped=self.keep_dropped_columns)
        if plan.steps or plan.kept:
            self._run(plan.steps)
            self._record.write(plan.record)
            for name in plan.kept:
                log.warning("mirror table %s: column %s was dropped from %s and is kept "
                            "(keep-dropped-columns): it is no longer written", self.table,
                            name, self._source_name)
        self._recorded = {r.field_id: r for r in plan.record}
        self.columns = list(columns)

    def _run(self, steps: list[Step]) -> None:
        for step in steps:
            try:
                self._db.execute(step.sql)
            except SinkUnavailableError:
                raise
            except SinkError as error:
                raise SchemaChangeNotMirroredError(
                    f"mirror table {self.table}: {self._db.dialect} cannot {step.action} "
                    f"column {step.column!r}: {error}") from None

    # -- batches -------------------------------------------------------------------------

    def _batch_schema(self, batch: pa.Table, snapshot_id: int | None) -> Schema | None:
        """The schema the batch is in: its commit's (see the module doc; a `Schema` source
        is always itself); None for an empty batch that names no commit (nothing to do)."""
        if self._table is not None and snapshot_id is not None:
            return self._table.schema_at(snapshot_id)
        return self._latest_schema() if batch.num_rows else None

    def _prepare(self, batch: pa.Table, schema: Schema,
                 what: str) -> tuple[pa.Table, list[Column]]:
        """The batch in the mirror's columns and types (after following `schema`), plus the
        change metadata it needs; and the key columns."""
        mapped = columns_by_field_id(batch, schema, self._latest_schema(), self._source_name,
                                     what)
        missing_keys = [fid for fid in self._key_ids if fid not in mapped]
        if missing_keys:
            raise InvalidChangesError(f"{what} lacks key column "
                                 f"{', '.join(self._key_name(f, schema) for f in missing_keys)}")
        columns = []
        for column in mirror_columns(schema, self._db.dialect):
            if column.field_id in mapped or isinstance(self._source, Schema):
                columns.append(column)
                continue
            if batch.num_rows and self._current_schema().has_field(column.field_id):
                raise SchemaChangeNotMirroredError(
                    f"{what} lacks column {column.name!r} (field id {column.field_id}) of the "
                    f"schema it is in, which {self._source_name} still has: its stream "
                    "started before the column was added and would lose its values; "
                    "restart the stream (meltwater serve runs mirrors with "
                    "schema-change=fail and restarts them)")
            # dropped from the table since: the mirror drops it now
        self._sync(columns)
        by_id = {c.field_id: c for c in columns}
        arrays = []
        for column in columns:
            array = mapped.get(column.field_id)
            if array is None:
                array = pa.nulls(batch.num_rows, to_arrow_type(column.type))
            try:
                arrays.append(conform(array, column))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise InvalidChangesError(f"{what}: column {column.name!r} of type {array.type} "
                                     f"does not convert to {column.type}: {e}") from e
        kept = [name for name in _KEPT_METADATA if name in batch.column_names]
        prepared = pa.table(arrays + [batch.column(name) for name in kept],
                            names=[c.name for c in columns] + kept)
        return prepared, [by_id[fid] for fid in self._key_ids]

    def _key_name(self, field_id: int, schema: Schema) -> str:
        return (repr(schema.find_field(field_id).name) if schema.has_field(field_id)
                else f"(field id {field_id})")


def _position(entry: LedgerEntry | None) -> Position | None:
    if entry is None:
        return None
    return Position(entry.batch_id, entry.snapshot_id, entry.sequence_number, entry.applied_at)


for _scheme in SQLITE_SCHEMES + POSTGRES_SCHEMES:
    register_sink(_scheme, Mirror)
