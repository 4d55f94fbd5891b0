"""A snapshot scan: which snapshot, which columns, which rows, and the tasks to read them.

`TableScan` only resolves the user's choices (snapshot by id, ref or time; columns by name;
a filter as text or expression) against the table's metadata and hands the snapshot's
manifests to `ManifestGroup`, the shared planning engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from meltwater.planner.expressions.tree import TRUE, Expression, bind, referenced_field_ids
from meltwater.planner.scans.manifest_group import ManifestGroup
from meltwater.planner.scans.plan_stats import PlanStats, listed_manifests
from meltwater.planner.scans.splitting import SplitOptions, plan_task_groups
from meltwater.planner.scans.tasks import FileScanTask, ScanTaskGroup
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.manifests import MANIFEST_CACHE, ManifestCache, ManifestReader
from meltwater.planner.table.metadata import Snapshot
from meltwater.planner.table.table_loading import Table, resolve_snapshot


@dataclass
class TableScan:
    """A scan of one snapshot. `row_filter` may be text (parsed) or an expression."""

    table: Table
    snapshot_id: int | None = None
    ref: str | None = None
    as_of_ms: int | None = None
    row_filter: Expression | str = TRUE
    columns: list[str] | None = None
    case_sensitive: bool = True
    workers: int | None = None
    cache: ManifestCache | None = MANIFEST_CACHE
    stats: PlanStats = field(default_factory=PlanStats)

    @cached_property
    def snapshot(self) -> Snapshot | None:
        """The snapshot scanned (by id, ref or time; default current); None for an empty table."""
        return resolve_snapshot(self.table, self.snapshot_id, self.ref, self.as_of_ms)

    @cached_property
    def schema(self) -> Schema:
        """The schema the scan reads in, as Iceberg Java's Spark reads choose it: a snapshot
        chosen by id or time in the schema it was written with, a branch (the default: main)
        in the table's current schema, a tag in its snapshot's (`schema_for_ref`)."""
        metadata = self.table.metadata
        if self.snapshot_id is None and self.as_of_ms is None:
            return metadata.schema_for_ref(self.ref)
        return metadata.schema_for(self.snapshot)

    @cached_property
    def projection(self) -> Schema:
        """The columns the scan returns."""
        if self.columns is None:
            return self.schema
        return self.schema.select(self.columns, self.case_sensitive)

    @cached_property
    def bound_filter(self) -> Expression:
        """The row filter parsed if text and bound to the scanned schema."""
        expression = self.row_filter
        if isinstance(expression, str):
            from meltwater.planner.expressions.filter_parser import parse_filter

            expression = parse_filter(expression)
        return bind(expression, self.schema, self.case_sensitive)

    @cached_property
    def read_schema(self) -> Schema:
        """The projection plus columns only the filter needs (read, then dropped)."""
        extra = referenced_field_ids(self.bound_filter) - set(self.projection.field_ids())
        if not extra:
            return self.projection
        by_id = {f.field_id: f for f in self.schema.fields}
        additional = tuple(by_id[i] for i in sorted(extra) if i in by_id)
        return Schema(self.projection.fields + additional, self.schema.schema_id,
                      self.schema.identifier_field_ids)

    def manifest_group(self) -> ManifestGroup:
        """The snapshot's manifests with the filter, ready to plan from."""
        reader = ManifestReader(self.table.metadata, self.table.io, self.cache)
        data, deletes = (listed_manifests(reader, self.snapshot, self.stats)
                         if self.snapshot else ([], []))
        return ManifestGroup(reader, self.schema, data, deletes, row_filter=self.bound_filter,
                             workers=self.workers, stats=self.stats)

    def plan_files(self) -> list[FileScanTask]:
        """One task per live data file the filter may match, with its deletes."""
        if self.snapshot is None:
            return []
        return self.manifest_group().plan_files()

    def plan_tasks(self) -> list[ScanTaskGroup]:
        """The file tasks split and packed into groups by the table's split properties."""
        split = SplitOptions.of_table(self.table.metadata.properties)
        return plan_task_groups(self.plan_files(), split.target_size, split.lookback,
                                split.open_file_cost)
