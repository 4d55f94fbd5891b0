"""Inclusive and strict projection through every transform, and residuals."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from row_oracle import evaluate

from meltwater.planner.expressions.projections import (
    Projection,
    inclusive_projection,
    project_predicate,
    residual_evaluator,
)
from meltwater.planner.expressions.tree import (
    FALSE,
    TRUE,
    BoundPredicate,
    Op,
    Predicate,
    and_,
    bind,
    not_,
    or_,
)
from meltwater.planner.spec.conversions import decimal_from_unscaled
from meltwater.planner.spec.literals import to_internal
from meltwater.planner.spec.partitioning import PartitionField, PartitionSpec
from meltwater.planner.spec.transforms import parse_transform
from meltwater.planner.spec.types import (
    BINARY,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMPTZ,
    NestedField,
    PrimitiveType,
    Schema,
    primitive,
)

TIMESTAMP_NS = PrimitiveType("timestamp_ns")
DEC = primitive("decimal(9,2)")
HOUR = 3_600_000_000
DAY = 24 * HOUR
PART_ID = 1000


def one_field(type_, transform: str, name: str = "p"):
    """Schema with column `x` (id 1) of `type_`, spec with one field on it."""
    schema = Schema((NestedField(1, "x", type_), NestedField(2, "y", LONG)))
    spec = PartitionSpec(1, (PartitionField(1, PART_ID, transform, name),))
    return schema, spec


def project(type_, transform, op, *literals, strict=False):
    schema, spec = one_field(type_, transform)
    return Projection(spec, schema, strict=strict).project(Predicate(op, "x", literals))


def part(op, *literals, type_=INT):
    """The expected partition predicate."""
    return BoundPredicate(op, PART_ID, type_, literals, "p")


# -- identity ----------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize(("op", "literals"), [
    (Op.LT, (5,)), (Op.LT_EQ, (5,)), (Op.GT, (5,)), (Op.GT_EQ, (5,)), (Op.EQ, (5,)),
    (Op.NOT_EQ, (5,)), (Op.IN, (3, 4)), (Op.NOT_IN, (3, 4)), (Op.IS_NULL, ()),
    (Op.NOT_NULL, ()),
])
def test_identity_keeps_every_predicate(op, literals, strict):
    assert project(LONG, "identity", op, *literals, strict=strict) == \
        part(op, *literals, type_=LONG)


def test_identity_keeps_nan_and_prefix_predicates():
    for strict in (False, True):
        assert project(DOUBLE, "identity", Op.IS_NAN, strict=strict) == \
            part(Op.IS_NAN, type_=DOUBLE)
        assert project(STRING, "identity", Op.NOT_STARTS_WITH, "ab", strict=strict) == \
            part(Op.NOT_STARTS_WITH, "ab", type_=STRING)


# -- bucket ------------------------------------------------------------------------------------


def test_bucket_inclusive():
    b = parse_transform("bucket[10]", INT).apply
    assert project(INT, "bucket[10]", Op.EQ, 34) == part(Op.EQ, b(34))
    assert project(INT, "bucket[10]", Op.IN, 34, 35, 36) == \
        part(Op.IN, *sorted({b(34), b(35), b(36)}))
    for op in (Op.NOT_EQ, Op.LT, Op.LT_EQ, Op.GT, Op.GT_EQ):
        assert project(INT, "bucket[10]", op, 34) == TRUE
    assert project(INT, "bucket[10]", Op.NOT_IN, 34, 35) == TRUE
    assert project(INT, "bucket[10]", Op.IS_NULL) == part(Op.IS_NULL)
    assert project(STRING, "bucket[16]", Op.EQ, "iceberg") == part(Op.EQ, 9)


def test_bucket_strict():
    b = parse_transform("bucket[10]", INT).apply
    assert project(INT, "bucket[10]", Op.NOT_EQ, 34, strict=True) == part(Op.NOT_EQ, b(34))
    assert project(INT, "bucket[10]", Op.NOT_IN, 34, 35, strict=True) == \
        part(Op.NOT_IN, *sorted({b(34), b(35)}))
    for op in (Op.EQ, Op.LT, Op.LT_EQ, Op.GT, Op.GT_EQ):
        assert project(INT, "bucket[10]", op, 34, strict=True) == FALSE
    assert project(INT, "bucket[10]", Op.NOT_NULL, strict=True) == part(Op.NOT_NULL)


def test_bucket_in_collapsing_to_one_bucket_becomes_equality():
    # 34 and 1034 share a bucket out of 1? any values share the only bucket
    assert project(INT, "bucket[1]", Op.IN, 34, 1034) == part(Op.EQ, 0)


# -- truncate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "value", "inclusive", "strict"), [
    (Op.LT, 100, (Op.LT_EQ, 90), (Op.LT, 100)),
    (Op.LT_EQ, 100, (Op.LT_EQ, 100), (Op.LT, 100)),
    (Op.LT_EQ, 99, (Op.LT_EQ, 90), (Op.LT, 100)),
    (Op.GT, 100, (Op.GT_EQ, 100), (Op.GT, 100)),
    (Op.GT, 99, (Op.GT_EQ, 100), (Op.GT, 90)),
    (Op.GT_EQ, 100, (Op.GT_EQ, 100), (Op.GT, 90)),
    (Op.EQ, 100, (Op.EQ, 100), None),
    (Op.NOT_EQ, 100, None, (Op.NOT_EQ, 100)),
    # negatives floor: truncate[10](-1) = -10
    (Op.LT, -5, (Op.LT_EQ, -10), (Op.LT, -10)),
    (Op.LT_EQ, -10, (Op.LT_EQ, -10), (Op.LT, -10)),  # truncate(-9) = -10
    (Op.GT, -10, (Op.GT_EQ, -10), (Op.GT, -10)),
    (Op.GT_EQ, -1, (Op.GT_EQ, -10), (Op.GT, -10)),
    (Op.EQ, -1, (Op.EQ, -10), None),
])
def test_truncate_integers(op, value, inclusive, strict):
    for type_ in (INT, LONG):
        expected_inclusive = part(inclusive[0], inclusive[1], type_=type_) if inclusive else TRUE
        expected_strict = part(strict[0], strict[1], type_=type_) if strict else FALSE
        assert project(type_, "truncate[10]", op, value) == expected_inclusive
        assert project(type_, "truncate[10]", op, value, strict=True) == expected_strict


def test_truncate_integer_sets():
    assert project(INT, "truncate[10]", Op.IN, 1, 5, 12) == part(Op.IN, 0, 10)
    assert project(INT, "truncate[10]", Op.IN, 1, 5) == part(Op.EQ, 0)
    assert project(INT, "truncate[10]", Op.NOT_IN, 1, 12, strict=True) == \
        part(Op.NOT_IN, 0, 10)
    assert project(INT, "truncate[10]", Op.NOT_IN, 1, 12) == TRUE
    assert project(INT, "truncate[10]", Op.IN, 1, 12, strict=True) == FALSE


@pytest.mark.parametrize(("op", "value", "inclusive", "strict"), [
    (Op.LT, "100.00", (Op.LT_EQ, "99.90"), (Op.LT, "100.00")),
    (Op.LT_EQ, "100.00", (Op.LT_EQ, "100.00"), (Op.LT, "100.00")),
    (Op.GT, "100.00", (Op.GT_EQ, "100.00"), (Op.GT, "100.00")),
    (Op.GT_EQ, "100.00", (Op.GT_EQ, "100.00"), (Op.GT, "99.90")),
    (Op.EQ, "-0.05", (Op.EQ, "-0.10"), None),
    (Op.NOT_EQ, "100.05", None, (Op.NOT_EQ, "100.00")),
])
def test_truncate_decimals_step_by_the_scale(op, value, inclusive, strict):
    expected_inclusive = part(inclusive[0], Decimal(inclusive[1]), type_=DEC) \
        if inclusive else TRUE
    expected_strict = part(strict[0], Decimal(strict[1]), type_=DEC) if strict else FALSE
    assert project(DEC, "truncate[10]", op, Decimal(value)) == expected_inclusive
    assert project(DEC, "truncate[10]", op, Decimal(value), strict=True) == expected_strict


@pytest.mark.parametrize(("op", "value", "inclusive", "strict"), [
    (Op.LT, "abcde", (Op.LT_EQ, "abc"), (Op.LT, "abc")),
    (Op.LT_EQ, "abcde", (Op.LT_EQ, "abc"), (Op.LT, "abc")),
    (Op.GT, "abcde", (Op.GT_EQ, "abc"), (Op.GT, "abc")),
    (Op.GT_EQ, "ab", (Op.GT_EQ, "ab"), (Op.GT, "ab")),
    (Op.EQ, "abcde", (Op.EQ, "abc"), None),
    (Op.NOT_EQ, "abcde", None, (Op.NOT_EQ, "abc")),
    (Op.STARTS_WITH, "ab", (Op.STARTS_WITH, "ab"), (Op.STARTS_WITH, "ab")),
    (Op.STARTS_WITH, "abc", (Op.EQ, "abc"), (Op.EQ, "abc")),
    (Op.STARTS_WITH, "abcde", (Op.EQ, "abc"), None),
    (Op.NOT_STARTS_WITH, "ab", (Op.NOT_STARTS_WITH, "ab"), (Op.NOT_STARTS_WITH, "ab")),
    (Op.NOT_STARTS_WITH, "abc", (Op.NOT_EQ, "abc"), (Op.NOT_EQ, "abc")),
    (Op.NOT_STARTS_WITH, "abcde", None, (Op.NOT_STARTS_WITH, "abc")),
])
def test_truncate_strings(op, value, inclusive, strict):
    expected_inclusive = part(*inclusive, type_=STRING) if inclusive else TRUE
    expected_strict = part(*strict, type_=STRING) if strict else FALSE
    assert project(STRING, "truncate[3]", op, value) == expected_inclusive
    assert project(STRING, "truncate[3]", op, value, strict=True) == expected_strict


def test_truncate_binary():
    assert project(BINARY, "truncate[2]", Op.EQ, b"\x01\x02\x03") == \
        part(Op.EQ, b"\x01\x02", type_=BINARY)
    assert project(BINARY, "truncate[2]", Op.GT, b"\x01\x02\x03", strict=True) == \
        part(Op.GT, b"\x01\x02", type_=BINARY)
    assert project(BINARY, "truncate[2]", Op.IN, b"\x01\x02\x03", b"\x01\x02\x04") == \
        part(Op.EQ, b"\x01\x02", type_=BINARY)


# -- time transforms ---------------------------------------------------------------------------


def ts(text: str) -> int:
    return to_internal(text, TIMESTAMP)


def test_seed_example_ts_greater_than_projects_to_day_at_least():
    x = "2024-03-05T10:15:00"
    assert project(TIMESTAMP, "day", Op.GT, x) == part(Op.GT_EQ, to_internal("2024-03-05", DATE),
                                                       type_=DATE)
    # the last microsecond of a day moves the bound to the next day, still inclusive
    assert project(TIMESTAMP, "day", Op.GT, "2024-03-05T23:59:59.999999") == \
        part(Op.GT_EQ, to_internal("2024-03-06", DATE), type_=DATE)


@pytest.mark.parametrize(("transform", "op", "value", "inclusive", "strict"), [
    # after the epoch: plain monotone projection
    ("day", Op.LT, "2017-12-01T00:00:00", (Op.LT_EQ, 17500), (Op.LT, 17501)),
    ("day", Op.LT_EQ, "2017-12-01T10:00:00", (Op.LT_EQ, 17501), (Op.LT, 17501)),
    ("day", Op.GT_EQ, "2017-12-01T00:00:00", (Op.GT_EQ, 17501), (Op.GT, 17500)),
    ("day", Op.EQ, "2017-12-01T10:00:00", (Op.EQ, 17501), None),
    ("day", Op.NOT_EQ, "2017-12-01T10:00:00", None, (Op.NOT_EQ, 17501)),
    ("month", Op.LT, "2017-12-01T00:00:00", (Op.LT_EQ, 574), (Op.LT, 575)),
    ("month", Op.GT, "2017-12-01T00:00:00", (Op.GT_EQ, 575), (Op.GT, 575)),
    ("year", Op.GT_EQ, "2017-01-01T00:00:00", (Op.GT_EQ, 47), (Op.GT, 46)),
    ("hour", Op.LT_EQ, "1970-01-01T10:00:00", (Op.LT_EQ, 10), (Op.LT, 10)),
    # before the epoch: Iceberg Java's corrections for pre-0.13 partition values
    ("day", Op.LT, "1969-12-30T00:00:00", (Op.LT_EQ, -2), (Op.LT, -2)),
    ("day", Op.LT_EQ, "1969-12-30T10:00:00", (Op.LT_EQ, -1), (Op.LT, -2)),
    ("day", Op.GT, "1969-12-30T10:00:00", (Op.GT_EQ, -2), (Op.GT, -1)),
    ("day", Op.GT_EQ, "1969-12-30T00:00:00", (Op.GT_EQ, -2), (Op.GT, -2)),
    ("day", Op.EQ, "1969-12-30T10:00:00", (Op.IN, -2, -1), None),
    ("day", Op.NOT_EQ, "1969-12-30T10:00:00", None, (Op.NOT_IN, -2, -1)),
    ("year", Op.EQ, "1969-05-01T00:00:00", (Op.IN, -1, 0), None),
    ("year", Op.GT_EQ, "1969-05-01T00:00:00", (Op.GT_EQ, -1), (Op.GT, 0)),
    ("month", Op.LT, "1969-12-01T00:00:00", (Op.LT_EQ, -1), (Op.LT, -1)),
    ("hour", Op.GT, "1969-12-31T22:30:00", (Op.GT_EQ, -2), (Op.GT, -1)),
    ("hour", Op.GT_EQ, "1970-01-01T00:00:00", (Op.GT_EQ, 0), (Op.GT, 0)),
])
def test_time_projections(transform, op, value, inclusive, strict):
    result_type = DATE if transform == "day" else INT
    expected_inclusive = part(*inclusive, type_=result_type) if inclusive else TRUE
    expected_strict = part(*strict, type_=result_type) if strict else FALSE
    for type_ in (TIMESTAMP, TIMESTAMPTZ, TIMESTAMP_NS):
        assert project(type_, transform, op, value) == expected_inclusive, type_
        assert project(type_, transform, op, value, strict=True) == expected_strict, type_


def test_day_of_date_needs_no_correction_but_month_does():
    assert project(DATE, "day", Op.EQ, "1969-12-30") == part(Op.EQ, -2, type_=DATE)
    assert project(DATE, "day", Op.LT, "1969-12-30") == part(Op.LT_EQ, -3, type_=DATE)
    assert project(DATE, "month", Op.EQ, "1969-11-30") == part(Op.IN, -2, -1)
    assert project(DATE, "year", Op.IN, "1969-11-30", "2017-01-01") == part(Op.IN, -1, 0, 47)


def test_time_sets():
    assert project(TIMESTAMP, "day", Op.IN, "2017-12-01T01:00:00", "2017-12-01T02:00:00") == \
        part(Op.EQ, 17501, type_=DATE)
    assert project(TIMESTAMP, "day", Op.NOT_IN, "2017-12-01T01:00:00", "2017-12-03T02:00:00",
                   strict=True) == part(Op.NOT_IN, 17501, 17503, type_=DATE)


# -- void, unknown, null checks, combinations --------------------------------------------------


def test_void_and_unknown_transforms_project_nothing():
    for transform in ("void", "zorder[2]"):
        assert project(LONG, transform, Op.EQ, 5) == TRUE
        assert project(LONG, transform, Op.IS_NULL) == TRUE
        assert project(LONG, transform, Op.EQ, 5, strict=True) == FALSE


def test_null_checks_pass_through_value_transforms():
    for transform, type_ in [("bucket[4]", LONG), ("truncate[4]", STRING), ("day", TIMESTAMP),
                             ("hour", TIMESTAMP)]:
        result_type = parse_transform(transform).result_type(type_)
        for strict in (False, True):
            assert project(type_, transform, Op.IS_NULL, strict=strict) == \
                part(Op.IS_NULL, type_=result_type)
            assert project(type_, transform, Op.NOT_NULL, strict=strict) == \
                part(Op.NOT_NULL, type_=result_type)


def test_unpartitioned_columns_project_to_true_or_false():
    schema, spec = one_field(LONG, "identity")
    pred = Predicate(Op.EQ, "y", (1,))
    assert inclusive_projection(spec, schema).project(pred) == TRUE
    assert Projection(spec, schema, strict=True).project(pred) == FALSE


def test_several_fields_on_one_source_combine_with_and_or():
    schema = Schema((NestedField(1, "ts", TIMESTAMP),))
    spec = PartitionSpec(2, (PartitionField(1, 1000, "day", "ts_day"),
                             PartitionField(1, 1001, "bucket[4]", "ts_bucket")))
    x = ts("2017-12-01T10:00:00")
    bucket = parse_transform("bucket[4]", TIMESTAMP).apply(x)
    eq = Predicate(Op.EQ, "ts", (x,))
    assert inclusive_projection(spec, schema).project(eq) == and_(
        BoundPredicate(Op.EQ, 1000, DATE, (17501,), "ts_day"),
        BoundPredicate(Op.EQ, 1001, INT, (bucket,), "ts_bucket"))
    ne = Predicate(Op.NOT_EQ, "ts", (x,))
    assert Projection(spec, schema, strict=True).project(ne) == or_(
        BoundPredicate(Op.NOT_EQ, 1000, DATE, (17501,), "ts_day"),
        BoundPredicate(Op.NOT_EQ, 1001, INT, (bucket,), "ts_bucket"))


def test_not_is_pushed_down_before_projecting():
    # not (x < 100) == x >= 100
    assert project(INT, "truncate[10]", Op.GT_EQ, 100) == part(Op.GT_EQ, 100)
    schema, spec = one_field(INT, "truncate[10]")
    expr = not_(or_(Predicate(Op.LT, "x", (100,)), Predicate(Op.EQ, "y", (1,))))
    assert inclusive_projection(spec, schema).project(expr) == part(Op.GT_EQ, 100)
    assert Projection(spec, schema, strict=True).project(expr) == FALSE  # y != 1 is not guaranteed


def test_project_predicate_returns_none_without_a_projection():
    field = PartitionField(1, PART_ID, "bucket[4]", "p")
    pred = BoundPredicate(Op.LT, 1, LONG, (5,), "x")
    assert project_predicate(field, pred, strict=False) is None
    assert project_predicate(field, pred, strict=True) is None


# -- the defining properties, on random values -------------------------------------------------


def _ints(lo, hi, unit=1):
    return st.builds(lambda a, b: a * unit + b, st.integers(lo, hi),
                     st.sampled_from([-1, 0, 1, unit // 2] if unit > 1 else [0]))


CASES = [
    (LONG, "identity", st.integers(-20, 20)),
    (DOUBLE, "identity", st.sampled_from([math.nan, -1.5, 0.0, 2.0, math.inf])),
    (STRING, "identity", st.text("ab", max_size=3)),
    (INT, "bucket[3]", st.integers(-20, 20)),
    (STRING, "bucket[3]", st.text("ab", max_size=3)),
    (INT, "truncate[10]", st.integers(-40, 40)),
    (LONG, "truncate[7]", st.integers(-40, 40)),
    (DEC, "truncate[10]", st.integers(-300, 300).map(lambda u: decimal_from_unscaled(u, 2))),
    (STRING, "truncate[2]", st.text("abz", max_size=4)),
    (BINARY, "truncate[2]", st.lists(st.sampled_from([0, 1, 255]), max_size=4).map(bytes)),
    (DATE, "day", st.integers(-40, 40)),
    (DATE, "month", st.integers(-800, 800)),
    (DATE, "year", st.integers(-1500, 1500)),
    (TIMESTAMP, "hour", _ints(-50, 50, HOUR)),
    (TIMESTAMPTZ, "day", _ints(-50, 50, DAY)),
    (TIMESTAMP, "month", _ints(-800, 800, DAY)),
    (TIMESTAMP, "year", _ints(-1500, 1500, DAY)),
    (TIMESTAMP_NS, "day", _ints(-50, 50, DAY * 1000)),
    (TIMESTAMP_NS, "hour", _ints(-50, 50, HOUR * 1000)),
    (LONG, "void", st.integers(-5, 5)),
]
COMPARISONS = [Op.LT, Op.LT_EQ, Op.GT, Op.GT_EQ, Op.EQ, Op.NOT_EQ]


@st.composite
def projection_cases(draw):
    type_, transform, values = draw(st.sampled_from(CASES))
    ops = [*COMPARISONS, Op.IN, Op.NOT_IN, Op.IS_NULL, Op.NOT_NULL]
    if type_ == STRING:
        ops += [Op.STARTS_WITH, Op.NOT_STARTS_WITH]
    if type_ == DOUBLE:
        ops += [Op.IS_NAN, Op.NOT_NAN]
    op = draw(st.sampled_from(ops))
    if op.is_unary:
        literals = ()
    elif op.is_set:
        literals = tuple(draw(st.lists(values, min_size=2, max_size=4)))
    else:
        literals = (draw(values),)
    if type_ == DOUBLE and any(isinstance(v, float) and math.isnan(v) for v in literals):
        literals = tuple(0.0 if math.isnan(v) else v for v in literals)
    row_value = draw(st.one_of(st.none(), values))
    return type_, transform, op, literals, row_value


def _partition_value(transform, type_, value, legacy=False):
    f = parse_transform(transform, type_).apply
    result = f(value)
    if legacy and value is not None and value < 0 and f(value - 1) == result:
        # pre-0.13 writers rounded negative time partitions toward zero
        return result + 1
    return result


def _check(type_, transform, op, literals, row_value, legacy=False):
    schema, spec = one_field(type_, transform)
    bound = bind(Predicate(op, "x", literals), schema)
    partition = {PART_ID: _partition_value(transform, type_, row_value, legacy)}
    row_matches = evaluate(bound, {1: row_value})
    inclusive = inclusive_projection(spec, schema).project(bound)
    strict = Projection(spec, schema, strict=True).project(bound)
    if row_matches:
        assert evaluate(inclusive, partition), (bound, inclusive, row_value)
    if evaluate(strict, partition):
        assert row_matches, (bound, strict, row_value)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(projection_cases())
def test_projections_are_inclusive_and_strict(case):
    """p(v) implies inclusive(p)(f(v)); strict(p)(f(v)) implies p(v)."""
    _check(*case)


@settings(max_examples=1500, deadline=None)
@given(projection_cases().filter(
    lambda c: c[1] in ("year", "month", "hour") or (c[1] == "day" and c[0] != DATE)))
def test_time_projections_also_hold_for_pre_013_partition_values(case):
    _check(*case, legacy=True)


# -- residuals ---------------------------------------------------------------------------------


def test_residual_of_day_partitioned_filter():
    schema = Schema((NestedField(1, "id", LONG), NestedField(2, "ts", TIMESTAMP)))
    spec = PartitionSpec(1, (PartitionField(2, 1000, "day", "ts_day"),))
    expr = and_(Predicate(Op.GT_EQ, "ts", ("2024-01-02T00:00:00",)),
                Predicate(Op.EQ, "id", (9,)))
    residuals = residual_evaluator(spec, schema, expr)
    jan = {d: to_internal(f"2024-01-0{d}", DATE) for d in (1, 2, 3)}
    id_is_9 = BoundPredicate(Op.EQ, 1, LONG, (9,), "id")
    assert residuals.residual_for((jan[2],)) == id_is_9   # every row of Jan 2 is >= Jan 2
    assert residuals.residual_for((jan[3],)) == id_is_9
    assert residuals.residual_for((jan[1],)) == FALSE     # no row of Jan 1 is
    assert residuals.residual_for((None,)) == FALSE       # null ts never >= anything


def test_residual_keeps_predicates_partitions_cannot_decide():
    schema = Schema((NestedField(1, "ts", TIMESTAMP),))
    spec = PartitionSpec(1, (PartitionField(1, 1000, "day", "ts_day"),))
    expr = Predicate(Op.GT, "ts", ("2024-01-02T12:00:00",))
    residuals = residual_evaluator(spec, schema, expr)
    bound = bind(expr, schema)
    assert residuals.residual_for((to_internal("2024-01-02", DATE),)) == bound
    assert residuals.residual_for((to_internal("2024-01-03", DATE),)) == TRUE
    assert residuals.residual_for((to_internal("2024-01-01", DATE),)) == FALSE


def test_residual_with_or_and_identity():
    schema = Schema((NestedField(1, "region", STRING), NestedField(2, "id", LONG)))
    spec = PartitionSpec(1, (PartitionField(1, 1000, "identity", "region"),))
    expr = or_(Predicate(Op.EQ, "region", ("eu",)), Predicate(Op.GT, "id", (100,)))
    residuals = residual_evaluator(spec, schema, expr)
    assert residuals.residual_for(("eu",)) == TRUE
    assert residuals.residual_for(("us",)) == BoundPredicate(Op.GT, 2, LONG, (100,), "id")
    # the cache returns the same answer
    assert residuals.residual_for(("us",)) == BoundPredicate(Op.GT, 2, LONG, (100,), "id")


def test_residual_of_unpartitioned_spec_is_the_filter():
    schema = Schema((NestedField(1, "id", LONG),))
    expr = Predicate(Op.LT, "id", (5,))
    assert residual_evaluator(PartitionSpec(0, ()), schema, expr).residual_for(()) == \
        bind(expr, schema)


def test_residual_with_bucket_uses_strict_not_equal():
    schema = Schema((NestedField(1, "id", LONG),))
    spec = PartitionSpec(1, (PartitionField(1, 1000, "bucket[8]", "id_bucket"),))
    b = parse_transform("bucket[8]", LONG).apply(42)
    residuals = residual_evaluator(spec, schema, Predicate(Op.NOT_EQ, "id", (42,)))
    assert residuals.residual_for(((b + 1) % 8,)) == TRUE
    assert residuals.residual_for((b,)) == BoundPredicate(Op.NOT_EQ, 1, LONG, (42,), "id")
    eq = residual_evaluator(spec, schema, Predicate(Op.EQ, "id", (42,)))
    assert eq.residual_for(((b + 1) % 8,)) == FALSE
