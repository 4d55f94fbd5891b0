"""The row-level changes of a range of commits, as Arrow batches.

Ties the kernel's incremental planner to the engine's reconstruction: commits are planned
lazily, one at a time, and each commit's change rows stream out before the next is
planned, so memory follows the largest commit's changes, not the range. Net changes are
the exception: collapsing a range to its net effect needs the whole range's changes.

Change rows are reconstructed on the full table schema of the range's end (carry-over
removal and update pairing compare whole rows); the filter and column selection apply
afterwards, so selecting columns never turns a real change into a carry-over.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from meltwater.planner.changes.change_range import (
    BoundKind,
    ChangeRange,
    RangeRequest,
    given_bounds,
    resolve_range,
)
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.expressions.tree import TRUE, Expression, bind
from meltwater.planner.scans.plan_stats import PlanStats
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.planner.table.table_loading import Table, load_table
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import (
    LINEAGE_FIELDS,
    LINEAGE_IDS,
    METADATA_COLUMNS,
    BeforeImages,
    ChangeOptions,
    ChangeTypeNames,
    EqualityDeletes,
    RowOptions,
    change_mode,
    key_image_columns,
)
from meltwater.stream.engine.decode.arrow_schema import nullable_except, to_arrow_schema
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE

log = logging.getLogger(__name__)


@dataclass
class ChangeFeed:
    """A planned change read: the range, the schemas, and how to turn commits into rows."""

    table: Table
    change_range: ChangeRange
    schema: Schema  # the table schema at the range's end
    row_filter: Expression
    columns: list[str] | None
    options: ChangeOptions
    appends_only: bool = False
    stats: PlanStats = field(default_factory=PlanStats)
    # where the table's key indexes are kept (`meltwater.stream.engine.keys`); None: none
    key_index_dir: Path | None = None

    @property
    def output_schema(self) -> pa.Schema:
        """The Arrow schema of the change rows: the selected table columns, then the change
        metadata columns."""
        from meltwater.stream.engine.changes.change_columns import metadata_fields

        selected = self._selected()
        table_columns = nullable_except(to_arrow_schema(selected),
                                        key_image_columns(selected, self.options))
        return pa.schema(list(table_columns) + metadata_fields())

    def _selected(self) -> Schema:
        selected = self.schema if self.columns is None else self.schema.select(self.columns)
        lineage = tuple(f for f in self.schema.fields if f.field_id in LINEAGE_IDS)
        if lineage and self.columns is not None:
            selected = Schema(selected.fields + lineage, selected.schema_id)
        return selected

    def batches(self, batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[pa.RecordBatch]:
        # Imported here: planning a feed (as a stream's driver does) needs no data reader.
        """Plan the range and reconstruct its change rows, commit by commit, in batches of at
        most `batch_size` rows (net changes: the range's net effect at once)."""
        from meltwater.stream.engine.changes.reconstruction import (
            reconstruct_net,
            reconstruct_range,
        )
        from meltwater.stream.engine.deletes.loader import DeleteLoader

        planner = IncrementalPlanner(self.table, self.row_filter, stats=self.stats)
        names = [f.name for f in self._selected().fields] + list(METADATA_COLUMNS)
        loader = DeleteLoader(self.table.io)
        if self.key_index_dir is not None:
            from meltwater.stream.engine.keys.index_location import table_indexes

            loader.key_indexes = table_indexes(self.key_index_dir, self.table)
        if self.nets_by_state:
            net = planner.plan_net(self.change_range)
            batches = (iter(()) if net is None else reconstruct_net(
                net, self.schema, self.table.io, options=self.options, deletes=loader,
                batch_size=batch_size, row_filter=self.row_filter))
        else:
            commits = planner.plan(self.change_range, appends_only=self.appends_only)
            scope = (ReadScope.ONE_COMMIT if len(self.change_range.commits) == 1
                     else ReadScope.COMMITS)
            batches = reconstruct_range(commits, self.schema, self.table.io,
                                        options=self.options, deletes=loader,
                                        batch_size=batch_size, row_filter=self.row_filter,
                                        scope=scope)
        for batch in batches:
            if batch.num_rows:
                yield batch.select(names)

    @property
    def nets_by_state(self) -> bool:
        """Whether net changes are read as the difference of the table before and after
        the range (`IncrementalPlanner.plan_net`): always, but for appended rows only
        (`appends_only`) and trusted equality delete payloads, which are about commits."""
        return (self.options.net and not self.appends_only
                and self.options.equality_deletes == EqualityDeletes.RESOLVE)

    def reader(self, batch_size: int = DEFAULT_BATCH_SIZE) -> pa.RecordBatchReader:
        """The change rows as a RecordBatchReader, for pyarrow consumers and sinks."""
        return pa.RecordBatchReader.from_batches(self.output_schema, self.batches(batch_size))


def _warn_skipped(change_range: ChangeRange) -> None:
    """Say which expired history a range skipped on request (the resolver only records it)."""
    for parent in change_range.expired_skipped:
        oldest = change_range.commits[0].snapshot_id if change_range.commits else None
        log.warning("skipping expired snapshots before %s (parent %s is gone)", oldest, parent)


def range_request(*, from_snapshot_id: int | None = None, from_sequence: int | None = None,
                  from_timestamp_ms: int | None = None, from_ref: str | None = None,
                  to_snapshot_id: int | None = None, to_sequence: int | None = None,
                  to_timestamp_ms: int | None = None, to_ref: str | None = None,
                  skip_expired: bool = False) -> RangeRequest:
    """The range the Python API's keyword arguments ask for (see `changes`); a refusal
    names these keywords."""
    starts = {"from_snapshot_id": (BoundKind.SNAPSHOT, from_snapshot_id),
              "from_sequence": (BoundKind.SEQUENCE, from_sequence),
              "from_timestamp_ms": (BoundKind.TIMESTAMP, from_timestamp_ms),
              "from_ref": (BoundKind.REF, from_ref)}
    ends = {"to_snapshot_id": (BoundKind.SNAPSHOT, to_snapshot_id),
            "to_sequence": (BoundKind.SEQUENCE, to_sequence),
            "to_timestamp_ms": (BoundKind.TIMESTAMP, to_timestamp_ms),
            "to_ref": (BoundKind.REF, to_ref)}
    return RangeRequest.of(given_bounds(starts, inclusive=False),
                           given_bounds(ends, inclusive=True), skip_expired=skip_expired,
                           skip_option="skip_expired=True")


def change_feed(table: Table | TableSource | str, request: RangeRequest | None = None,
                rows: RowOptions | None = None, *, io: FileIO | None = None,
                key_index_dir: str | os.PathLike[str] | None = None) -> ChangeFeed:
    """Plan a change read: the range (default: the whole retained history up to the current
    snapshot) and the row-level options (default: every row and column, updates paired
    when the table has identifier fields); see `changes`."""
    rows = rows or RowOptions()
    loaded = table if isinstance(table, Table) else load_table(table, io)
    change_range = resolve_range(loaded, request or RangeRequest())
    _warn_skipped(change_range)
    metadata = loaded.metadata
    end = (metadata.snapshot(change_range.to_snapshot_id)
           if change_range.to_snapshot_id is not None else None)
    schema = metadata.schema_for(end)
    if metadata.format_version >= 3:
        # v3 row lineage: each change row says which row it is (and, without identifier
        # columns, updates pair by row id)
        schema = Schema(schema.fields + LINEAGE_FIELDS, schema.schema_id,
                        schema.identifier_field_ids)
    options = rows.change_options(schema)
    row_filter = rows.filter
    if isinstance(row_filter, str):
        from meltwater.planner.expressions.filter_parser import parse_filter

        row_filter = parse_filter(row_filter)
    bound = bind(row_filter, schema)
    columns = list(rows.columns) if rows.columns is not None else None
    if columns is not None:
        schema.select(columns)  # fails early, naming an unknown column
    return ChangeFeed(loaded, change_range, schema, bound, columns, options, rows.appends_only,
                      key_index_dir=None if key_index_dir is None else Path(key_index_dir))


def changes(table: Table | TableSource | str, *, from_snapshot_id: int | None = None,
            from_sequence: int | None = None, from_timestamp_ms: int | None = None,
            from_ref: str | None = None, to_snapshot_id: int | None = None,
            to_sequence: int | None = None, to_timestamp_ms: int | None = None,
            to_ref: str | None = None, skip_expired: bool = False,
            filter: Expression | str = TRUE, columns: list[str] | None = None,
            net: bool = False, compute_updates: bool | None = None,
            identifier_columns: list[str] | None = None, keep_carryover: bool = False,
            appends_only: bool = False,
            equality_deletes: EqualityDeletes | str = EqualityDeletes.RESOLVE,
            change_type_names: ChangeTypeNames | str = ChangeTypeNames.ICEBERG,
            before_images: BeforeImages | str = BeforeImages.FULL,
            io: FileIO | None = None, key_index_dir: str | os.PathLike[str] | None = None,
            batch_size: int = DEFAULT_BATCH_SIZE) -> pa.RecordBatchReader:
    """The changes of a table between two snapshots, as a stream of Arrow batches.

    The range is (from, to]: `from_*` is exclusive and `to_*` inclusive, each by snapshot
    id, sequence number, timestamp in ms or ref; no `from` means the whole history, no `to`
    the current snapshot. A `from` later than an explicit `to`, or a `to_sequence` beyond
    the head, raises `InvalidRangeError`. Rows carry the table columns (in the schema of `to`) and
    `_change_type` (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER), `_change_ordinal`,
    `_commit_snapshot_id`, `_commit_sequence_number` and `_commit_timestamp`.

    Options: `filter`, `columns`; `net` (each row's net effect over the range);
    `compute_updates` (pair DELETE/INSERT of one key into updates; on by default when the
    table has identifier fields or `identifier_columns` are given); `keep_carryover` (keep
    rows a commit deleted and re-inserted unchanged); `appends_only` (inserts of append
    commits only, like Iceberg's incremental append scan); `equality_deletes`
    ("resolve", or "trust-payload" to emit full-row equality deletes as-is);
    `change_type_names` ("iceberg" or "delta"); `before_images` ("full", or "key": rows
    that left carry their identifier columns only, the rest null, which spares reading
    them whole; carry-over is then kept); `skip_expired`; `key_index_dir` (a local
    directory where the table's key index is kept and reused: an upsert commit then finds
    the rows it replaced by lookups instead of reading every older file's keys).

    Example::

        reader = meltwater.stream.changes("/warehouse/db/orders",
                                          from_snapshot_id=5003, compute_updates=True)
    """
    request = range_request(
        from_snapshot_id=from_snapshot_id, from_sequence=from_sequence,
        from_timestamp_ms=from_timestamp_ms, from_ref=from_ref, to_snapshot_id=to_snapshot_id,
        to_sequence=to_sequence, to_timestamp_ms=to_timestamp_ms, to_ref=to_ref,
        skip_expired=skip_expired)
    rows = RowOptions(filter=filter, columns=columns, net=net,
                      compute_updates=compute_updates, identifier_columns=identifier_columns,
                      keep_carryover=keep_carryover, appends_only=appends_only,
                      equality_deletes=change_mode(EqualityDeletes, equality_deletes,
                                                   "equality-deletes mode"),
                      change_type_names=change_mode(ChangeTypeNames, change_type_names,
                                                    "change type names"),
                      before_images=change_mode(BeforeImages, before_images,
                                                "before-images mode"))
    return change_feed(table, request, rows, io=io,
                       key_index_dir=key_index_dir).reader(batch_size)
