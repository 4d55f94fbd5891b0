"""May a data or delete file hold rows matching a row filter? Judged by its column metrics.

`InclusiveMetricsEvaluator` uses value/null/NaN counts and lower/upper bounds, like Iceberg
Java's evaluator of the same name. Delete files carry metrics of the rows they delete, so
the same answer lets a scan skip them: for `id = 9`, a delete file whose `id` bounds are
1..4 deletes nothing the scan returns. Value semantics and the compiled closures are
`evaluators`'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.evaluators import (
    IN_PREDICATE_LIMIT,
    ROWS_CANNOT_MATCH,
    ROWS_MIGHT_MATCH,
    compile_expression,
    is_nan,
    predicate_test,
)
from meltwater.planner.expressions.tree import BoundPredicate, Expression, Op, bind, rewrite_not
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.literals import to_internal
from meltwater.planner.spec.types import Schema


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
        return None if is_nan(lower) else lower

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
