"""Evaluators: decide from metadata alone which manifests and files a filter can skip.

Three questions, three evaluators, all compiled once into closures because the planner asks
them for every manifest and every manifest entry:

- `ManifestEvaluator`: may this manifest hold matching files? Uses the manifest list's
  partition summaries and the row filter's *inclusive* partition projection.
- `PartitionEvaluator`: does this partition tuple satisfy a partition filter? Exact.
- `InclusiveMetricsEvaluator`: may this data *or delete* file hold matching rows? Uses
  value/null/NaN counts and lower/upper bounds, like Iceberg Java's evaluator of the same
  name. Delete files carry metrics of the rows they delete, so the same answer lets a scan
  skip them: for `id = 9`, a delete file whose `id` bounds are 1..4 deletes nothing the
  scan returns.

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
    bind,
    rewrite_not,
)
from meltwater.planner.spec.files import DataFile, ManifestFile, PartitionFieldSummary
from meltwater.planner.spec.literals import to_internal
from meltwater.planner.spec.partitioning import PartitionSpec
from meltwater.planner.spec.types import Schema

IN_PREDICATE_LIMIT = 200
"""IN lists longer than this are not checked against bounds (as in Iceberg Java)."""

ROWS_MIGHT_MATCH = True
ROWS_CANNOT_MATCH = False

Test = Callable[[Any], bool]


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and value != value


def predicate_test(pred: BoundPredicate) -> Test:
    """A function telling whether one internal value satisfies `pred` (exact)."""
    op = pred.op
    if op == Op.IS_NULL:
        return lambda v: v is None
    if op == Op.NOT_NULL:
        return lambda v: v is not None
    if op == Op.IS_NAN:
        return _is_nan
    if op == Op.NOT_NAN:
        return lambda v: not _is_nan(v)
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
        return None if _is_nan(s.lower_bound) else s.lower_bound

    def upper_of(s: PartitionFieldSummary) -> Any:
        return None if _is_nan(s.upper_bound) else s.upper_bound

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


# -- files: column metrics ---------------------------------------------------------------------


class InclusiveMetricsEvaluator:
    """May a data or delete file hold rows matching a row filter, judging by its metrics?

    Follows Iceberg Java's `InclusiveMetricsEvaluator`: missing metrics mean "may match";
    a column whose value count equals its null (or NaN) count holds no comparable value;
    bounds are NaN-free by the spec, but a NaN bound (old ORC writers) is distrusted; string
    bounds may be truncated (lower shorter, upper shorter and incremented), which still
    bounds every value, so `starts_with` compares the bounds' prefixes.

    `may_match(file, file_field_ids)` can also be told which columns the *data file's*
    schema had: a referenced column absent from it reads as all nulls (or as its
    `initial-default`). Never pass it for delete files: an equality delete without a
    column still deletes rows whatever their value in it.
    """

    def __init__(self, schema: Schema, row_filter: Expression,
                 case_sensitive: bool = True) -> None:
        self.schema = schema
        self.expr = rewrite_not(bind(row_filter, schema, case_sensitive))
        self._eval = compile_expression(self.expr, self._leaf, allow_not=False)

    def may_match(self, file: DataFile, file_field_ids: frozenset[int] | set[int] | None = None
                  ) -> bool:
        """Whether the file's column metrics leave room for a matching row; `file_field_ids`,
        when given, are the columns the data file has (one it lacks reads as nulls, or as
        its initial default)."""
        if file.record_count == 0:
            return ROWS_CANNOT_MATCH
        if file.record_count < 0:  # imported Avro files without a count
            return ROWS_MIGHT_MATCH
        return self._eval(file, file_field_ids)

    def _leaf(self, pred: BoundPredicate) -> Callable[[DataFile, Any], bool]:
        field_id = pred.field_id
        check = _metrics_check(pred)
        if self.schema.has_field(field_id):
            default = self.schema.find_field(field_id).initial_default
        else:
            default = None
        try:
            absent_value = to_internal(default, pred.type)
        except (TypeError, ValueError):
            absent_value = None
        absent_result = predicate_test(pred)(absent_value)

        def leaf(file: DataFile, file_field_ids: Any) -> bool:
            if file_field_ids is not None and field_id not in file_field_ids:
                return absent_result
            try:
                return check(file)
            except TypeError:  # a bound of an unexpected type: never prune on it
                return ROWS_MIGHT_MATCH

        return leaf


def _metrics_check(pred: BoundPredicate) -> Callable[[DataFile], bool]:
    fid = pred.field_id
    op = pred.op

    def nulls_only(f: DataFile) -> bool:
        count = f.value_counts.get(fid)
        return count is not None and f.null_value_counts.get(fid) == count

    def nans_only(f: DataFile) -> bool:
        count = f.value_counts.get(fid)
        return count is not None and f.nan_value_counts.get(fid) == count

    def no_comparable(f: DataFile) -> bool:
        return nulls_only(f) or nans_only(f)

    def lower_of(f: DataFile) -> Any:
        lower = f.lower_bounds.get(fid)
        return None if _is_nan(lower) else lower

    if op == Op.IS_NULL:
        return lambda f: f.null_value_counts.get(fid) != 0
    if op == Op.NOT_NULL:
        return lambda f: not nulls_only(f)
    if op == Op.IS_NAN:
        return lambda f: not (nulls_only(f) or f.nan_value_counts.get(fid) == 0)
    if op == Op.NOT_NAN:
        return lambda f: not nans_only(f)
    if op in (Op.NOT_EQ, Op.NOT_IN):
        # bounds need not be values in the column, so they cannot prove all rows equal
        return lambda _f: ROWS_MIGHT_MATCH
    if op == Op.IN:
        values = pred.literals

        def check_in(f: DataFile) -> bool:
            if no_comparable(f):
                return ROWS_CANNOT_MATCH
            if len(values) > IN_PREDICATE_LIMIT:
                return ROWS_MIGHT_MATCH
            lower, upper = lower_of(f), f.upper_bounds.get(fid)
            if lower is None:
                return ROWS_MIGHT_MATCH
            return any(lower <= v and (upper is None or v <= upper) for v in values)

        return check_in
    if op == Op.NOT_STARTS_WITH:
        prefix = pred.literal

        def check_not_starts_with(f: DataFile) -> bool:
            if f.null_value_counts.get(fid) != 0:  # unknown or some nulls: nulls match
                return ROWS_MIGHT_MATCH
            lower, upper = f.lower_bounds.get(fid), f.upper_bounds.get(fid)
            if lower is None or upper is None:
                return ROWS_MIGHT_MATCH
            # values between two strings that share a prefix share it too
            return not (lower.startswith(prefix) and upper.startswith(prefix))

        return check_not_starts_with
    lit = pred.literal
    if op == Op.STARTS_WITH:
        n = len(lit)

        def check_starts_with(f: DataFile) -> bool:
            if nulls_only(f):
                return ROWS_CANNOT_MATCH
            lower, upper = f.lower_bounds.get(fid), f.upper_bounds.get(fid)
            if lower is not None and lower[:n] > lit:
                return ROWS_CANNOT_MATCH
            return not (upper is not None and upper[:n] < lit)

        return check_starts_with
    if op == Op.LT:
        def check_lt(f: DataFile) -> bool:
            if no_comparable(f):
                return ROWS_CANNOT_MATCH
            lower = lower_of(f)
            return lower is None or lower < lit
        return check_lt
    if op == Op.LT_EQ:
        def check_lt_eq(f: DataFile) -> bool:
            if no_comparable(f):
                return ROWS_CANNOT_MATCH
            lower = lower_of(f)
            return lower is None or lower <= lit
        return check_lt_eq
    if op == Op.GT:
        def check_gt(f: DataFile) -> bool:
            if no_comparable(f):
                return ROWS_CANNOT_MATCH
            upper = f.upper_bounds.get(fid)
            return upper is None or not upper <= lit  # a NaN upper bound: may match
        return check_gt
    if op == Op.GT_EQ:
        def check_gt_eq(f: DataFile) -> bool:
            if no_comparable(f):
                return ROWS_CANNOT_MATCH
            upper = f.upper_bounds.get(fid)
            return upper is None or not upper < lit
        return check_gt_eq
    if op == Op.EQ:
        def check_eq(f: DataFile) -> bool:
            if no_comparable(f):
                return ROWS_CANNOT_MATCH
            lower = lower_of(f)
            if lower is not None and lower > lit:
                return ROWS_CANNOT_MATCH
            upper = f.upper_bounds.get(fid)
            return upper is None or not upper < lit
        return check_eq
    raise FilterError(f"cannot evaluate {pred} on column metrics")
