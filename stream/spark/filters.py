"""Spark's pushed-down filters as meltwater expressions, translated only where exact.

Spark hands a Python data source the conjuncts of a query's WHERE clause as `Filter`
objects (`pyspark.sql.datasource`): comparisons of one column with a literal, `In`,
`IsNull`, `IsNotNull`, `StringStartsWith` and `Not`. A filter the source accepts is **not**
evaluated again by Spark, so a filter is translated only when meltwater's semantics are
Spark's for every row, nulls and NaN included; everything else goes back to Spark.

What needs care:

- **Not** keeps the rows where its child is *false* (not null), so `Not(f)` is translated
  as "f is false", never as meltwater's `not` of f: `Not(a <=> 1)` is `a is null or a != 1`.
- **NaN**: Spark orders NaN above every number and says `NaN = NaN`; meltwater (like Arrow
  and Iceberg) compares NaN false. So on float and double columns `a > 1` becomes
  `a > 1 or is_nan(a)`, and literals that are NaN or zero (NaN, and -0.0 = 0.0 in set
  membership) are left to Spark.
- **nulls inside `In`**: `a in (1, null)` is never false, so its negation is left to Spark.
- **nested columns** (`("point", "x")`) are translated when every enclosing struct is
  required: a required field of an optional struct is null whenever its struct is, which
  Iceberg's binding (required => never null) does not see.
- column types Spark sees differently: nanosecond timestamps (Spark keeps microseconds),
  `time`, `uuid`, `fixed`, geometry and unknown columns are left to Spark.

Example::

    >>> expression, pushed, returned = translate_filters(
    ...     [EqualTo(("id",), 5), Not(EqualNullSafe(("name",), "x"))], schema)
    >>> str(expression)
    '(id = 5 and (is_null(name) or name != 'x'))'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.expressions.tree import (
    TRUE,
    Expression,
    Op,
    Predicate,
    and_,
    bind,
    or_,
)
from meltwater.planner.spec.types import NestedField, PrimitiveType, Schema, StructType

# Column types whose values Spark compares exactly as meltwater does.
_EXACT_KINDS = frozenset({"boolean", "int", "long", "float", "double", "decimal", "date",
                          "timestamp", "timestamptz", "string", "binary"})
_FLOATING = frozenset({"float", "double"})

_COMPARISONS: dict[type, Op] = {
    EqualTo: Op.EQ,
    GreaterThan: Op.GT,
    GreaterThanOrEqual: Op.GT_EQ,
    LessThan: Op.LT,
    LessThanOrEqual: Op.LT_EQ,
}
_COMPARISON_TYPES = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
# The comparison that is true exactly where `op` is false, for non-null operands.
_COMPLEMENT = {Op.EQ: Op.NOT_EQ, Op.GT: Op.LT_EQ, Op.GT_EQ: Op.LT, Op.LT: Op.GT_EQ,
               Op.LT_EQ: Op.GT}


def _column(schema: Schema, path: Sequence[str]) -> tuple[str, NestedField] | None:
    """The dotted name and field of a column path through required structs, or None."""
    if not path:
        return None
    fields = schema.fields
    field: NestedField | None = None
    for depth, name in enumerate(path):
        field = next((f for f in fields if f.name == name), None)
        if field is None:
            return None
        if depth < len(path) - 1:
            if not isinstance(field.type, StructType) or not field.required:
                return None
            fields = field.type.fields
    assert field is not None
    term = ".".join(path)
    try:
        if schema.field_id(term) != field.field_id:  # a dotted top-level name, ambiguous
            return None
    except MeltwaterError:
        return None
    return term, field


def _is_awkward_float(value: Any) -> bool:
    return isinstance(value, float) and (math.isnan(value) or value == 0.0)


class _UntranslatableError(Exception):
    pass


def _predicate(op: Op, term: str, *literals: Any) -> Predicate:
    return Predicate(op, term, tuple(literals))


def _compare(op: Op, term: str, value: Any, floating: bool) -> Expression:
    """`term op value` as Spark evaluates it, for a non-null, non-NaN literal."""
    expression: Expression = _predicate(op, term, value)
    if floating and op in (Op.GT, Op.GT_EQ):  # Spark: NaN is greater than every number
        expression = or_(expression, _predicate(Op.IS_NAN, term))
    return expression


def _exact(flt: Filter, schema: Schema, negate: bool) -> Expression:
    """Unbound expression true exactly where `flt` is true (or, with `negate`, false)."""
    if isinstance(flt, Not):
        return _exact(flt.child, schema, not negate)
    column = _column(schema, getattr(flt, "attribute", ()))
    if column is None:
        raise _UntranslatableError("not a column meltwater can filter on")
    term, field = column
    if not isinstance(field.type, PrimitiveType) or field.type.kind not in _EXACT_KINDS:
        raise _UntranslatableError(f"column type {field.type} is compared differently by Spark")
    floating = field.type.kind in _FLOATING
    if isinstance(flt, IsNull):
        return _predicate(Op.NOT_NULL if negate else Op.IS_NULL, term)
    if isinstance(flt, IsNotNull):
        return _predicate(Op.IS_NULL if negate else Op.NOT_NULL, term)
    if isinstance(flt, EqualNullSafe):
        if flt.value is None:
            return _predicate(Op.NOT_NULL if negate else Op.IS_NULL, term)
        if floating and _is_awkward_float(flt.value):
            raise _UntranslatableError("NaN or zero literal on a floating column")
        if negate:
            return or_(_predicate(Op.IS_NULL, term), _predicate(Op.NOT_EQ, term, flt.value))
        return _predicate(Op.EQ, term, flt.value)
    if isinstance(flt, StringStartsWith):
        if not isinstance(flt.value, str):
            raise _UntranslatableError("prefix is not a string")
        return _predicate(Op.NOT_STARTS_WITH if negate else Op.STARTS_WITH, term, flt.value)
    if isinstance(flt, In):
        values = tuple(flt.value)
        if floating and any(_is_awkward_float(v) for v in values):
            raise _UntranslatableError("NaN or zero literal on a floating column")
        if any(isinstance(v, (list, tuple, dict)) for v in values):
            raise _UntranslatableError("non-primitive literal")
        known = tuple(v for v in values if v is not None)
        if negate:
            if len(known) < len(values):  # `a not in (.., null)` is never true
                raise _UntranslatableError("negated In with a null literal")
            return _predicate(Op.NOT_IN, term, *known)
        return _predicate(Op.IN, term, *known)
    op = _COMPARISONS.get(type(flt))
    if op is None or not isinstance(flt, _COMPARISON_TYPES):
        raise _UntranslatableError(f"{type(flt).__name__} is not translated")
    value = flt.value
    if value is None or isinstance(value, (list, tuple, dict)):
        raise _UntranslatableError("null or non-primitive literal")
    if floating and isinstance(value, float) and math.isnan(value):
        raise _UntranslatableError("NaN literal")
    if negate:
        return _compare(_COMPLEMENT[op], term, value, floating)
    return _compare(op, term, value, floating)


def translate(flt: Filter, schema: Schema) -> Expression | None:
    """The bound expression exactly equivalent to a Spark filter, or None."""
    try:
        return bind(_exact(flt, schema, False), schema)
    except (_UntranslatableError, MeltwaterError, TypeError, ValueError):
        return None


def translate_filters(filters: Sequence[Filter], schema: Schema
                      ) -> tuple[Expression, list[Filter], list[Filter]]:
    """Split Spark's filters: (the conjunction meltwater applies, pushed, returned to Spark)."""
    expression: Expression = TRUE
    pushed: list[Filter] = []
    returned: list[Filter] = []
    for flt in filters:
        translated = translate(flt, schema)
        if translated is None:
            returned.append(flt)
        else:
            pushed.append(flt)
            expression = and_(expression, translated)
    return expression, pushed, returned
