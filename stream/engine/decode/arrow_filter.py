"""Bound row filters as `pyarrow.compute` expressions, to apply residuals to batches.

The planner hands each task a *residual*: the part of the scan filter that partition values
and column metrics could not prove, bound to field ids with literals in the internal
representation. Here it becomes a `pyarrow.compute.Expression` over the batch's column
names, so `batch.filter(expression)` runs it vectorized.

Semantics are SQL's three-valued logic, as a query engine applies a WHERE clause: a row is
kept only when the filter is *true*; a comparison with null is never true, and NaN compares
false with everything (IEEE, as Arrow does) except `!=`. Not is pushed down to the
predicates first (`rewrite_not`), so every remaining predicate only has to be exactly true
where SQL says true: Arrow's Kleene `and`/`or` then give the right answer, with a null result
counting as not kept. Two predicates would be wrong with Arrow's defaults and are spelled out:

- `not_in`: Arrow's `is_in` answers false for a null input, so its negation would keep nulls;
  `x not in (...)` is null (not kept) for a null `x`.
- `is_nan` / `not_nan`: a null is not NaN (as Spark's `isnan` and Iceberg's evaluator say),
  so `not_nan` keeps nulls and `is_nan` drops them.

Example::

    >>> to_arrow_filter(BoundPredicate(Op.GT, 1, LONG, (10,), "id"), schema)
    <pyarrow.compute.Expression (id > 10)>
"""

from __future__ import annotations

from functools import singledispatch

import pyarrow as pa
import pyarrow.compute as pc

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
from meltwater.planner.spec.types import NestedField, Schema, StructType
from meltwater.stream.engine.decode.arrow_schema import to_arrow_type, to_arrow_value


def field_paths(schema: Schema) -> dict[int, tuple[str, ...]]:
    """Field id -> the column names leading to it through structs (`("point", "x")`).

    Fields inside lists and maps have no single value per row, so filters cannot name them
    and they get no path.
    """
    paths: dict[int, tuple[str, ...]] = {}

    def visit(prefix: tuple[str, ...], fields: tuple[NestedField, ...]) -> None:
        for f in fields:
            path = (*prefix, f.name)
            paths[f.field_id] = path
            if isinstance(f.type, StructType):
                visit(path, f.type.fields)

    visit((), schema.fields)
    return paths


def type_at_path(schema: pa.Schema, path: tuple[str, ...]) -> pa.DataType:
    """The Arrow type of the column at a `field_paths` path (through structs)."""
    type_ = schema.field(path[0]).type
    for name in path[1:]:
        type_ = type_.field(name).type
    return type_


def to_arrow_filter(expr: Expression, schema: Schema) -> pc.Expression:
    """The residual `expr` as an Arrow expression over the columns of `schema`.

    `schema` is the schema of the batches the expression will filter (the read schema: the
    projection plus any columns only the filter needs). Raises FilterError when the filter
    names a field the schema does not have.
    """
    return _convert(rewrite_not(expr), field_paths(schema))


@singledispatch
def _convert(expr: Expression, _paths: dict[int, tuple[str, ...]]) -> pc.Expression:
    raise FilterError(f"cannot evaluate filter {expr} on Arrow batches")


@_convert.register
def _(_expr: AlwaysTrue, _paths: dict[int, tuple[str, ...]]) -> pc.Expression:
    return pc.scalar(True)


@_convert.register
def _(_expr: AlwaysFalse, _paths: dict[int, tuple[str, ...]]) -> pc.Expression:
    return pc.scalar(False)


@_convert.register
def _(expr: And, paths: dict[int, tuple[str, ...]]) -> pc.Expression:
    return _convert(expr.left, paths) & _convert(expr.right, paths)


@_convert.register
def _(expr: Or, paths: dict[int, tuple[str, ...]]) -> pc.Expression:
    return _convert(expr.left, paths) | _convert(expr.right, paths)


@_convert.register
def _(expr: Not, paths: dict[int, tuple[str, ...]]) -> pc.Expression:
    # Only reached for a Not that rewrite_not could not push down (none today); Kleene
    # negation keeps null as null, so the result is still "kept only when true".
    return ~_convert(expr.child, paths)


@_convert.register
def _(expr: BoundPredicate, paths: dict[int, tuple[str, ...]]) -> pc.Expression:
    path = paths.get(expr.field_id)
    if path is None:
        raise FilterError(f"filter {expr}: field id {expr.field_id} is not a column of the "
                          "batches (nor a field of a struct column)")
    ref = pc.field(*path)
    op = expr.op
    if op == Op.IS_NULL:
        return ref.is_null()
    if op == Op.NOT_NULL:
        return ref.is_valid()
    if op == Op.IS_NAN:
        return pc.is_nan(ref)
    if op == Op.NOT_NAN:
        return ref.is_null() | ~pc.is_nan(ref)
    arrow_type = to_arrow_type(expr.type)
    if op.is_set:
        values = pa.array([to_arrow_value(v, expr.type) for v in expr.literals], arrow_type)
        if op == Op.IN:
            return ref.isin(values)
        return ~ref.isin(values) & ref.is_valid()
    literal = pc.scalar(pa.scalar(to_arrow_value(expr.literal, expr.type), arrow_type))
    if op == Op.STARTS_WITH:
        return pc.starts_with(ref, pattern=expr.literal)
    if op == Op.NOT_STARTS_WITH:
        return ~pc.starts_with(ref, pattern=expr.literal)
    compare = _COMPARISONS.get(op)
    if compare is None:
        raise FilterError(f"filter {expr}: operator {op.value} is not supported")
    return compare(ref, literal)


_COMPARISONS = {
    Op.LT: lambda a, b: a < b,
    Op.LT_EQ: lambda a, b: a <= b,
    Op.GT: lambda a, b: a > b,
    Op.GT_EQ: lambda a, b: a >= b,
    Op.EQ: lambda a, b: a == b,
    Op.NOT_EQ: lambda a, b: a != b,
}
