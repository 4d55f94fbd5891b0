"""A set of partitions as a partition filter: manifests whose summaries rule out every
member are pruned, judged by the same evaluator as a projected row filter."""

from __future__ import annotations

import math

from meltwater.planner.evaluators import ManifestEvaluator
from meltwater.planner.expressions import AlwaysFalse, AlwaysTrue
from meltwater.planner.files import ManifestContent, ManifestFile, PartitionFieldSummary
from meltwater.planner.partition_set import PartitionSet
from meltwater.planner.partitioning import PartitionField, PartitionSpec
from meltwater.planner.types import DOUBLE, LONG, STRING, NestedField, Schema

SCHEMA = Schema((NestedField(1, "id", LONG), NestedField(2, "cat", STRING),
                 NestedField(3, "x", DOUBLE)))
BY_CAT_X = PartitionSpec(1, (PartitionField(2, 1000, "identity", "cat"),
                             PartitionField(3, 1001, "identity", "x")))
UNPARTITIONED = PartitionSpec(0, ())
SPECS = {0: UNPARTITIONED, 1: BY_CAT_X}


def summary(lower, upper, nulls: bool = False, nans: bool | None = False):
    return PartitionFieldSummary(nulls, nans, lower, upper)


def manifest(*summaries: PartitionFieldSummary, spec_id: int = 1) -> ManifestFile:
    return ManifestFile("m.avro", 1, spec_id, ManifestContent.DATA, 1, 1, 1, 1, 0, 0, 1, 0, 0,
                        summaries)


def may_hold(partitions: PartitionSet, m: ManifestFile) -> bool:
    spec = SPECS[m.partition_spec_id]
    return ManifestEvaluator(spec, partitions.filter_for(spec.spec_id)).may_match(m)


def test_a_manifest_is_pruned_only_when_its_summaries_rule_out_every_member():
    partitions = PartitionSet(SPECS, SCHEMA)
    partitions.add(1, ("b", 1.0))
    partitions.add(1, ("k", None))
    assert may_hold(partitions, manifest(summary("a", "c"), summary(0.0, 2.0)))
    assert not may_hold(partitions, manifest(summary("a", "c"), summary(5.0, 9.0)))
    assert not may_hold(partitions, manifest(summary("c", "j"), summary(0.0, 9.0, True)))
    assert may_hold(partitions, manifest(summary("j", "m"), summary(0.0, 9.0, True)))
    assert not may_hold(partitions, manifest(summary("j", "m"), summary(0.0, 9.0, False)))
    assert may_hold(partitions, manifest(summary("j", "m"), None))  # no summary: unknown
    assert may_hold(partitions, ManifestFile("m.avro", 1, 1, ManifestContent.DATA, 1, 1, 1, 1,
                                             0, 0, 1, 0, 0, None))


def test_nan_members_need_a_summary_that_saw_nan():
    partitions = PartitionSet(SPECS, SCHEMA)
    partitions.add(1, ("b", math.nan))
    assert not may_hold(partitions, manifest(summary("a", "c"), summary(0.0, 2.0, nans=False)))
    assert may_hold(partitions, manifest(summary("a", "c"), summary(0.0, 2.0, nans=True)))
    assert may_hold(partitions, manifest(summary("a", "c"), summary(0.0, 2.0, nans=None)))


def test_other_specs_everything_and_unknown_specs():
    partitions = PartitionSet(SPECS, SCHEMA)
    assert partitions.is_empty()
    partitions.add(1, ("b", 1.0))
    assert isinstance(partitions.filter_for(0), AlwaysFalse)  # no member of that spec
    assert isinstance(partitions.filter_for(7), AlwaysFalse)
    assert (1, ("b", 1.0)) in partitions and (0, ()) not in partitions
    partitions.add(7, ("?",))
    assert isinstance(partitions.filter_for(7), AlwaysTrue)  # a spec the table lacks
    partitions.add_everything()
    assert isinstance(partitions.filter_for(0), AlwaysTrue) and (0, ()) in partitions


def test_thousands_of_partitions_make_a_shallow_filter():
    """A commit deleting from every day of ten years: the filter's depth must not follow
    the number of partitions, or compiling its evaluator would overflow the stack."""
    partitions = PartitionSet(SPECS, SCHEMA)
    for day in range(3650):
        partitions.add(1, (f"c{day:05}", float(day)))
    assert may_hold(partitions, manifest(summary("c00100", "c00100"), summary(100.0, 100.0)))
    assert not may_hold(partitions, manifest(summary("c00100", "c00100"), summary(7.0, 7.0)))
