"""Projections: row filters turned into partition filters, and per-partition residuals.

A row filter speaks of source columns (`ts > X`); manifests and partition tuples speak of
partition fields (`ts_day`). Projecting through a field's transform gives a predicate on the
partition field, in one of two strengths (Iceberg spec, "Scan Planning"):

- *inclusive*: if a row matches the filter, its partition matches the projection. Used to
  select manifests and files: `ts > X` on `day(ts)` becomes `ts_day >= day(X)` (strictly,
  `day(X + 1µs)`, which differs only when X is a day's last microsecond).
- *strict*: if a partition matches the projection, every row in it matches the filter.
  Used for residuals: rows of such a partition need no filtering.

Per transform (v is the literal, f the transform):

| transform         | inclusive                               | strict                           |
| ----------------- | --------------------------------------- | -------------------------------- |
| identity          | the same predicate                      | the same predicate               |
| bucket[N]         | `=` and `in` on f(v)                    | `!=` and `not in` on f(v)        |
| truncate (ints),  | `<` -> `<= f(v-1)`, `<=` -> `<= f(v)`,  | `<` -> `< f(v)`,                 |
| year/month/       | `>` -> `>= f(v+1)`, `>=` -> `>= f(v)`,  | `<=` -> `< f(v+1)`, `>` -> `>    |
| day/hour          | `=` and `in` on f(v)                    | f(v)`, `>=` -> `> f(v-1)`, `!=`, |
|                   |                                         | `not in` on f(v)                 |
| truncate (text)   | ranges on f(v), `starts_with` kept/`=`  | ranges on f(v), `starts_with`    |
| void, unknown     | true (no information)                   | false (no guarantee)             |

`is_null`/`not_null` project unchanged through every transform but void (null in, null out).
Time transforms (but `day` of a date) get Iceberg Java's pre-epoch corrections: before
Iceberg 0.13 (PR #2383) writers rounded negative results toward zero, so inclusive
projections widen negative bounds by one unit and strict ones tighten them, to stay
right for such files too. Several fields on one source combine with AND (inclusive) or
OR (strict).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.evaluators import predicate_test
from meltwater.planner.expressions.tree import (
    FALSE,
    TRUE,
    AlwaysFalse,
    AlwaysTrue,
    And,
    BoundPredicate,
    Expression,
    Op,
    Or,
    Predicate,
    and_,
    bind,
    or_,
    rewrite_not,
)
from meltwater.planner.spec.conversions import decimal_from_unscaled, decimal_unscaled
from meltwater.planner.spec.partitioning import PartitionField, PartitionSpec
from meltwater.planner.spec.transforms import (
    BucketTransform,
    IdentityTransform,
    TimeTransform,
    Transform,
    TruncateTransform,
    parse_transform,
)
from meltwater.planner.spec.types import PrimitiveType, Schema

Projected = tuple[Op, tuple[Any, ...]]


def project_predicate(field: PartitionField, pred: BoundPredicate,
                      strict: bool) -> BoundPredicate | None:
    """Project one bound predicate on `field`'s source through its transform.

    Returns a predicate on the partition field (its field id, its result type, its name as
    term), or None when the transform gives no projection (callers read None as TRUE for
    inclusive, FALSE for strict).
    """
    transform = parse_transform(field.transform)
    if not transform.can_transform(pred.type):
        return None
    transform = transform.bind(pred.type)
    projected = (_project_strict(transform, pred) if strict
                 else _project_inclusive(transform, pred))
    if projected is None:
        return None
    op, literals = projected
    return BoundPredicate(op, field.field_id, transform.result_type(pred.type), literals,
                          field.name)


# -- per transform -----------------------------------------------------------------------------


def _project_inclusive(transform: Transform, pred: BoundPredicate) -> Projected | None:
    op = pred.op
    if isinstance(transform, IdentityTransform):
        return op, pred.literals
    if not isinstance(transform, (BucketTransform, TruncateTransform, TimeTransform)):
        return None  # void, unknown
    if op in (Op.IS_NULL, Op.NOT_NULL):
        return op, ()
    f = transform.apply
    if isinstance(transform, BucketTransform):
        if op == Op.EQ:
            return op, (f(pred.literal),)
        if op == Op.IN:
            return _set(Op.IN, map(f, pred.literals))
        return None
    if isinstance(transform, TruncateTransform) and pred.type.kind in ("string", "binary"):
        return _truncate_text_inclusive(transform, pred)
    projected = _ordered_inclusive(op, pred.literals, f, _stepper(pred.type))
    if isinstance(transform, TimeTransform) and not _is_day_of_date(transform, pred.type):
        return _fix_inclusive_time(projected)
    return projected


def _project_strict(transform: Transform, pred: BoundPredicate) -> Projected | None:
    op = pred.op
    if isinstance(transform, IdentityTransform):
        return op, pred.literals
    if not isinstance(transform, (BucketTransform, TruncateTransform, TimeTransform)):
        return None
    if op in (Op.IS_NULL, Op.NOT_NULL):
        return op, ()
    f = transform.apply
    if isinstance(transform, BucketTransform):
        if op == Op.NOT_EQ:
            return op, (f(pred.literal),)
        if op == Op.NOT_IN:
            return _set(Op.NOT_IN, map(f, pred.literals))
        return None
    if isinstance(transform, TruncateTransform) and pred.type.kind in ("string", "binary"):
        return _truncate_text_strict(transform, pred)
    projected = _ordered_strict(op, pred.literals, f, _stepper(pred.type))
    if isinstance(transform, TimeTransform) and not _is_day_of_date(transform, pred.type):
        return _fix_strict_time(projected)
    return projected


def _is_day_of_date(transform: Transform, source: PrimitiveType) -> bool:
    # day(date) is the date itself: no writer ever got it wrong, so no correction.
    return str(transform) == "day" and source.kind == "date"


def _stepper(type_: PrimitiveType) -> Callable[[Any, int], Any]:
    """Add `n` units of the type's last place to `v` (1 for ints and times, 10**-scale for
    decimals)."""
    if type_.kind == "decimal":
        scale = type_.scale
        return lambda v, n: decimal_from_unscaled(decimal_unscaled(v, scale) + n, scale)
    return lambda v, n: v + n


def _ordered_inclusive(op: Op, literals: tuple[Any, ...], f: Callable[[Any], Any],
                       step: Callable[[Any, int], Any]) -> Projected | None:
    """Monotone transforms: f(x) <= f(v) follows from x <= v, so ranges widen to partitions."""
    if op == Op.IN:
        return _set(Op.IN, map(f, literals))
    if op not in (Op.LT, Op.LT_EQ, Op.GT, Op.GT_EQ, Op.EQ):
        return None  # != and not in: a partition holds other values too
    v = literals[0]
    if op == Op.LT:
        return Op.LT_EQ, (f(step(v, -1)),)
    if op == Op.LT_EQ:
        return Op.LT_EQ, (f(v),)
    if op == Op.GT:
        return Op.GT_EQ, (f(step(v, 1)),)
    if op == Op.GT_EQ:
        return Op.GT_EQ, (f(v),)
    return Op.EQ, (f(v),)


def _ordered_strict(op: Op, literals: tuple[Any, ...], f: Callable[[Any], Any],
                    step: Callable[[Any, int], Any]) -> Projected | None:
    """Monotone transforms: f(x) < f(v) implies x < v; equality is never guaranteed."""
    if op == Op.NOT_IN:
        return _set(Op.NOT_IN, map(f, literals))
    if op not in (Op.LT, Op.LT_EQ, Op.GT, Op.GT_EQ, Op.NOT_EQ):
        return None
    v = literals[0]
    if op == Op.LT:
        return Op.LT, (f(v),)
    if op == Op.LT_EQ:
        return Op.LT, (f(step(v, 1)),)
    if op == Op.GT:
        return Op.GT, (f(v),)
    if op == Op.GT_EQ:
        return Op.GT, (f(step(v, -1)),)
    return Op.NOT_EQ, (f(v),)


def _truncate_text_inclusive(transform: TruncateTransform,
                             pred: BoundPredicate) -> Projected | None:
    """Truncation keeps order (a prefix sorts before its extensions), so ranges project on
    truncated literals; starts_with survives while the prefix fits in the width."""
    op, f, width = pred.op, transform.apply, transform.width
    if op == Op.IN:
        return _set(Op.IN, map(f, pred.literals))
    if op in (Op.LT, Op.LT_EQ):
        return Op.LT_EQ, (f(pred.literal),)
    if op in (Op.GT, Op.GT_EQ):
        return Op.GT_EQ, (f(pred.literal),)
    if op == Op.EQ:
        return Op.EQ, (f(pred.literal),)
    if op == Op.STARTS_WITH:
        prefix = pred.literal
        if len(prefix) < width:
            return Op.STARTS_WITH, (prefix,)
        return Op.EQ, (f(prefix),)
    if op == Op.NOT_STARTS_WITH:
        prefix = pred.literal
        if len(prefix) < width:
            return Op.NOT_STARTS_WITH, (prefix,)
        if len(prefix) == width:
            return Op.NOT_EQ, (prefix,)
        return None  # a partition "abc" of truncate[3] holds both "abcd..." and "abcx..."
    return None


def _truncate_text_strict(transform: TruncateTransform, pred: BoundPredicate) -> Projected | None:
    op, f, width = pred.op, transform.apply, transform.width
    if op == Op.NOT_IN:
        return _set(Op.NOT_IN, map(f, pred.literals))
    if op in (Op.LT, Op.LT_EQ):
        return Op.LT, (f(pred.literal),)
    if op in (Op.GT, Op.GT_EQ):
        return Op.GT, (f(pred.literal),)
    if op == Op.NOT_EQ:
        return Op.NOT_EQ, (f(pred.literal),)
    if op == Op.STARTS_WITH:
        prefix = pred.literal
        if len(prefix) < width:
            return Op.STARTS_WITH, (prefix,)
        if len(prefix) == width:
            return Op.EQ, (prefix,)
        return None
    if op == Op.NOT_STARTS_WITH:
        prefix = pred.literal
        if len(prefix) == width:
            return Op.NOT_EQ, (prefix,)
        # a row starting with the prefix has a partition starting with its first W chars
        return Op.NOT_STARTS_WITH, (f(prefix),)
    return None


def _set(op: Op, values: Any) -> Projected:
    unique = set(values)
    try:
        ordered = tuple(sorted(unique))
    except TypeError:
        ordered = tuple(sorted(unique, key=repr))
    if len(ordered) == 1:
        return (Op.EQ if op == Op.IN else Op.NOT_EQ), ordered
    return op, ordered


def _fix_inclusive_time(projected: Projected | None) -> Projected | None:
    """Also match partitions that pre-0.13 writers computed as (correct value + 1) for
    negative results."""
    if projected is None:
        return None
    op, literals = projected
    if op in (Op.LT, Op.LT_EQ) and literals[0] < 0:
        return op, (literals[0] + 1,)
    if op == Op.EQ and literals[0] < 0:
        return Op.IN, (literals[0], literals[0] + 1)
    if op == Op.IN and any(v < 0 for v in literals):
        return _set(Op.IN, [*literals, *(v + 1 for v in literals if v < 0)])
    return projected


def _fix_strict_time(projected: Projected | None) -> Projected | None:
    """Guarantee only what holds for both the correct and the pre-0.13 partition values."""
    if projected is None:
        return None
    op, literals = projected
    if op in (Op.GT, Op.GT_EQ) and literals[0] <= 0:
        return op, (literals[0] + 1,)
    if op == Op.NOT_EQ and literals[0] < 0:
        return Op.NOT_IN, (literals[0], literals[0] + 1)
    if op == Op.NOT_IN and any(v < 0 for v in literals):
        return _set(Op.NOT_IN, [*literals, *(v + 1 for v in literals if v < 0)])
    return projected


# -- whole expressions -------------------------------------------------------------------------


class Projection:
    """Projects bound row filters onto one partition spec (inclusive or strict)."""

    def __init__(self, spec: PartitionSpec, schema: Schema, strict: bool,
                 case_sensitive: bool = True) -> None:
        self.spec = spec
        self.schema = schema
        self.strict = strict
        self.case_sensitive = case_sensitive
        self._by_source: dict[int, list[PartitionField]] = {}
        for field in spec.fields:
            self._by_source.setdefault(field.source_id, []).append(field)

    def project(self, expr: Expression) -> Expression:
        """The partition filter: a tree of predicates on partition field ids, or TRUE/FALSE."""
        bound = bind(expr, self.schema, self.case_sensitive)
        return self._visit(rewrite_not(bound))

    def _visit(self, expr: Expression) -> Expression:
        if isinstance(expr, (AlwaysTrue, AlwaysFalse)):
            return expr
        if isinstance(expr, And):
            return and_(self._visit(expr.left), self._visit(expr.right))
        if isinstance(expr, Or):
            return or_(self._visit(expr.left), self._visit(expr.right))
        if isinstance(expr, BoundPredicate):
            return self.project_leaf(expr)
        if isinstance(expr, Predicate):
            raise FilterError(f"bind the filter before projecting it: {expr}")
        raise FilterError(f"cannot project {expr}")

    def project_leaf(self, pred: BoundPredicate) -> Expression:
        """Project one predicate onto every partition field of its column, combined as inclusive
        or strict projection requires."""
        fields = self._by_source.get(pred.field_id, ())
        parts = [project_predicate(f, pred, self.strict) for f in fields]
        if self.strict:
            return or_(*(p if p is not None else FALSE for p in parts))
        return and_(*(p if p is not None else TRUE for p in parts))


def inclusive_projection(spec: PartitionSpec, schema: Schema,
                         case_sensitive: bool = True) -> Projection:
    """Projection such that a matching row's partition always matches (to select files)."""
    return Projection(spec, schema, strict=False, case_sensitive=case_sensitive)


# -- residuals ---------------------------------------------------------------------------------


class ResidualEvaluator:
    """What of a row filter must still be checked on the rows of a given partition.

    Per predicate and partition field on its column: if the strict projection holds for
    the partition, every row matches (TRUE); if the inclusive projection fails, no row does
    (FALSE); otherwise the predicate stays. The combined residual goes into the scan task,
    so files of fully matching partitions are read without filtering at all.

    Example (spec `day(ts)`)::

        residual_for((day("2024-01-02"),)) of `ts >= '2024-01-02T00:00:00' and id = 9`
        -> `id = 9`
    """

    _CACHE_LIMIT = 4096

    def __init__(self, spec: PartitionSpec, schema: Schema, expr: Expression,
                 case_sensitive: bool = True) -> None:
        self.spec = spec
        self.expr = rewrite_not(bind(expr, schema, case_sensitive))
        positions = {f.field_id: i for i, f in enumerate(spec.fields)}
        by_source: dict[int, list[PartitionField]] = {}
        for field in spec.fields:
            by_source.setdefault(field.source_id, []).append(field)
        self._checks: dict[BoundPredicate, list[tuple[int, Any, Any]]] = {}
        for leaf in _leaves(self.expr):
            checks = []
            for field in by_source.get(leaf.field_id, ()):
                strict = project_predicate(field, leaf, strict=True)
                inclusive = project_predicate(field, leaf, strict=False)
                checks.append((positions[field.field_id],
                               predicate_test(strict) if strict is not None else None,
                               predicate_test(inclusive) if inclusive is not None else None))
            if checks:
                self._checks[leaf] = checks
        self._cache: dict[tuple[Any, ...], Expression] = {}

    def residual_for(self, partition: tuple[Any, ...]) -> Expression:
        """The residual filter for rows of a file with this partition tuple."""
        if not self._checks:
            return self.expr
        try:
            cached = self._cache.get(partition)
        except TypeError:  # an unhashable partition value
            return self._residual(self.expr, partition)
        if cached is None:
            cached = self._residual(self.expr, partition)
            if len(self._cache) < self._CACHE_LIMIT:
                self._cache[partition] = cached
        return cached

    def _residual(self, expr: Expression, partition: tuple[Any, ...]) -> Expression:
        if isinstance(expr, And):
            return and_(self._residual(expr.left, partition),
                        self._residual(expr.right, partition))
        if isinstance(expr, Or):
            return or_(self._residual(expr.left, partition),
                       self._residual(expr.right, partition))
        if isinstance(expr, BoundPredicate):
            for pos, strict, inclusive in self._checks.get(expr, ()):
                value = partition[pos] if pos < len(partition) else None
                if strict is not None and strict(value):
                    return TRUE
                if inclusive is not None and not inclusive(value):
                    return FALSE
        return expr


def residual_evaluator(spec: PartitionSpec, schema: Schema, expr: Expression,
                       case_sensitive: bool = True) -> ResidualEvaluator:
    """A `ResidualEvaluator` of `expr` (bound or unbound) for files of `spec`."""
    return ResidualEvaluator(spec, schema, expr, case_sensitive)


def _leaves(expr: Expression) -> list[BoundPredicate]:
    if isinstance(expr, (And, Or)):
        return _leaves(expr.left) + _leaves(expr.right)
    return [expr] if isinstance(expr, BoundPredicate) else []
