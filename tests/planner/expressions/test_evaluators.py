"""Manifest, partition, metrics and row evaluators: what may be skipped and what may not."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from row_oracle import RowEvaluator, evaluate

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.evaluators import ManifestEvaluator, PartitionEvaluator
from meltwater.planner.expressions.filter_evaluators import FilterEvaluators, manifest_evaluator
from meltwater.planner.expressions.metrics_evaluator import InclusiveMetricsEvaluator
from meltwater.planner.expressions.tree import (
    FALSE,
    TRUE,
    BoundPredicate,
    Not,
    Op,
    Predicate,
    and_,
    bind,
    not_,
    or_,
)
from meltwater.planner.spec.files import (
    DataFile,
    FileContent,
    ManifestContent,
    ManifestFile,
    PartitionFieldSummary,
)
from meltwater.planner.spec.literals import to_internal
from meltwater.planner.spec.partitioning import PartitionField, PartitionSpec
from meltwater.planner.spec.types import (
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    NestedField,
    Schema,
)

SCHEMA = Schema((
    NestedField(1, "id", LONG, True),
    NestedField(2, "data", STRING),
    NestedField(3, "score", DOUBLE),
    NestedField(4, "ts", TIMESTAMP),
    NestedField(5, "added", INT, initial_default=7),
    NestedField(6, "opt", LONG),
))


def data_file(content=FileContent.DATA, record_count=10, spec_id=0, partition=(), **metrics):
    return DataFile(content, "s3://b/f.parquet", "PARQUET", spec_id, partition, record_count,
                    1024, **metrics)


def P(op, term, *literals):
    return Predicate(op, term, literals)


def may_match(expr, file, file_field_ids=None):
    return InclusiveMetricsEvaluator(SCHEMA, expr).may_match(file, file_field_ids)


ID_1_TO_4 = dict(value_counts={1: 10}, null_value_counts={1: 0},
                 lower_bounds={1: 1}, upper_bounds={1: 4})


# -- metrics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("content", list(FileContent))
def test_seed_example_delete_file_with_id_bounds_1_to_4_is_skipped_for_id_9(content):
    deletes = data_file(content=content, **ID_1_TO_4)
    assert not may_match(P(Op.EQ, "id", 9), deletes)
    assert may_match(P(Op.EQ, "id", 3), deletes)


@pytest.mark.parametrize(("expr", "expected"), [
    (P(Op.LT, "id", 1), False),
    (P(Op.LT, "id", 2), True),
    (P(Op.LT_EQ, "id", 0), False),
    (P(Op.LT_EQ, "id", 1), True),
    (P(Op.GT, "id", 4), False),
    (P(Op.GT, "id", 3), True),
    (P(Op.GT_EQ, "id", 5), False),
    (P(Op.GT_EQ, "id", 4), True),
    (P(Op.EQ, "id", 0), False),
    (P(Op.EQ, "id", 5), False),
    (P(Op.EQ, "id", 1), True),
    (P(Op.EQ, "id", 4), True),
    (P(Op.NOT_EQ, "id", 1), True),   # bounds are not values: cannot prove all rows equal
    (P(Op.IN, "id", -1, 0, 5, 6), False),
    (P(Op.IN, "id", 0, 3, 9), True),
    (P(Op.NOT_IN, "id", 1, 2, 3, 4), True),
    (not_(P(Op.LT, "id", 5)), False),   # rewritten to id >= 5
    (and_(P(Op.GT, "id", 0), P(Op.LT, "id", 1)), False),
    (or_(P(Op.EQ, "id", 9), P(Op.EQ, "id", 2)), True),
    (P(Op.EQ, "opt", 9), True),          # no metrics for the column: may match
])
def test_bounds(expr, expected):
    assert may_match(expr, data_file(**ID_1_TO_4)) is expected


def test_in_lists_beyond_the_limit_are_not_checked():
    file = data_file(**ID_1_TO_4)
    assert not may_match(P(Op.IN, "id", *range(100, 300)), file)
    assert may_match(P(Op.IN, "id", *range(100, 302)), file)


def test_record_counts():
    assert not may_match(TRUE, data_file(record_count=0))
    assert may_match(P(Op.EQ, "id", 9), data_file(record_count=-1, **ID_1_TO_4))
    assert may_match(P(Op.EQ, "id", 9), data_file())  # no metrics at all
    assert not may_match(FALSE, data_file())


NULLS = data_file(value_counts={6: 10, 2: 10}, null_value_counts={6: 10, 2: 0},
                  lower_bounds={2: "a"}, upper_bounds={2: "z"})


@pytest.mark.parametrize(("expr", "expected"), [
    (P(Op.IS_NULL, "opt"), True),
    (P(Op.NOT_NULL, "opt"), False),
    (P(Op.EQ, "opt", 1), False),
    (P(Op.LT, "opt", 1), False),
    (P(Op.GT_EQ, "opt", 1), False),
    (P(Op.IN, "opt", 1, 2), False),
    (P(Op.NOT_EQ, "opt", 1), True),
    (P(Op.IS_NULL, "data"), False),    # null count 0
    (P(Op.NOT_NULL, "data"), True),
    (P(Op.STARTS_WITH, "data", "m"), True),
])
def test_null_counts(expr, expected):
    assert may_match(expr, NULLS) is expected


def test_starts_with_on_truncated_bounds():
    # a writer truncated min "abcxyz" to "abc" and max "abdxyz" to "abe" (incremented)
    file = data_file(value_counts={2: 5}, null_value_counts={2: 0},
                     lower_bounds={2: "abc"}, upper_bounds={2: "abe"})
    for prefix, expected in [("ab", True), ("abc", True), ("abd", True), ("abcdef", True),
                             ("abe", True), ("abf", False), ("abb", False), ("aa", False),
                             ("b", False), ("", True)]:
        assert may_match(P(Op.STARTS_WITH, "data", prefix), file) is expected, prefix


def test_not_starts_with():
    same_prefix = dict(value_counts={2: 5}, lower_bounds={2: "abc"}, upper_bounds={2: "abz"})
    assert not may_match(P(Op.NOT_STARTS_WITH, "data", "ab"),
                         data_file(null_value_counts={2: 0}, **same_prefix))
    assert may_match(P(Op.NOT_STARTS_WITH, "data", "ab"),  # a null does not start with "ab"
                     data_file(null_value_counts={2: 1}, **same_prefix))
    assert may_match(P(Op.NOT_STARTS_WITH, "data", "ab"),  # null count unknown
                     data_file(**same_prefix))
    assert may_match(P(Op.NOT_STARTS_WITH, "data", "abc"),
                     data_file(null_value_counts={2: 0}, **same_prefix))
    assert may_match(P(Op.NOT_STARTS_WITH, "data", "abcd"),  # lower shorter than prefix
                     data_file(null_value_counts={2: 0}, **same_prefix))


def floats(**metrics):
    return data_file(**metrics)


@pytest.mark.parametrize(("expr", "metrics", "expected"), [
    (P(Op.IS_NAN, "score"), dict(nan_value_counts={3: 0}), False),
    (P(Op.IS_NAN, "score"), dict(nan_value_counts={3: 1}), True),
    (P(Op.IS_NAN, "score"), dict(), True),
    (P(Op.IS_NAN, "score"), dict(value_counts={3: 4}, null_value_counts={3: 4}), False),
    (P(Op.NOT_NAN, "score"), dict(value_counts={3: 4}, nan_value_counts={3: 4}), False),
    (P(Op.NOT_NAN, "score"), dict(value_counts={3: 4}, nan_value_counts={3: 3}), True),
    # only NaNs: no value compares
    (P(Op.LT, "score", 1.0), dict(value_counts={3: 4}, nan_value_counts={3: 4}), False),
    (P(Op.EQ, "score", 1.0), dict(value_counts={3: 4}, nan_value_counts={3: 4}), False),
    (P(Op.IN, "score", 1.0, 2.0), dict(value_counts={3: 4}, nan_value_counts={3: 4}), False),
    # a NaN bound (old ORC writers) is distrusted
    (P(Op.LT, "score", 1.0), dict(lower_bounds={3: math.nan}, upper_bounds={3: math.nan}), True),
    (P(Op.GT, "score", 1.0), dict(lower_bounds={3: math.nan}, upper_bounds={3: math.nan}), True),
    (P(Op.EQ, "score", 1.0), dict(lower_bounds={3: math.nan}, upper_bounds={3: math.nan}), True),
    (P(Op.IN, "score", 1.0, 3.0), dict(lower_bounds={3: math.nan}, upper_bounds={3: 2.0}),
     True),
    # NaN-free bounds with some NaNs still prune comparisons (NaN compares false)
    (P(Op.GT, "score", 5.0), dict(value_counts={3: 4}, nan_value_counts={3: 2},
                                  lower_bounds={3: 1.0}, upper_bounds={3: 2.0}), False),
    (P(Op.GT, "score", -math.inf), dict(lower_bounds={3: -math.inf}, upper_bounds={3: 2.0}),
     True),
])
def test_nan_aware_metrics(expr, metrics, expected):
    assert may_match(expr, floats(**metrics)) is expected


def test_float_column_with_promoted_float_bounds():
    schema = Schema((NestedField(1, "f", FLOAT),))
    file = data_file(lower_bounds={1: 0.10000000149011612}, upper_bounds={1: 0.5})
    # 0.1 binds to the float nearest 0.1, equal to the stored bound
    assert InclusiveMetricsEvaluator(schema, P(Op.EQ, "f", 0.1)).may_match(file)
    assert not InclusiveMetricsEvaluator(schema, P(Op.LT, "f", 0.1)).may_match(file)


def test_bounds_of_an_unexpected_type_never_prune():
    file = data_file(lower_bounds={1: b"\x01"}, upper_bounds={1: b"\x04"})
    assert may_match(P(Op.EQ, "id", 9), file)


def test_column_absent_from_the_data_file_reads_as_null_or_initial_default():
    file = data_file(**ID_1_TO_4)
    present = frozenset({1, 2})
    assert not may_match(P(Op.EQ, "opt", 5), file, present)
    assert may_match(P(Op.IS_NULL, "opt"), file, present)
    assert not may_match(P(Op.NOT_NULL, "opt"), file, present)
    assert may_match(P(Op.EQ, "added", 7), file, present)       # initial-default 7
    assert not may_match(P(Op.EQ, "added", 5), file, present)
    assert not may_match(P(Op.IS_NULL, "added"), file, present)
    assert may_match(P(Op.EQ, "opt", 5), file)                   # unknown schema: may match


def test_timestamp_bounds():
    ts = lambda s: to_internal(s, TIMESTAMP)  # noqa: E731
    file = data_file(lower_bounds={4: ts("2024-01-01T00:00:00")},
                     upper_bounds={4: ts("2024-01-31T23:59:59")})
    assert not may_match(P(Op.GT, "ts", "2024-02-01T00:00:00"), file)
    assert may_match(P(Op.GT, "ts", "2024-01-31T00:00:00"), file)
    assert not may_match(P(Op.LT, "ts", "2024-01-01"), file)


# -- manifests ---------------------------------------------------------------------------------


SPEC = PartitionSpec(1, (PartitionField(4, 1000, "day", "ts_day"),
                         PartitionField(2, 1001, "identity", "data"),
                         PartitionField(3, 1002, "identity", "score")))


def manifest(*summaries, spec_id=1):
    return ManifestFile("m.avro", 100, spec_id, ManifestContent.DATA, 1, 1, 1, 1, 0, 0, 10, 0,
                        0, summaries if summaries else None)


def summary(lower=None, upper=None, contains_null=False, contains_nan=None):
    return PartitionFieldSummary(contains_null, contains_nan, lower, upper)


def day(text):
    return to_internal(text, DATE)


JAN = summary(day("2024-01-01"), day("2024-01-31"))
STR = summary("b", "d")
NUM = summary(1.0, 2.0, contains_nan=False)


def manifest_may_match(expr, *summaries):
    return manifest_evaluator(SPEC, SCHEMA, expr).may_match(manifest(*summaries))


@pytest.mark.parametrize(("expr", "expected"), [
    (P(Op.GT, "ts", "2024-01-31T10:00:00"), True),
    (P(Op.GT, "ts", "2024-02-01T00:00:00"), False),
    (P(Op.GT_EQ, "ts", "2024-02-01T00:00:00"), False),
    (P(Op.LT, "ts", "2024-01-01T00:00:00"), False),
    (P(Op.LT, "ts", "2024-01-01T00:00:01"), True),
    (P(Op.EQ, "ts", "2024-03-01T00:00:00"), False),
    (P(Op.EQ, "ts", "2024-01-15T12:00:00"), True),
    (P(Op.IN, "ts", "2023-01-15T12:00:00", "2024-03-01T00:00:00"), False),
    (P(Op.IN, "ts", "2023-01-15T12:00:00", "2024-01-09T00:00:00"), True),
    (P(Op.NOT_EQ, "ts", "2024-01-15T12:00:00"), True),
    (P(Op.EQ, "data", "a"), False),
    (P(Op.EQ, "data", "c"), True),
    (P(Op.STARTS_WITH, "data", "e"), False),
    (P(Op.STARTS_WITH, "data", "a"), False),
    (P(Op.STARTS_WITH, "data", "ca"), True),
    (P(Op.NOT_STARTS_WITH, "data", "c"), True),
    (P(Op.IS_NULL, "data"), False),
    (P(Op.NOT_NULL, "data"), True),
    (P(Op.IS_NAN, "score"), False),
    (P(Op.GT, "score", 2.0), False),
    (P(Op.EQ, "id", 5), True),  # not a partition source
    (or_(P(Op.EQ, "data", "a"), P(Op.EQ, "data", "c")), True),
    (and_(P(Op.EQ, "data", "c"), P(Op.GT, "score", 2.0)), False),
])
def test_manifest_summaries(expr, expected):
    assert manifest_may_match(expr, JAN, STR, NUM) is expected


def test_manifest_without_summaries_may_match():
    evaluator = manifest_evaluator(SPEC, SCHEMA, P(Op.EQ, "data", "zzz"))
    assert evaluator.may_match(manifest())


def test_manifest_null_and_nan_summaries():
    all_null = summary(contains_null=True)
    evaluator = lambda expr: manifest_evaluator(SPEC, SCHEMA, expr)  # noqa: E731
    m = manifest(JAN, all_null, summary(contains_null=True, contains_nan=False))
    assert not evaluator(P(Op.NOT_NULL, "data")).may_match(m)
    assert evaluator(P(Op.IS_NULL, "data")).may_match(m)
    assert not evaluator(P(Op.EQ, "data", "c")).may_match(m)
    assert not evaluator(P(Op.STARTS_WITH, "data", "c")).may_match(m)
    assert not evaluator(P(Op.NOT_NULL, "score")).may_match(m)
    # float all-null needs contains_nan known false: NaN values have no bounds either
    m = manifest(JAN, STR, summary(contains_null=True, contains_nan=True))
    assert evaluator(P(Op.NOT_NULL, "score")).may_match(m)
    assert evaluator(P(Op.IS_NAN, "score")).may_match(m)
    assert not evaluator(P(Op.LT, "score", 1.0)).may_match(m)
    only_nan = manifest(JAN, STR, summary(contains_nan=True))
    assert not evaluator(P(Op.NOT_NAN, "score")).may_match(only_nan)
    assert not evaluator(P(Op.GT, "score", 1.0)).may_match(only_nan)
    unknown_nan = manifest(JAN, STR, summary(1.0, 2.0, contains_nan=None))
    assert evaluator(P(Op.IS_NAN, "score")).may_match(unknown_nan)


def test_manifest_summary_without_bounds_or_flags_is_unknown_not_empty():
    m = manifest(summary(), STR, NUM)
    assert manifest_evaluator(SPEC, SCHEMA, P(Op.EQ, "ts", "2024-01-01T00:00:00")
                                            ).may_match(m)


def test_manifest_not_starts_with_needs_both_bounds_in_prefix():
    m = manifest(JAN, summary("cab", "cat"), NUM)
    evaluator = lambda expr: manifest_evaluator(SPEC, SCHEMA, expr)  # noqa: E731
    assert not evaluator(P(Op.NOT_STARTS_WITH, "data", "ca")).may_match(m)
    assert evaluator(P(Op.NOT_STARTS_WITH, "data", "cab")).may_match(m)
    with_null = manifest(JAN, summary("cab", "cat", contains_null=True), NUM)
    assert evaluator(P(Op.NOT_STARTS_WITH, "data", "ca")).may_match(with_null)


def test_manifest_evaluator_rejects_predicates_off_the_spec():
    with pytest.raises(FilterError, match="not on a field of partition spec"):
        ManifestEvaluator(SPEC, BoundPredicate(Op.EQ, 1, LONG, (1,), "id"))


# -- partitions and rows -----------------------------------------------------------------------


def test_partition_evaluator_on_tuples():
    from meltwater.planner.expressions.projections import inclusive_projection

    projected = inclusive_projection(SPEC, SCHEMA).project(
        and_(P(Op.GT_EQ, "ts", "2024-01-02T00:00:00"), P(Op.STARTS_WITH, "data", "c")))
    evaluator = PartitionEvaluator(SPEC, projected)
    assert evaluator.eval((day("2024-01-02"), "cat", 1.0))
    assert not evaluator.eval((day("2024-01-01"), "cat", 1.0))
    assert not evaluator.eval((day("2024-01-05"), "dog", 1.0))
    assert not evaluator.eval((None, "cat", 1.0))


@pytest.mark.parametrize(("expr", "row", "expected"), [
    (P(Op.EQ, "id", 1), {1: 1}, True),
    (P(Op.EQ, "opt", 1), {}, False),                      # absent = null
    (P(Op.NOT_EQ, "opt", 1), {}, True),                   # null != 1, as after rewrite_not
    (Not(P(Op.EQ, "opt", 1)), {}, True),
    (P(Op.LT, "opt", 1), {6: None}, False),
    (P(Op.NOT_IN, "opt", 1, 2), {6: None}, True),
    (P(Op.IN, "opt", 1, 2), {6: 2}, True),
    (P(Op.IS_NULL, "opt"), {6: None}, True),
    (P(Op.NOT_NULL, "opt"), {6: 0}, True),
    (P(Op.IS_NAN, "score"), {3: math.nan}, True),
    (P(Op.IS_NAN, "score"), {3: None}, False),
    (P(Op.NOT_NAN, "score"), {3: None}, True),
    (P(Op.GT, "score", 1.0), {3: math.nan}, False),       # IEEE: NaN compares false
    (P(Op.NOT_EQ, "score", 1.0), {3: math.nan}, True),
    (P(Op.STARTS_WITH, "data", "ab"), {2: "abc"}, True),
    (P(Op.NOT_STARTS_WITH, "data", "ab"), {2: "abc"}, False),
    (P(Op.NOT_STARTS_WITH, "data", "ab"), {2: None}, True),
    (or_(P(Op.EQ, "id", 1), P(Op.EQ, "id", 2)), {1: 2}, True),
    (and_(P(Op.EQ, "id", 1), P(Op.EQ, "id", 2)), {1: 2}, False),
])
def test_row_evaluation(expr, row, expected):
    assert evaluate(bind(expr, SCHEMA), row) is expected


def test_row_evaluator_needs_bound_expressions():
    with pytest.raises(FilterError, match="bind the filter"):
        RowEvaluator(P(Op.EQ, "id", 1))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-10, 10)), min_size=1, max_size=8),
       st.sampled_from([Op.LT, Op.LT_EQ, Op.GT, Op.GT_EQ, Op.EQ, Op.NOT_EQ, Op.IS_NULL,
                        Op.NOT_NULL, Op.IN, Op.NOT_IN]),
       st.integers(-12, 12))
def test_metrics_never_skip_a_file_holding_a_matching_row(values, op, literal):
    """Metrics computed from the rows themselves never rule out a row that matches."""
    literals = () if op.is_unary else (literal, literal + 3) if op.is_set else (literal,)
    expr = bind(P(op, "opt", *literals), SCHEMA)
    present = [v for v in values if v is not None]
    file = data_file(record_count=len(values), value_counts={6: len(values)},
                     null_value_counts={6: len(values) - len(present)},
                     lower_bounds={6: min(present)} if present else {},
                     upper_bounds={6: max(present)} if present else {})
    if any(evaluate(expr, {6: v}) for v in values):
        assert InclusiveMetricsEvaluator(SCHEMA, expr).may_match(file)


# -- the per-scan cache ------------------------------------------------------------------------


def test_filter_evaluators_cache_per_spec_and_combine_partition_and_metrics():
    evaluators = FilterEvaluators(SCHEMA, and_(P(Op.EQ, "data", "c"), P(Op.EQ, "id", 9)),
                                  {1: SPEC, 0: PartitionSpec(0, ())})
    assert evaluators.manifest_evaluator(1) is evaluators.manifest_evaluator(1)
    assert evaluators.partition_evaluator(1) is evaluators.partition_evaluator(1)
    assert evaluators.residual_evaluator(1) is evaluators.residual_evaluator(1)
    assert evaluators.metrics_evaluator is evaluators.metrics_evaluator
    assert evaluators.partition_filter(0) == TRUE
    assert not evaluators.may_match(manifest(JAN, summary("d", "e"), NUM))
    assert evaluators.may_match(manifest(JAN, STR, NUM))
    in_c = data_file(spec_id=1, partition=(day("2024-01-01"), "c", 1.0), **ID_1_TO_4)
    assert not evaluators.file_may_match(in_c)                       # id bounds 1..4
    in_d = data_file(spec_id=1, partition=(day("2024-01-01"), "d", 1.0))
    assert not evaluators.file_may_match(in_d)                       # partition "d"
    unpartitioned = data_file(spec_id=0)
    assert evaluators.file_may_match(unpartitioned)
    assert evaluators.residual_evaluator(1).residual_for((day("2024-01-01"), "c", 1.0)) == \
        bind(P(Op.EQ, "id", 9), SCHEMA)
    with pytest.raises(FilterError, match="no partition spec with id 7"):
        evaluators.manifest_evaluator(7)


def test_metrics_evaluator_is_fast_enough_for_every_manifest_entry():
    import time

    evaluator = InclusiveMetricsEvaluator(SCHEMA, and_(P(Op.GT, "id", 100),
                                                       P(Op.STARTS_WITH, "data", "x")))
    file = data_file(value_counts={1: 10, 2: 10}, null_value_counts={1: 0, 2: 0},
                     lower_bounds={1: 1, 2: "a"}, upper_bounds={1: 400, 2: "z"})
    start = time.perf_counter()
    for _ in range(20_000):
        evaluator.may_match(file)
    assert time.perf_counter() - start < 2.0  # ~10 µs per file leaves ample margin


# -- interop: files Iceberg Java wrote ---------------------------------------------------------


def _decoded(pairs, lookup):
    """{field id: internal value} of an Avro key/value list, for top-level primitives."""
    from meltwater.planner.spec.conversions import from_bytes

    out = {}
    for pair in pairs or ():
        field = lookup.get(pair["key"])
        if field is not None:
            out[pair["key"]] = from_bytes(field.type, pair["value"])
    return out



def _local(path: str) -> str:
    """A corpus path as this machine opens it: Iceberg Java writes plain paths, pyiceberg
    `file://` URIs."""
    return path.removeprefix("file://")

def test_iceberg_java_partitions_bounds_and_pruning_agree(corpus):
    """Every Parquet data file of the corpus: our transforms reproduce the partition values
    Iceberg Java wrote, decoded bounds enclose the file's values, and no evaluator skips a
    file or manifest for an equality filter on a value the file holds."""
    import json
    from collections import Counter
    from pathlib import Path

    import fastavro
    import pyarrow.parquet as pq

    from meltwater.planner.spec.partitioning import parse_spec
    from meltwater.planner.spec.transforms import parse_transform
    from meltwater.planner.spec.types import PrimitiveType, parse_schema

    checked = Counter()
    for scenario in corpus.scenarios.values():
        meta = json.loads(Path(_local(scenario.metadata_location)).read_text())
        schema = parse_schema(next(s for s in meta["schemas"]
                                   if s["schema-id"] == meta["current-schema-id"]))
        lookup = {f.field_id: f for f in schema.fields if isinstance(f.type, PrimitiveType)}
        specs = {s["spec-id"]: parse_spec(s) for s in meta["partition-specs"]}
        seen = set()
        for snapshot in meta["snapshots"]:
            with open(_local(snapshot["manifest-list"]), "rb") as handle:
                manifest_rows = [r for r in fastavro.reader(handle) if r.get("content", 0) == 0]
            for row in manifest_rows:
                if row["manifest_path"] in seen:
                    continue
                seen.add(row["manifest_path"])
                spec = specs[row["partition_spec_id"]]
                result_types = [f.result_type(lookup[f.source_id].type)
                                if f.source_id in lookup else None for f in spec.fields]
                summaries = None
                if row.get("partitions") is not None and None not in result_types:
                    from meltwater.planner.spec.conversions import from_bytes

                    summaries = tuple(PartitionFieldSummary(
                        s["contains_null"], s.get("contains_nan"),
                        None if s["lower_bound"] is None else from_bytes(t, s["lower_bound"]),
                        None if s["upper_bound"] is None else from_bytes(t, s["upper_bound"]))
                        for s, t in zip(row["partitions"], result_types, strict=True))
                manifest_file = ManifestFile(row["manifest_path"], 0, spec.spec_id,
                                             ManifestContent.DATA, 0, 0, None, None, None,
                                             None, None, None, None, summaries)
                with open(_local(row["manifest_path"]), "rb") as handle:
                    entries = [e for e in fastavro.reader(handle) if e["status"] != 2]
                for entry in entries:
                    df = entry["data_file"]
                    data_path = _local(df["file_path"])
                    if df["file_format"] != "PARQUET" or not Path(data_path).exists():
                        continue
                    table = pq.read_table(data_path)
                    columns = {}
                    for i, arrow_field in enumerate(table.schema):
                        fid = int((arrow_field.metadata or {}).get(b"PARQUET:field_id", -1))
                        if fid in lookup:
                            columns[fid] = [to_internal(v, lookup[fid].type)
                                            for v in table.column(i).to_pylist()]
                    partition = tuple(
                        None if v is None or t is None else to_internal(v, t)
                        for v, t in zip(df["partition"].values(), result_types, strict=True))
                    # 1. partition values
                    for pos, field in enumerate(spec.fields):
                        if field.source_id not in columns or result_types[pos] is None:
                            continue
                        transform = parse_transform(field.transform,
                                                    lookup[field.source_id].type)
                        for value in columns[field.source_id]:
                            assert transform.apply(value) == partition[pos], \
                                (scenario.name, field, value, partition)
                            checked["partition values"] += 1
                    # 2. bounds enclose the values
                    file = DataFile(
                        FileContent.DATA, df["file_path"], "PARQUET", spec.spec_id, partition,
                        df["record_count"], df["file_size_in_bytes"],
                        value_counts={p["key"]: p["value"] for p in df["value_counts"] or ()},
                        null_value_counts={p["key"]: p["value"]
                                           for p in df["null_value_counts"] or ()},
                        nan_value_counts={p["key"]: p["value"]
                                          for p in df["nan_value_counts"] or ()},
                        lower_bounds=_decoded(df["lower_bounds"], lookup),
                        upper_bounds=_decoded(df["upper_bounds"], lookup))
                    for fid, values in columns.items():
                        present = [v for v in values if v is not None and v == v]
                        if fid in file.lower_bounds and present:
                            assert file.lower_bounds[fid] <= min(present), (scenario.name, fid)
                            assert file.upper_bounds[fid] >= max(present), (scenario.name, fid)
                            checked["bounds"] += 1
                    # 3. equality on a held value is never pruned; beyond the bounds it is
                    evaluators = FilterEvaluators(schema, TRUE, specs)
                    for fid, values in columns.items():
                        name = schema.column_name(fid)
                        kind = lookup[fid].type.kind
                        for value in {v for v in values[:3] if v is not None and v == v}:
                            expr = Predicate(Op.EQ, name, (value,))
                            scan = FilterEvaluators(schema, expr, specs)
                            assert scan.file_may_match(file), (scenario.name, expr)
                            assert scan.may_match(manifest_file), (scenario.name, expr)
                            checked["equality filters"] += 1
                        upper = file.upper_bounds.get(fid)
                        if kind in ("int", "long") and upper is not None:
                            beyond = Predicate(Op.GT, name, (upper,))
                            assert not InclusiveMetricsEvaluator(schema, beyond).may_match(file)
                            checked["pruned"] += 1
                    assert evaluators.file_may_match(file)
    assert checked["partition values"] > 100, checked
    assert checked["bounds"] > 100 and checked["equality filters"] > 100, checked
    assert checked["pruned"] > 10, checked
