"""The batch reader of the `meltwater` Spark source: snapshot scans and change reads.

Spark drives a Python data source reader in three places. On the driver (in a Python
worker) it calls `pushFilters` and `partitions`; on the executors it calls `read` once per
partition. So everything a partition needs travels inside it as plain picklable data
(`meltwater.stream.spark.partitions`), which opens its own `FileIO`:

- **snapshot reads**: one `SnapshotPartition` per planner task group (bin-packed by
  Iceberg's split rules); `read` runs the group's tasks through `read_tasks`,
  merge-on-read deletes and the pushed filter applied.
- **change reads**: commits are planned on the driver (`IncrementalPlanner.plan_commit`,
  metadata only) and each commit with changes becomes one `ChangePartition`, because
  carry-over removal and update pairing need a whole commit. Net changes collapse the
  whole range, so they are one partition.

`read` yields Arrow record batches in exactly the Spark schema's columns and types (cast
when Spark's types differ, e.g. `fixed` -> binary: `meltwater.stream.spark.arrow_types`),
never Python rows.

Filters (`pushFilters`): translated by `meltwater.stream.spark.filters`, used by the
planner for manifest, data file and delete file pruning and applied to the rows, so Spark
does not evaluate them again. A change read only takes filters when neither update pairing
nor net changes is on: those look at both sides of a change, and a filter applied first
would turn an update that leaves the filter into a DELETE where Spark, filtering after,
shows an UPDATE_BEFORE.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from meltwater.planner.changes.change_range import RangeRequest
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.expressions.tree import TRUE, Expression
from meltwater.planner.scans.scan import TableScan
from meltwater.planner.scans.splitting import DEFAULT_OPEN_FILE_COST, SplitOptions
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.table_loading import Table, load_table
from meltwater.stream.engine.changes.change_feed import ChangeFeed, change_feed
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import (
    LINEAGE_IDS,
    METADATA_COLUMNS,
    BeforeImages,
)
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema as engine_schema
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE
from meltwater.stream.engine.keys.index_location import table_indexes
from meltwater.stream.errors import OptionError, UnreadableFileError
from meltwater.stream.spark.arrow_types import conform, spark_arrow_schema
from meltwater.stream.spark.filters import translate_filters
from meltwater.stream.spark.options import (
    change_read,
    is_change_read,
    key_index_dir,
    row_options,
    snapshot_read,
    split_size,
    table_source,
)
from meltwater.stream.spark.partitions import (
    ChangePartition,
    ReadPartition,
    SnapshotPartition,
    io_properties_of,
    read_partition,
)

log = logging.getLogger(__name__)

# Options of streaming reads only: with one of them, `schema()` answers the change schema
# (Spark gives `schema()` no other way to tell a stream from a batch read).
_STREAM_ONLY_PREFIXES = ("streaming-", "stream-", "starting")
_STREAM_ONLY_NAMES = frozenset({"maxfilespertrigger", "maxbytespertrigger",
                                "maxrowspertrigger", "schema-change", "watch-wait-ms"})


def wants_change_schema(options: Mapping[str, str]) -> bool:
    """Whether a read with these options returns change rows (with the metadata columns)."""
    lowered = {str(k).lower() for k in options}
    return is_change_read(options) or any(
        k.startswith(_STREAM_ONLY_PREFIXES) or k in _STREAM_ONLY_NAMES for k in lowered)


# -- what a read is, resolved against one metadata file --------------------------------------


@dataclass
class ResolvedRead:
    """A batch read resolved against table metadata: a snapshot scan or a change feed."""

    table: Table
    scan: TableScan | None = None
    feed: ChangeFeed | None = None

    @property
    def is_change_read(self) -> bool:
        """Whether the read returns change rows rather than a snapshot's rows."""
        return self.feed is not None

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema the read returns before Spark's requested columns are chosen."""
        if self.feed is not None:
            return self.feed.output_schema
        assert self.scan is not None
        return engine_schema(self.scan.schema)

    @property
    def filter_schema(self) -> Schema:
        """The columns a pushed filter may name (no lineage or change metadata columns)."""
        if self.feed is not None:
            fields = tuple(f for f in self.feed.schema.fields if f.field_id not in LINEAGE_IDS)
            return Schema(fields, self.feed.schema.schema_id)
        assert self.scan is not None
        return self.scan.schema

    @property
    def takes_filters(self) -> bool:
        """Whether Spark's filters may be pushed into the read: not when net changes or update
        pairing would see fewer rows than they need, nor with key before-images (Spark then
        tests the rows as they come out, departing rows with their nulls)."""
        options = self.feed.options if self.feed is not None else None
        return options is None or not (options.net or options.pairs_updates
                                       or options.before_images == BeforeImages.KEY)


def resolve_read(options: Mapping[str, str], metadata_location: str | None = None,
                 row_filter: Expression = TRUE, *, changes: bool | None = None,
                 table: Table | None = None) -> ResolvedRead:
    """Resolve the options of a batch read against the table's metadata (pinned to
    `metadata_location` when given); `changes` forces the kind of read."""
    if table is None:
        table = load_table(table_source(options), metadata_location=metadata_location)
    if changes is None:
        changes = wants_change_schema(options)
    if not changes:
        read = snapshot_read(options)
        scan = TableScan(table, snapshot_id=read.snapshot_id, ref=read.ref,
                         as_of_ms=read.as_of_ms, row_filter=row_filter)
        scan.snapshot  # noqa: B018  (resolves now: an unknown snapshot fails at load time)
        return ResolvedRead(table, scan=scan)
    if is_change_read(options):
        change = change_read(options)
        request, rows = change.range, change.rows
    else:
        # A stream (only streaming options given): its schema is the current snapshot's,
        # and resolving its history here would fail on expired snapshots it never reads.
        request = RangeRequest.empty_at(table.metadata.current_snapshot_id)
        rows = row_options(options)
    rows = dataclasses.replace(rows, filter=row_filter)
    return ResolvedRead(table, feed=change_feed(table, request, rows,
                                                key_index_dir=key_index_dir(options)))


class MeltwaterBatchReader(DataSourceReader):
    """Reads a snapshot or a change range; see the module doc."""

    def __init__(self, options: Mapping[str, str], schema: StructType,
                 metadata_location: str | None = None, changes: bool | None = None) -> None:
        self.options = {str(k): str(v) for k, v in options.items()}
        self.schema = schema
        self.metadata_location = metadata_location
        self.changes = wants_change_schema(options) if changes is None else changes
        self.row_filter: Expression = TRUE
        self.batch_size = DEFAULT_BATCH_SIZE
        self._table: Table | None = None
        self._resolved: ResolvedRead | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_table"] = state["_resolved"] = None  # table metadata stays on the driver
        return state

    @property
    def names(self) -> list[str]:
        """The column names Spark asked for."""
        return list(self.schema.fieldNames())

    def _read(self) -> ResolvedRead:
        if self._resolved is None:
            if self._table is None:
                self._table = load_table(table_source(self.options),
                                         metadata_location=self.metadata_location)
            self._resolved = resolve_read(self.options, row_filter=self.row_filter,
                                          changes=self.changes, table=self._table)
            known = set(self._resolved.arrow_schema.names)
            unknown = [n for n in self.names if n not in known]
            if unknown:
                raise OptionError(f"the read schema names {', '.join(map(repr, unknown))}, not "
                                  f"columns of the table (columns: {', '.join(sorted(known))})")
        return self._resolved

    # -- driver side ------------------------------------------------------------------------

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Take the filters meltwater translates into its own row filter; return the others to
        Spark, which applies them."""
        read = self._read()
        if not read.takes_filters:
            log.info("meltwater: change read with update pairing, net changes or key "
                     "before-images takes no filters; returned to Spark: %s", filters)
            return list(filters)
        expression, pushed, returned = translate_filters(filters, read.filter_schema)
        self.row_filter = expression
        self._resolved = None  # re-plan with the filter
        log.info("meltwater filter push-down: %d pushed %s as [%s]; %d returned to Spark %s",
                 len(pushed), pushed, expression, len(returned), returned)
        return returned

    def partitions(self) -> list[InputPartition]:
        """Plan the read on the driver: one partition per task group of a snapshot read, per
        commit with changes of a change read, or one for a range read as net changes."""
        read = self._read()
        if read.feed is not None:
            return self._change_partitions(read.feed)
        assert read.scan is not None
        full = read.arrow_schema.names
        table_columns = [n for n in self.names if n in full]
        scan = read.scan
        if table_columns != full:
            scan = TableScan(read.table, snapshot_id=scan.snapshot_id, ref=scan.ref,
                             as_of_ms=scan.as_of_ms, row_filter=self.row_filter,
                             columns=table_columns)
        groups = scan.plan_tasks()
        snapshot = scan.snapshot
        log.info("meltwater scan of %s at snapshot %s, filter [%s]: %d tasks in %d partitions; "
                 "%s", read.table.metadata_location,
                 snapshot.snapshot_id if snapshot else None, scan.bound_filter,
                 sum(len(g.tasks) for g in groups), len(groups), scan.stats.as_dict())
        io = io_properties_of(read.table)
        return [SnapshotPartition(g.tasks, scan.read_schema, scan.projection, io_properties=io)
                for g in groups]

    def _change_partitions(self, feed: ChangeFeed) -> list[InputPartition]:
        planner = IncrementalPlanner(feed.table, feed.row_filter, stats=feed.stats)
        io = io_properties_of(feed.table)
        if feed.nets_by_state:
            net = planner.plan_net(feed.change_range)
            planned = [] if net is None else [net]
        else:
            planned = list(planner.plan(feed.change_range, appends_only=feed.appends_only))
        commits = [CommitPart(c, feed.schema, 0, len(c.tasks))  # the range end's schema
                   for c in planned if c.tasks]
        scope = (ReadScope.ONE_COMMIT if len(feed.change_range.commits) == 1
                 else ReadScope.COMMITS)
        indexes = table_indexes(feed.key_index_dir, feed.table)
        if feed.options.net:
            parts = [ChangePartition(tuple(commits), feed.options, feed.row_filter,
                                     scope=scope, io_properties=io,
                                     key_indexes=indexes)] if commits else []
        else:  # a commit each; an upsert commit bigger than a split in shares of its keys
            target = self._split_target(feed, sum(c.cost.bytes for c in commits))
            parts = [ChangePartition((piece,), feed.options, feed.row_filter, scope=scope,
                                     io_properties=io, key_indexes=indexes)
                     for c in commits for piece in _shares(c, target)]
        log.info("meltwater change read of %s, (%s, %s], filter [%s]: %d commits with changes "
                 "in %d partitions; %s", feed.table.metadata_location,
                 feed.change_range.from_snapshot_id, feed.change_range.to_snapshot_id,
                 feed.row_filter, len(commits), len(parts), feed.stats.as_dict())
        return list(parts)

    def _split_target(self, feed: ChangeFeed, total: int) -> int:
        """Bytes one Spark task of the change read should read: option `split-size` as
        given, else the table's `read.split.target-size`, but then a small read is still
        spread over the cores (as `pack_parts` spreads a micro-batch)."""
        given = split_size(self.options)
        if given:
            return given
        target = SplitOptions.of_table(feed.table.metadata.properties).target_size
        cores = max(2, os.cpu_count() or 2)
        return min(target, max(DEFAULT_OPEN_FILE_COST, -(-total // cores)))

    # -- executor side ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition on an executor, as Arrow batches in Spark's requested schema."""
        if not isinstance(partition, ReadPartition):  # Spark's placeholder: nothing to read
            return
        target = spark_arrow_schema(self.schema)
        for batch in read_partition(partition, self.batch_size):
            if batch.num_rows:
                yield conform(batch, target, _unfit_for_read_schema)


def _shares(part: CommitPart, target: int) -> list[CommitPart]:
    """A commit's part, or for an upsert commit costing more than `target` bytes, parts
    each reading one share of its keys, one per core at most (`CommitPart.key_shares`):
    its work spread over the executors."""
    cost = part.cost.bytes
    if not part.shareable or cost <= target:
        return [part]
    return part.key_shares(min(max(2, os.cpu_count() or 2), -(-cost // target)))


def _unfit_for_read_schema(what: str) -> UnreadableFileError:
    return UnreadableFileError(f"{what}; give a schema whose types fit the table's")


__all__ = ["METADATA_COLUMNS", "MeltwaterBatchReader", "ResolvedRead", "resolve_read",
           "wants_change_schema"]
