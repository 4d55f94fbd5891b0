"""A change stream's schema: fixed when it starts, and what a commit in another one does.

**Schema changes.** The stream's columns are fixed when it starts (the Spark schema);
commits are read in their own schema by field id, so renamed columns keep the stream's
name and dropped ones read as null. A column added after the stream started is projected
away with a warning, or with `schema-change=fail` the stream stops before the first such
commit, after emitting everything before it, and says how to restart with the new schema.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from meltwater.planner.changes.change_range import RangeRequest
from meltwater.planner.errors import StreamError
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.metadata import Snapshot, TableMetadata
from meltwater.planner.table.table_loading import Table
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.engine.changes.change_feed import change_feed
from meltwater.stream.engine.changes.change_schema import (
    LINEAGE_FIELDS,
    LINEAGE_IDS,
    METADATA_COLUMNS,
    ChangeOptions,
    RowOptions,
)
from meltwater.stream.errors import SchemaChangedError

log = logging.getLogger(__name__)


@dataclass
class StreamSchema:
    """What the stream fixed when it started: its schema, columns and change options."""

    schema: Schema  # the table schema when the stream started (+ v3 lineage fields)
    columns: tuple[str, ...]  # the table columns the stream emits
    options: ChangeOptions
    appends_only: bool
    last_column_id: int  # columns with greater ids were added after the stream started
    known: frozenset[int]  # the snapshots there were when it started (others came after)
    source: TableSource  # the table, as errors name it
    _warned: set[int] = field(default_factory=set, compare=False, repr=False)

    @classmethod
    def fix(cls, table: Table, columns: Sequence[str], rows: RowOptions,
            source: TableSource) -> StreamSchema:
        """The schema of a stream starting now on `table`, emitting `columns` (the output
        columns: table columns and change metadata columns); StreamError naming the
        columns the table does not have."""
        metadata = table.metadata
        current = metadata.current_snapshot_id
        feed = change_feed(table, RangeRequest.empty_at(current), rows)
        names = {f.name for f in feed.schema.fields}
        own = tuple(c for c in columns if c not in METADATA_COLUMNS)
        unknown = [c for c in own if c not in names]
        if unknown:
            raise StreamError(f"columns {', '.join(unknown)} of the stream's schema are not "
                              f"columns of table {source} (it has "
                              f"{', '.join(sorted(names))})")
        return cls(feed.schema, own, feed.options, feed.appends_only,
                   metadata.last_column_id, frozenset(metadata.snapshots), source)

    def projection(self, metadata: TableMetadata, snapshot: Snapshot) -> Schema:
        """The schema to reconstruct a commit in: the commit's own columns (whole rows, so
        carry-over removal and pairing see every column), named as the stream names them,
        plus stream columns the commit's schema lacks (read as null)."""
        stream = self.schema
        own = _commit_schema(metadata, snapshot)
        by_id = {f.field_id: f for f in stream.fields}
        taken = {f.name for f in stream.fields}
        fields = []
        for f in own.fields:
            if f.field_id in by_id:
                fields.append(dataclasses.replace(f, name=by_id[f.field_id].name))
            elif f.name in taken:  # a column re-added under a stream column's name
                fields.append(dataclasses.replace(f, name=f"_{f.name}_{f.field_id}"))
            else:
                fields.append(f)
        present = {f.field_id for f in own.fields}
        fields.extend(dataclasses.replace(f, required=False) for f in stream.fields
                      if f.field_id not in present)
        return Schema(tuple(fields), own.schema_id, stream.identifier_field_ids)

    def admits(self, metadata: TableMetadata, snapshot: Snapshot, *, admitted: bool,
               fail: bool) -> bool:
        """Check a commit's schema against the stream's; False: end the batch before it.

        `admitted`: whether the micro-batch already holds commits before this one; `fail`:
        whether a schema change stops the stream (`schema-change=fail`) rather than being
        projected away with a warning."""
        if snapshot.snapshot_id in self.known:
            return True  # committed before the stream started: its schema is history
        own = _commit_schema(metadata, snapshot)
        if own.schema_id == self.schema.schema_id:
            return True
        wanted = {f.field_id: f for f in self.schema.fields if f.name in self.columns}
        added = [f.name for f in own.fields
                 if f.field_id > self.last_column_id and f.field_id not in LINEAGE_IDS]
        present = {f.field_id: f for f in own.fields}
        dropped = [f.name for i, f in wanted.items() if i not in present]
        retyped = [f.name for i, f in wanted.items()
                   if i in present and present[i].type != f.type]
        if not (added or dropped or retyped):
            return True
        what = "; ".join(part for part in (
            f"columns added: {', '.join(added)}" if added else "",
            f"columns dropped: {', '.join(dropped)}" if dropped else "",
            f"columns changing type: {', '.join(retyped)}" if retyped else "") if part)
        where = (f"table {self.source} changed its schema at snapshot "
                 f"{snapshot.snapshot_id} ({what})")
        if fail:
            if admitted:
                return False  # deliver what came before the change first
            raise SchemaChangedError(
                f"{where}, and the stream's schema is fixed when it starts "
                "(schema-change=fail): restart the query to read the new schema (its "
                f"checkpoint resumes at snapshot {snapshot.snapshot_id}), or set "
                "schema-change=project to project new columns away")
        if own.schema_id not in self._warned:
            self._warned.add(own.schema_id)
            log.warning("%s; the stream keeps the schema it started with: new columns are "
                        "projected away, dropped ones read as null, retyped ones are cast "
                        "(restart the query to read the new schema)", where)
        return True


def _commit_schema(metadata: TableMetadata, snapshot: Snapshot) -> Schema:
    """The schema a commit was written in, with the v3 row lineage fields."""
    schema = metadata.schema_for(snapshot)
    if metadata.format_version >= 3 and not any(f.field_id in LINEAGE_IDS
                                                for f in schema.fields):
        schema = Schema(schema.fields + LINEAGE_FIELDS, schema.schema_id,
                        schema.identifier_field_ids)
    return schema
