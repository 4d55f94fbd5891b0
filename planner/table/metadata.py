"""Table metadata (format v1, v2 and v3): the model of a `*.metadata.json` and its parsing.

A table is a pointer to one immutable `*.metadata.json`; everything else (snapshots,
manifests, data files) is reached from there. This module parses that file into frozen
models and answers the questions every scan starts with: which snapshot (by id, ref or
time), with which schema, along which lineage. Finding that file and reading it, by
location or through a catalog, is `meltwater.planner.table.table_loading`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from meltwater.planner.errors import (
    CorruptMetadataError,
    NoSuchSnapshotError,
    UnsupportedFeatureError,
)
from meltwater.planner.spec.partitioning import (
    PartitionSpec,
    SortOrder,
    parse_sort_order,
    parse_spec,
    parse_v1_spec,
)
from meltwater.planner.spec.types import (
    IcebergType,
    NestedField,
    Schema,
    child_fields,
    parse_schema,
)

SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)


@dataclass(frozen=True)
class Snapshot:
    """One commit of a table, as its metadata file records it."""

    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    timestamp_ms: int
    manifest_list: str | None
    summary: dict[str, str]
    schema_id: int | None
    first_row_id: int | None = None
    added_rows: int | None = None
    v1_manifests: tuple[str, ...] = ()  # v1 snapshots may list manifests instead of a list

    @property
    def operation(self) -> str:
        """What the commit did (`append`, `overwrite`, `delete`, `replace`); empty if unrecorded."""
        return self.summary.get("operation", "")


@dataclass(frozen=True)
class SnapshotRef:
    """A named branch or tag and the snapshot it points to."""

    name: str
    snapshot_id: int
    type: str  # branch or tag


@dataclass(frozen=True)
class SnapshotLogEntry:
    """When a snapshot became the table's current one."""

    timestamp_ms: int
    snapshot_id: int


@dataclass(frozen=True)
class TableMetadata:
    """A table's metadata file, parsed: schemas, specs, snapshots, refs and properties."""

    format_version: int
    table_uuid: str | None
    location: str
    last_sequence_number: int
    last_updated_ms: int
    last_column_id: int
    schemas: dict[int, Schema]
    current_schema_id: int
    specs: dict[int, PartitionSpec]
    default_spec_id: int
    sort_orders: dict[int, SortOrder]
    default_sort_order_id: int
    properties: dict[str, str]
    current_snapshot_id: int | None
    snapshots: dict[int, Snapshot]
    snapshot_log: tuple[SnapshotLogEntry, ...]
    refs: dict[str, SnapshotRef]
    next_row_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def schema(self) -> Schema:
        """The table's current schema."""
        return self.schemas[self.current_schema_id]

    @property
    def spec(self) -> PartitionSpec:
        """The partition spec new data is written with."""
        return self.specs[self.default_spec_id]

    @property
    def current_snapshot(self) -> Snapshot | None:
        """The snapshot the table's main branch points at; None for an empty table."""
        if self.current_snapshot_id is None:
            return None
        return self.snapshots.get(self.current_snapshot_id)

    def snapshot(self, snapshot_id: int) -> Snapshot:
        """The snapshot with this id; NoSuchSnapshotError if it expired or never existed."""
        try:
            return self.snapshots[snapshot_id]
        except KeyError:
            raise NoSuchSnapshotError(
                f"snapshot {snapshot_id} does not exist in table {self.location} "
                "(expired or never committed)") from None

    def snapshot_for_ref(self, name: str) -> Snapshot:
        """The snapshot a branch or tag points at; NoSuchSnapshotError naming the refs there are."""
        ref = self.refs.get(name)
        if ref is None:
            known = ", ".join(sorted(self.refs)) or "none"
            raise NoSuchSnapshotError(f"table {self.location} has no branch or tag {name!r} "
                                   f"(refs: {known})")
        return self.snapshot(ref.snapshot_id)

    def branch_head(self, branch: str | None) -> Snapshot | None:
        """The snapshot a branch points at (`main` when None): what a stream following it
        reads up to. None for an empty table's main; NoSuchSnapshotError for a branch the
        table does not have, and for a tag, which names one snapshot and never moves."""
        if branch is None or branch == "main":
            return self.current_snapshot
        ref = self.refs.get(branch)
        if ref is not None and ref.type != "branch":
            raise NoSuchSnapshotError(f"{branch!r} is a tag of table {self.location}, not a "
                                      "branch: a tag never moves, so there is no stream of "
                                      "it to follow (read it with a batch read)")
        return self.snapshot_for_ref(branch)

    def snapshot_as_of(self, timestamp_ms: int) -> Snapshot:
        """The main branch's snapshot current at a time, from the snapshot log (as Iceberg)."""
        found = None
        for entry in self.snapshot_log:
            if entry.timestamp_ms <= timestamp_ms:
                found = entry.snapshot_id
        if found is None:
            raise NoSuchSnapshotError(f"table {self.location} has no snapshot at or before "
                                   f"{timestamp_ms} ms")
        return self.snapshot(found)

    def schema_for(self, snapshot: Snapshot | None) -> Schema:
        """The schema a snapshot was written with (time travel reads it), else the current.

        A snapshot whose schema-id names no schema is refused, as Java's
        `SnapshotUtil.schemaFor` refuses it: falling back to the current schema would read
        the snapshot's files in columns they were not written with."""
        if snapshot is None or snapshot.schema_id is None:
            return self.schema
        schema = self.schemas.get(snapshot.schema_id)
        if schema is None:
            raise CorruptMetadataError(
                f"table {self.location}: snapshot {snapshot.snapshot_id} was written with "
                f"schema-id {snapshot.schema_id}, which is not among the table's schemas "
                f"(ids {', '.join(map(str, sorted(self.schemas)))})")
        return schema

    def schema_for_ref(self, ref: str | None) -> Schema:
        """The schema a read of a branch or tag returns, as Java's
        `SnapshotUtil.schemaFor(table, ref)` chooses it: a branch (main when `ref` is None)
        is read in the table's current schema, the one its next commit will have, so a
        column added since the last commit reads as nulls; a tag in its snapshot's schema."""
        named = self.refs.get(ref) if ref is not None else None
        if named is None or named.type == "branch":
            return self.schema
        return self.schema_for(self.snapshot(named.snapshot_id))

    def ancestors(self, snapshot_id: int) -> list[Snapshot]:
        """The snapshot and its ancestors, newest first, as far as history is retained."""
        chain = []
        current: int | None = snapshot_id
        while current is not None and current in self.snapshots:
            snapshot = self.snapshots[current]
            chain.append(snapshot)
            current = snapshot.parent_id
            if len(chain) > len(self.snapshots):  # parsed tables are checked already
                raise CorruptMetadataError(f"table {self.location}: the parent chain of snapshot "
                                      f"{snapshot_id} loops back on itself")
        return chain

    @cached_property
    def field_types(self) -> dict[int, IcebergType]:
        """Every field id ever used, with its newest type: decodes bounds of any file."""
        types: dict[int, IcebergType] = {}

        def visit(fields: tuple[NestedField, ...]) -> None:
            for f in fields:
                types[f.field_id] = f.type
                visit(child_fields(f.type))

        for schema_id in sorted(self.schemas):
            visit(self.schemas[schema_id].fields)
        return types


def _require(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise CorruptMetadataError(f"{where}: missing required field {key!r}")
    return obj[key]


def _check_lineage(snapshots: dict[int, Snapshot], where: str) -> None:
    """Refuse a parent-id cycle: every walk back along a lineage (changes, watchers,
    streams) would go round it forever. Each snapshot is visited once."""
    done: set[int] = set()
    for start in snapshots:
        path: list[int] = []
        on_path: set[int] = set()
        current: int | None = start
        while current is not None and current in snapshots and current not in done:
            if current in on_path:
                raise CorruptMetadataError(f"{where}: the parent chain of snapshot {current} "
                                      "loops back on itself (parent-snapshot-id cycle)")
            path.append(current)
            on_path.add(current)
            current = snapshots[current].parent_id
        done.update(path)


def _check_refs(current: int | None, refs: dict[str, SnapshotRef],
                snapshots: dict[int, Snapshot], where: str) -> None:
    """Refuse refs Iceberg Java refuses (`TableMetadata.validateRefs`): a ref to a snapshot
    the table does not list, a `main` branch that disagrees with `current-snapshot-id`,
    or one set while the current snapshot is not. Reading any of these would be a guess
    at which snapshot the table is at."""
    for ref in refs.values():
        if ref.snapshot_id not in snapshots:
            raise CorruptMetadataError(f"{where}: {ref.type} {ref.name!r} points at snapshot "
                                  f"{ref.snapshot_id}, which the table does not list")
    main = refs.get("main")
    if current is None and main is not None:
        raise CorruptMetadataError(f"{where}: current-snapshot-id is not set, but branch 'main' "
                              f"points at snapshot {main.snapshot_id}")
    if current is not None and main is not None and main.snapshot_id != current:
        raise CorruptMetadataError(f"{where}: current-snapshot-id {current} does not match "
                              f"branch 'main' ({main.snapshot_id})")
    if current is not None and current not in snapshots:
        raise CorruptMetadataError(f"{where}: current-snapshot-id {current} is not in the "
                              "table's snapshots")


def parse_metadata(obj: dict[str, Any], where: str = "metadata") -> TableMetadata:
    """Table metadata from its parsed JSON; `where` names the file in errors."""
    if not isinstance(obj, dict):
        raise CorruptMetadataError(f"{where}: not a JSON object")
    version = _require(obj, "format-version", where)
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise UnsupportedFeatureError(f"{where}: unsupported table format version {version} "
                                 f"(meltwater reads {SUPPORTED_FORMAT_VERSIONS})")
    try:
        if "schemas" in obj:
            schemas = {s.schema_id: s for s in map(parse_schema, obj["schemas"])}
            current_schema_id = obj.get("current-schema-id", 0)
        else:
            schema = parse_schema(_require(obj, "schema", where))
            schemas, current_schema_id = {schema.schema_id: schema}, schema.schema_id
        if current_schema_id not in schemas:  # Java's TableMetadataParser refuses it too
            raise CorruptMetadataError(
                f"{where}: current-schema-id {current_schema_id} is not among the table's "
                f"schemas (ids {', '.join(map(str, sorted(schemas))) or 'none'})")
        if "partition-specs" in obj:
            specs = {s.spec_id: s for s in map(parse_spec, obj["partition-specs"])}
            default_spec_id = obj.get("default-spec-id", 0)
        else:
            specs, default_spec_id = {0: parse_v1_spec(obj.get("partition-spec", []))}, 0
        orders = {o.order_id: o for o in map(parse_sort_order, obj.get("sort-orders", []))}
        snapshots = {}
        for s in obj.get("snapshots", []):
            snapshot = Snapshot(
                snapshot_id=s["snapshot-id"], parent_id=s.get("parent-snapshot-id"),
                sequence_number=s.get("sequence-number", 0), timestamp_ms=s["timestamp-ms"],
                manifest_list=s.get("manifest-list"), summary=dict(s.get("summary", {})),
                schema_id=s.get("schema-id"), first_row_id=s.get("first-row-id"),
                added_rows=s.get("added-rows"), v1_manifests=tuple(s.get("manifests", ())),
            )
            snapshots[snapshot.snapshot_id] = snapshot
        current = obj.get("current-snapshot-id")
        current = None if current in (None, -1) else current
        refs = {name: SnapshotRef(name, r["snapshot-id"], r.get("type", "branch"))
                for name, r in obj.get("refs", {}).items()}
        if "main" not in refs and current is not None:
            refs["main"] = SnapshotRef("main", current, "branch")
        _check_lineage(snapshots, where)
        _check_refs(current, refs, snapshots, where)
        log = tuple(SnapshotLogEntry(e["timestamp-ms"], e["snapshot-id"])
                    for e in obj.get("snapshot-log", []))
        return TableMetadata(
            format_version=version, table_uuid=obj.get("table-uuid"),
            location=_require(obj, "location", where),
            last_sequence_number=obj.get("last-sequence-number", 0),
            last_updated_ms=obj.get("last-updated-ms", 0),
            last_column_id=obj.get("last-column-id", 0), schemas=schemas,
            current_schema_id=current_schema_id, specs=specs, default_spec_id=default_spec_id,
            sort_orders=orders, default_sort_order_id=obj.get("default-sort-order-id", 0),
            properties=dict(obj.get("properties", {})), current_snapshot_id=current,
            snapshots=snapshots, snapshot_log=log, refs=refs, next_row_id=obj.get("next-row-id"),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptMetadataError(f"{where}: malformed table metadata ({error!r})") from error
