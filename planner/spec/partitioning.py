"""Partition specs and sort orders: how a table lays rows into files.

A partition field names its transform by the spec's string (`identity`, `bucket[16]`,
`truncate[4]`, `year`, `month`, `day`, `hour`, `void`); `meltwater.planner.spec.transforms` gives
each string its behaviour. Partition values travel as tuples in spec field order, holding the
transform's *result* in the internal representation of `meltwater.planner.spec.types`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meltwater.planner.errors import SchemaError
from meltwater.planner.spec.types import (
    DATE,
    INT,
    IcebergType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)


@dataclass(frozen=True)
class PartitionField:
    """One field of a partition spec: the source column, the transform, and the field's own id
    and name."""

    source_id: int
    field_id: int
    transform: str
    name: str

    def result_type(self, source_type: IcebergType) -> IcebergType:
        """The type of this field's values in manifests and partition tuples."""
        name = self.transform
        if name.startswith("bucket") or name in ("year", "month", "hour"):
            return INT
        if name == "day":
            return DATE
        if name in ("identity", "void") or name.startswith("truncate"):
            return source_type
        raise SchemaError(f"unknown partition transform {name!r} in field {self.name!r}")


@dataclass(frozen=True)
class PartitionSpec:
    """How a table's data files are partitioned: files of one spec share a partition tuple shape."""

    spec_id: int
    fields: tuple[PartitionField, ...]

    @property
    def is_unpartitioned(self) -> bool:
        """True when no field partitions anything; v1 leaves void fields where others dropped."""
        return all(f.transform == "void" for f in self.fields)

    def partition_type(self, schema: Schema) -> StructType:
        """The struct of partition values; a field whose source column was dropped is unknown."""
        fields = []
        for f in self.fields:
            source: IcebergType = (schema.find_field(f.source_id).type
                                   if schema.has_field(f.source_id) else PrimitiveType("unknown"))
            fields.append(NestedField(f.field_id, f.name, f.result_type(source), False))
        return StructType(tuple(fields))



def parse_spec(obj: dict[str, Any]) -> PartitionSpec:
    """A partition spec from its JSON form in table metadata."""
    return PartitionSpec(obj.get("spec-id", 0), tuple(
        PartitionField(f["source-id"], f["field-id"], f["transform"], f["name"])
        for f in obj.get("fields", ())))


def parse_v1_spec(fields: list[dict[str, Any]]) -> PartitionSpec:
    """v1's `partition-spec` field: a bare field list whose field ids start at 1000."""
    return PartitionSpec(0, tuple(
        PartitionField(f["source-id"], f.get("field-id", 1000 + i), f["transform"], f["name"])
        for i, f in enumerate(fields)))


@dataclass(frozen=True)
class SortField:
    """One field of a sort order, as table metadata records it."""

    source_id: int
    transform: str
    direction: str
    null_order: str


@dataclass(frozen=True)
class SortOrder:
    """A table's declared sort order (kept for completeness; planning does not use it)."""

    order_id: int
    fields: tuple[SortField, ...]


def parse_sort_order(obj: dict[str, Any]) -> SortOrder:
    """A sort order from its JSON form in table metadata."""
    return SortOrder(obj.get("order-id", 0), tuple(
        SortField(f["source-id"], f["transform"], f["direction"], f["null-order"])
        for f in obj.get("fields", ())))
