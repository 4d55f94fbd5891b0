"""Row filters: a small expression tree, unbound (by column name) or bound (by field id).

Users write filters against column names; binding resolves each name to a field id of a
schema and converts each literal to the column type's internal representation (see
`meltwater.planner.spec.types`). Everything downstream (projection through partition transforms,
manifest and metrics evaluation, residuals, the Arrow filter in `stream/`) works on bound
expressions only, so a rename never changes what a filter means.

Example::

    expr = And(Predicate(Op.GT, "ts", ("2024-01-01T00:00:00+00:00",)),
               Predicate(Op.EQ, "id", (9,)))
    bound = bind(expr, schema)   # BoundPredicate(Op.GT, field_id=4, literals=(1704067200000000,))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from meltwater.planner.errors import FilterError, MeltwaterError
from meltwater.planner.spec.types import PrimitiveType, Schema


class Op(Enum):
    """A predicate's operator; the values are how filters render it."""

    IS_NULL = "is_null"
    NOT_NULL = "not_null"
    IS_NAN = "is_nan"
    NOT_NAN = "not_nan"
    LT = "<"
    LT_EQ = "<="
    GT = ">"
    GT_EQ = ">="
    EQ = "="
    NOT_EQ = "!="
    STARTS_WITH = "starts_with"
    NOT_STARTS_WITH = "not_starts_with"
    IN = "in"
    NOT_IN = "not_in"

    @property
    def negated(self) -> Op:
        """The operator true exactly where this one is false (`<` for `>=`, `not_in` for `in`)."""
        return _NEGATIONS[self]

    @property
    def is_unary(self) -> bool:
        """Whether the operator takes no literal (null and NaN tests)."""
        return self in (Op.IS_NULL, Op.NOT_NULL, Op.IS_NAN, Op.NOT_NAN)

    @property
    def is_set(self) -> bool:
        """Whether the operator takes a set of literals (`in`, `not in`)."""
        return self in (Op.IN, Op.NOT_IN)


_NEGATIONS = {
    Op.IS_NULL: Op.NOT_NULL, Op.NOT_NULL: Op.IS_NULL, Op.IS_NAN: Op.NOT_NAN,
    Op.NOT_NAN: Op.IS_NAN, Op.LT: Op.GT_EQ, Op.GT_EQ: Op.LT, Op.GT: Op.LT_EQ, Op.LT_EQ: Op.GT,
    Op.EQ: Op.NOT_EQ, Op.NOT_EQ: Op.EQ, Op.STARTS_WITH: Op.NOT_STARTS_WITH,
    Op.NOT_STARTS_WITH: Op.STARTS_WITH, Op.IN: Op.NOT_IN, Op.NOT_IN: Op.IN,
}


class Expression:
    """Base of the expression tree; `&`, `|` and `~` build And, Or and Not."""

    def __and__(self, other: Expression) -> Expression:
        return and_(self, other)

    def __or__(self, other: Expression) -> Expression:
        return or_(self, other)

    def __invert__(self) -> Expression:
        return not_(self)


@dataclass(frozen=True)
class AlwaysTrue(Expression):
    """The expression every row matches: the filter of a read with none."""

    def __str__(self) -> str:
        return "true"


@dataclass(frozen=True)
class AlwaysFalse(Expression):
    """The expression no row matches: what pruning leaves when nothing can match."""

    def __str__(self) -> str:
        return "false"


TRUE = AlwaysTrue()
FALSE = AlwaysFalse()


@dataclass(frozen=True)
class And(Expression):
    """Both children match."""

    left: Expression
    right: Expression

    def __str__(self) -> str:
        return f"({self.left} and {self.right})"


@dataclass(frozen=True)
class Or(Expression):
    """Either child matches."""

    left: Expression
    right: Expression

    def __str__(self) -> str:
        return f"({self.left} or {self.right})"


@dataclass(frozen=True)
class Not(Expression):
    """The child does not match; evaluators that answer "may match" need it rewritten away
    (`rewrite_not`)."""

    child: Expression

    def __str__(self) -> str:
        return f"not {self.child}"


@dataclass(frozen=True)
class Predicate(Expression):
    """An unbound predicate on a column name; literals are plain Python values."""

    op: Op
    term: str
    literals: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return _render(self.op, self.term, self.literals)


@dataclass(frozen=True)
class BoundPredicate(Expression):
    """A predicate bound to a field id; literals are in the type's internal representation.

    `term` keeps the column name the user wrote, for messages and explain output only.
    """

    op: Op
    field_id: int
    type: PrimitiveType
    literals: tuple[Any, ...] = ()
    term: str = ""

    @property
    def literal(self) -> Any:
        """The one literal of a comparison."""
        return self.literals[0]

    def negate(self) -> BoundPredicate:
        """The predicate true exactly where this one is false, on the same field."""
        return BoundPredicate(self.op.negated, self.field_id, self.type, self.literals, self.term)

    def __str__(self) -> str:
        return _render(self.op, self.term or f"#{self.field_id}", self.literals)


def _render(op: Op, term: str, literals: tuple[Any, ...]) -> str:
    if op.is_unary:
        return f"{op.value}({term})"
    if op.is_set:
        return f"{term} {op.value.replace('_', ' ')} ({', '.join(map(repr, literals))})"
    if op in (Op.STARTS_WITH, Op.NOT_STARTS_WITH):
        return f"{op.value}({term}, {literals[0]!r})"
    return f"{term} {op.value} {literals[0]!r}"


def and_(*exprs: Expression) -> Expression:
    """Conjunction with constant folding: TRUE disappears, FALSE absorbs. Three or more
    terms make a balanced tree (see `_balanced`)."""
    terms: list[Expression] = []
    for expr in exprs:
        if isinstance(expr, AlwaysFalse):
            return FALSE
        if not isinstance(expr, AlwaysTrue):
            terms.append(expr)
    return _balanced(And, terms) if terms else TRUE


def or_(*exprs: Expression) -> Expression:
    """Disjunction with constant folding: FALSE disappears, TRUE absorbs. Three or more
    terms make a balanced tree (see `_balanced`)."""
    terms: list[Expression] = []
    for expr in exprs:
        if isinstance(expr, AlwaysTrue):
            return TRUE
        if not isinstance(expr, AlwaysFalse):
            terms.append(expr)
    return _balanced(Or, terms) if terms else FALSE


def _balanced(node: type[And] | type[Or], terms: list[Expression]) -> Expression:
    """`terms` joined by `node`, as a tree of depth log2(n) rather than n: every pass over a
    filter recurses through its tree, and `a = 1 or a = 2 or ...` with hundreds of terms
    nested one in the next would exceed Python's recursion limit. Up to three terms the
    tree is the left-nested one, ((a or b) or c), as written."""
    if len(terms) == 1:
        return terms[0]
    middle = (len(terms) + 1) // 2
    return node(_balanced(node, terms[:middle]), _balanced(node, terms[middle:]))


def not_(expr: Expression) -> Expression:
    """The negation of `expr`, simplified: constants flip and a double negation cancels."""
    if isinstance(expr, AlwaysTrue):
        return FALSE
    if isinstance(expr, AlwaysFalse):
        return TRUE
    if isinstance(expr, Not):
        return expr.child
    return Not(expr)


def rewrite_not(expr: Expression) -> Expression:
    """Push every Not down to the predicates (De Morgan), which evaluators require."""
    if isinstance(expr, Not):
        child = expr.child
        if isinstance(child, Not):
            return rewrite_not(child.child)
        if isinstance(child, And):
            return or_(rewrite_not(Not(child.left)), rewrite_not(Not(child.right)))
        if isinstance(child, Or):
            return and_(rewrite_not(Not(child.left)), rewrite_not(Not(child.right)))
        if isinstance(child, BoundPredicate):
            return child.negate()
        if isinstance(child, Predicate):
            return Predicate(child.op.negated, child.term, child.literals)
        return not_(child)
    if isinstance(expr, And):
        return and_(rewrite_not(expr.left), rewrite_not(expr.right))
    if isinstance(expr, Or):
        return or_(rewrite_not(expr.left), rewrite_not(expr.right))
    return expr


def predicates(expr: Expression) -> Iterable[Expression]:
    """Every leaf predicate (bound or unbound) of an expression."""
    if isinstance(expr, (And, Or)):
        yield from predicates(expr.left)
        yield from predicates(expr.right)
    elif isinstance(expr, Not):
        yield from predicates(expr.child)
    elif isinstance(expr, (Predicate, BoundPredicate)):
        yield expr


def referenced_field_ids(expr: Expression) -> set[int]:
    """The field ids a bound expression's predicates read."""
    return {p.field_id for p in predicates(expr) if isinstance(p, BoundPredicate)}


def bind(expr: Expression, schema: Schema, case_sensitive: bool = True) -> Expression:
    """Resolve names to field ids of `schema` and literals to internal values.

    Raises FilterError naming the column and the literal when either does not fit.
    """
    from meltwater.planner.spec.literals import to_internal  # literals imports this module's types

    if isinstance(expr, (AlwaysTrue, AlwaysFalse, BoundPredicate)):
        return expr
    if isinstance(expr, (And, Or)):
        combine = and_ if isinstance(expr, And) else or_
        return combine(bind(expr.left, schema, case_sensitive),
                       bind(expr.right, schema, case_sensitive))
    if isinstance(expr, Not):
        return not_(bind(expr.child, schema, case_sensitive))
    if not isinstance(expr, Predicate):
        raise FilterError(f"cannot bind {expr!r}")
    try:
        field_id = schema.field_id(expr.term, case_sensitive)
    except MeltwaterError as error:
        raise FilterError(f"filter {expr}: {error}") from None
    field = schema.find_field(field_id)
    if not isinstance(field.type, PrimitiveType):
        raise FilterError(f"filter {expr}: column {expr.term!r} is a {field.type}, "
                          "not a primitive column")
    type_ = field.type
    op = expr.op
    if op in (Op.IS_NAN, Op.NOT_NAN) and type_.kind not in ("float", "double"):
        raise FilterError(f"filter {expr}: {op.value} needs a float or double column, "
                          f"{expr.term!r} is {type_}")
    if op in (Op.STARTS_WITH, Op.NOT_STARTS_WITH) and type_.kind != "string":
        raise FilterError(f"filter {expr}: {op.value} needs a string column, "
                          f"{expr.term!r} is {type_}")
    if op.is_unary:
        if field.required and op == Op.IS_NULL:
            return FALSE
        if field.required and op == Op.NOT_NULL:
            return TRUE
        return BoundPredicate(op, field_id, type_, (), expr.term)
    values = []
    for value in expr.literals:
        try:
            values.append(to_internal(value, type_))
        except (ValueError, TypeError, ArithmeticError) as error:
            raise FilterError(f"filter {expr}: literal {value!r} does not fit column "
                              f"{expr.term!r} of type {type_} ({error})") from error
    if op.is_set:
        unique = tuple(sorted(set(values), key=repr))
        if not unique:
            return FALSE if op == Op.IN else TRUE
        if len(unique) == 1:
            return BoundPredicate(Op.EQ if op == Op.IN else Op.NOT_EQ, field_id, type_, unique,
                                  expr.term)
        return BoundPredicate(op, field_id, type_, unique, expr.term)
    if len(values) != 1:
        raise FilterError(f"filter {expr}: {op.value} takes exactly one literal")
    return BoundPredicate(op, field_id, type_, tuple(values), expr.term)
