"""Evaluators: decide from metadata alone which manifests and files a filter can skip.

Three questions, three evaluators, all compiled once into closures because the planner asks
them for every manifest and every manifest entry (the third in `metrics_evaluator`):

- `ManifestEvaluator`: may this manifest hold matching files? Uses the manifest list's
  partition summaries and the row filter's *inclusive* partition projection.
- `PartitionEvaluator`: does this partition tuple satisfy a partition filter? Exact.
- `InclusiveMetricsEvaluator` (`metrics_evaluator`): may this data *or delete* file hold
  matching rows, judging by its column metrics?

Value semantics (shared by the exact evaluators): a comparison with null is false except
`!=`, `not in` and `not starts_with`, which are true for null (so `not (x = 5)` and
`x != 5` agree, as after `rewrite_not`); comparisons with NaN follow IEEE 754 (all false but
`!=`), like Arrow's compute kernels that apply residuals.

`meltwater.planner.expressions.filter_evaluators` builds them from a row filter, projected onto each
partition spec, and caches them per spec for one scan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.tree import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BoundPredicate,
    Expression,
    Not,
    Op,
    Or,
    rewrite_not,
)
from meltwater.planner.spec.files import ManifestFile, PartitionFieldSummary
from meltwater.planner.spec.partitioning import PartitionSpec

IN_PREDICATE_LIMIT = 200
"""IN lists longer than this are not checked against bounds (as in Iceberg Java)."""

ROWS_MIGHT_MATCH = True
ROWS_CANNOT_MATCH = False

Test = Callable[[Any], bool]


def is_nan(value: Any) -> bool:
    """Whether a value is a float NaN (which equals nothing, itself included)."""
    return isinstance(value, float) and value != value


def predicate_test(pred: BoundPredicate) -> Test:
    """A function telling whether one internal value satisfies `pred` (exact)."""
    op = pred.op
    if op == Op.IS_NULL:
        return lambda v: v is None
    if op == Op.NOT_NULL:
        return lambda v: v is not None
    if op == Op.IS_NAN:
        return is_nan
    if op == Op.NOT_NAN:
        return lambda v: not is_nan(v)
    if op == Op.IN:
        values = frozenset(pred.literals)
        return lambda v: v is not None and v in values
    if op == Op.NOT_IN:
        values = frozenset(pred.literals)
        return lambda v: v is None or v not in values
    lit = pred.literal
    if op == Op.LT:
        return lambda v: v is not None and v < lit
    if op == Op.LT_EQ:
        return lambda v: v is not None and v <= lit
    if op == Op.GT:
        return lambda v: v is not None and v > lit
    if op == Op.GT_EQ:
        return lambda v: v is not None and v >= lit
    if op == Op.EQ:
        return lambda v: v is not None and v == lit
    if op == Op.NOT_EQ:
        return lambda v: v is None or v != lit
    if op == Op.STARTS_WITH:
        return lambda v: v is not None and v.startswith(lit)
    if op == Op.NOT_STARTS_WITH:
        return lambda v: v is None or not v.startswith(lit)
    raise FilterError(f"cannot evaluate {pred}")


def compile_expression(expr: Expression,
                       leaf: Callable[[BoundPredicate], Callable[..., bool]],
                       allow_not: bool = True) -> Callable[..., bool]:
    """Compile an expression tree into nested closures, with `leaf` compiling predicates.

    Metadata evaluators answer "may match", which does not negate, so they pass
    `allow_not=False` and receive expressions already through `rewrite_not`.
    """
    if isinstance(expr, AlwaysTrue):
        return lambda *_: True
    if isinstance(expr, AlwaysFalse):
        return lambda *_: False
    if isinstance(expr, And):
        left = compile_expression(expr.left, leaf, allow_not)
        right = compile_expression(expr.right, leaf, allow_not)
        return lambda *args: left(*args) and right(*args)
    if isinstance(expr, Or):
        left = compile_expression(expr.left, leaf, allow_not)
        right = compile_expression(expr.right, leaf, allow_not)
        return lambda *args: left(*args) or right(*args)
    if isinstance(expr, Not):
        if not allow_not:
            raise FilterError(f"rewrite_not the expression before evaluating {expr}")
        child = compile_expression(expr.child, leaf, allow_not)
        return lambda *args: not child(*args)
    if isinstance(expr, BoundPredicate):
        return leaf(expr)
    raise FilterError(f"bind the filter before evaluating it: {expr}")


# -- rows and partitions: exact ----------------------------------------------------------------


class PartitionEvaluator:
    """Evaluates a partition-bound expression (predicates on partition field ids) exactly on
    partition tuples of one spec."""

    def __init__(self, spec: PartitionSpec, partition_expr: Expression) -> None:
        self.spec = spec
        self.expr = partition_expr
        self._positions = {f.field_id: i for i, f in enumerate(spec.fields)}
        self._eval = compile_expression(partition_expr, self._leaf)

    def _leaf(self, pred: BoundPredicate) -> Callable[[tuple[Any, ...]], bool]:
        pos = self._positions.get(pred.field_id)
        if pos is None:
            raise FilterError(f"{pred} is not on a field of partition spec {self.spec.spec_id}")
        test = predicate_test(pred)
        return lambda part: test(part[pos] if pos < len(part) else None)

    def eval(self, partition: tuple[Any, ...]) -> bool:
        """Whether a partition tuple (in the spec's field order) matches the expression."""
        return self._eval(partition)


# -- manifests: partition summaries ------------------------------------------------------------


class ManifestEvaluator:
    """May a manifest (of one spec) hold files matching a partition filter?

    Build it from a row filter with `filter_evaluators.manifest_evaluator`, which projects
    the filter inclusively onto the spec.
    A manifest without partition summaries may always match; a summary's missing lower
    bound means the field's values are all null (or NaN) per the spec, but only when the
    summary says it saw a null or NaN: otherwise the bounds are merely unknown.
    """

    def __init__(self, spec: PartitionSpec, partition_expr: Expression) -> None:
        self.spec = spec
        self.expr = rewrite_not(partition_expr)
        self._positions = {f.field_id: i for i, f in enumerate(spec.fields)}
        self._eval = compile_expression(self.expr, self._leaf, allow_not=False)

    def may_match(self, manifest: ManifestFile) -> bool:
        """Whether the manifest's partition summaries leave room for a match; a manifest without
        summaries may always match."""
        summaries = manifest.partitions
        if not summaries:
            return ROWS_MIGHT_MATCH
        return self._eval(summaries)

    def _leaf(self, pred: BoundPredicate) -> Callable[[tuple[PartitionFieldSummary, ...]], bool]:
        pos = self._positions.get(pred.field_id)
        if pos is None:
            raise FilterError(f"{pred} is not on a field of partition spec {self.spec.spec_id}")
        check = _summary_check(pred)

        def leaf(summaries: tuple[PartitionFieldSummary, ...]) -> bool:
            if pos >= len(summaries) or summaries[pos] is None:
                return ROWS_MIGHT_MATCH
            try:
                return check(summaries[pos])
            except TypeError:  # a bound of an unexpected type: never prune on it
                return ROWS_MIGHT_MATCH

        return leaf


def _summary_check(pred: BoundPredicate) -> Callable[[PartitionFieldSummary], bool]:
    op = pred.op
    is_float = pred.type.kind in ("float", "double")

    def all_null(s: PartitionFieldSummary) -> bool:
        if not (s.contains_null and s.lower_bound is None):
            return False
        return not is_float or s.contains_nan is False

    def no_values(s: PartitionFieldSummary) -> bool:
        """Only nulls/NaNs: the spec leaves the bounds unset exactly then."""
        return s.lower_bound is None and bool(s.contains_null or s.contains_nan)

    if op == Op.IS_NULL:
        return lambda s: bool(s.contains_null)
    if op == Op.NOT_NULL:
        return lambda s: not all_null(s)
    if op == Op.IS_NAN:
        return lambda s: s.contains_nan is not False
    if op == Op.NOT_NAN:
        return lambda s: not (s.contains_nan and not s.contains_null and s.lower_bound is None)
    if op in (Op.NOT_EQ, Op.NOT_IN):
        return lambda _s: ROWS_MIGHT_MATCH

    def lower_of(s: PartitionFieldSummary) -> Any:
        return None if is_nan(s.lower_bound) else s.lower_bound

    def upper_of(s: PartitionFieldSummary) -> Any:
        return None if is_nan(s.upper_bound) else s.upper_bound

    if op == Op.IN:
        values = pred.literals

        def check_in(s: PartitionFieldSummary) -> bool:
            if no_values(s):
                return ROWS_CANNOT_MATCH
            if len(values) > IN_PREDICATE_LIMIT:
                return ROWS_MIGHT_MATCH
            lower, upper = lower_of(s), upper_of(s)
            return any((lower is None or lower <= v) and (upper is None or v <= upper)
                       for v in values)

        return check_in
    if op == Op.NOT_STARTS_WITH:
        prefix = pred.literal

        def check_not_starts_with(s: PartitionFieldSummary) -> bool:
            if s.contains_null or s.lower_bound is None or s.upper_bound is None:
                return ROWS_MIGHT_MATCH
            return not (s.lower_bound.startswith(prefix) and s.upper_bound.startswith(prefix))

        return check_not_starts_with
    lit = pred.literal
    if op == Op.STARTS_WITH:
        n = len(lit)

        def check_starts_with(s: PartitionFieldSummary) -> bool:
            if no_values(s):
                return ROWS_CANNOT_MATCH
            lower, upper = s.lower_bound, s.upper_bound
            if lower is not None and lower[:n] > lit:
                return ROWS_CANNOT_MATCH
            return not (upper is not None and upper[:n] < lit)

        return check_starts_with

    def check_range(s: PartitionFieldSummary) -> bool:
        if no_values(s):
            return ROWS_CANNOT_MATCH
        lower, upper = lower_of(s), upper_of(s)
        if op == Op.LT:
            return lower is None or lower < lit
        if op == Op.LT_EQ:
            return lower is None or lower <= lit
        if op == Op.GT:
            return upper is None or upper > lit
        if op == Op.GT_EQ:
            return upper is None or upper >= lit
        # EQ
        return (lower is None or lower <= lit) and (upper is None or lit <= upper)

    if op not in (Op.LT, Op.LT_EQ, Op.GT, Op.GT_EQ, Op.EQ):
        raise FilterError(f"cannot evaluate {pred} on partition summaries")
    return check_range
