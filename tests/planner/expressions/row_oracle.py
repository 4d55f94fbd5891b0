"""One row's answer to a bound filter, by the evaluators' value semantics: the oracle the
expression tests check projections and metrics pruning against (the product filters rows
with Arrow, `meltwater.stream.engine.decode.arrow_filter`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from meltwater.planner.expressions.evaluators import compile_expression, predicate_test
from meltwater.planner.expressions.tree import BoundPredicate, Expression


class RowEvaluator:
    """Evaluates a bound expression on rows given as {field_id: internal value}."""

    def __init__(self, expr: Expression) -> None:
        self.expr = expr
        self._eval = compile_expression(expr, self._leaf)

    @staticmethod
    def _leaf(pred: BoundPredicate) -> Callable[[Mapping[int, Any]], bool]:
        test, field_id = predicate_test(pred), pred.field_id
        return lambda row: test(row.get(field_id))

    def eval(self, row: Mapping[int, Any]) -> bool:
        """Whether a row (field id -> internal value) matches the expression."""
        return self._eval(row)


def evaluate(expr: Expression, row: Mapping[int, Any]) -> bool:
    """Whether one row ({field_id: internal value}; absent ids are null) satisfies `expr`."""
    return RowEvaluator(expr).eval(row)
