"""A set of a table's partitions, across specs, usable as a partition filter for planning.

Incremental planning learns which partitions a commit's delete files reach before it
knows which files they reach; `ManifestGroup` then skips every manifest whose partition
summaries rule out all of those partitions. So that it judges summaries the one way it
judges a projected row filter, the set becomes, per spec, the expression "the partition
is one of these" (`filter_for`) and goes through the same `ManifestEvaluator`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from meltwater.planner.expressions import (
    FALSE,
    TRUE,
    BoundPredicate,
    Expression,
    Op,
    and_,
    or_,
)
from meltwater.planner.files import partition_key
from meltwater.planner.partitioning import PartitionSpec
from meltwater.planner.types import IcebergType, PrimitiveType, Schema

PartitionKey = tuple[int, tuple[Any, ...]]  # (spec id, partition tuple)


class PartitionSet:
    """Partitions as (spec id, partition tuple) pairs, or every partition of every spec."""

    def __init__(self, specs: Mapping[int, PartitionSpec], schema: Schema) -> None:
        self.specs = specs
        self.schema = schema
        self.everything = False
        # spec id -> {partition_key(partition): partition}: NaN finds NaN (files.partition_key)
        self._members: dict[int, dict[tuple[Any, ...], tuple[Any, ...]]] = {}

    def add(self, spec_id: int, partition: tuple[Any, ...]) -> None:
        """Add the partition tuple of a file of spec `spec_id`."""
        self._members.setdefault(spec_id, {}).setdefault(partition_key(partition), partition)

    def add_everything(self) -> None:
        """Make the set hold every partition (a global delete reaches them all)."""
        self.everything = True

    def is_empty(self) -> bool:
        """Whether no partition was added: a filter for it would match nothing."""
        return not (self.everything or self._members)

    def __contains__(self, key: PartitionKey) -> bool:
        spec_id, partition = key
        return self.everything or partition_key(partition) in self._members.get(spec_id, ())

    def filter_for(self, spec_id: int) -> Expression:
        """An expression on spec `spec_id`'s partition fields true for this set's partitions
        of that spec (FALSE: none; TRUE: every partition, or the spec is unknown)."""
        if self.everything:
            return TRUE
        members = self._members.get(spec_id)
        if not members:
            return FALSE
        spec = self.specs.get(spec_id)
        if spec is None:
            return TRUE
        types = [f.type for f in spec.partition_type(self.schema).fields]
        return _any_of([_equal_to(spec, types, partition) for partition in members.values()])


def _equal_to(spec: PartitionSpec, types: list[IcebergType],
              partition: tuple[Any, ...]) -> Expression:
    """The partition equals `partition`: each field equal to its value, null or NaN."""
    if len(partition) != len(spec.fields):
        return TRUE  # a tuple not of this spec's shape: nothing can be ruled out
    predicates = []
    for field, type_, value in zip(spec.fields, types, partition, strict=True):
        kind = type_ if isinstance(type_, PrimitiveType) else PrimitiveType("unknown")
        if value is None:
            predicates.append(BoundPredicate(Op.IS_NULL, field.field_id, kind))
        elif isinstance(value, float) and math.isnan(value):
            predicates.append(BoundPredicate(Op.IS_NAN, field.field_id, kind))
        else:
            predicates.append(BoundPredicate(Op.EQ, field.field_id, kind, (value,)))
    return and_(*predicates)


def _any_of(expressions: list[Expression]) -> Expression:
    """A balanced disjunction: evaluators compiled from it recurse log(n) deep, not n (a
    commit may delete from thousands of partitions)."""
    if not expressions:
        return FALSE
    while len(expressions) > 1:
        expressions = [or_(*expressions[i:i + 2]) for i in range(0, len(expressions), 2)]
    return expressions[0]
