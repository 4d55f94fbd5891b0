"""The `--filter` language: what parses to what, and errors that point at the token."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.filter_parser import MAX_NESTING, parse_filter, tokenize
from meltwater.planner.expressions.tree import (
    FALSE,
    TRUE,
    And,
    Not,
    Op,
    Or,
    Predicate,
    and_,
    bind,
    not_,
    or_,
    predicates,
    rewrite_not,
)
from meltwater.planner.spec.types import (
    DOUBLE,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMPTZ,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
    primitive,
)


def P(op, term, *literals):
    return Predicate(op, term, literals)


@pytest.mark.parametrize(("text", "expected"), [
    ("id = 5", P(Op.EQ, "id", 5)),
    ("id == 5", P(Op.EQ, "id", 5)),
    ("id != 5", P(Op.NOT_EQ, "id", 5)),
    ("id <> 5", P(Op.NOT_EQ, "id", 5)),
    ("id < 5", P(Op.LT, "id", 5)),
    ("id<=-5", P(Op.LT_EQ, "id", -5)),
    ("id > 5", P(Op.GT, "id", 5)),
    ("id >= 5", P(Op.GT_EQ, "id", 5)),
    ("5 < id", P(Op.GT, "id", 5)),
    ("5 <= id", P(Op.GT_EQ, "id", 5)),
    ("5 > id", P(Op.LT, "id", 5)),
    ("-5 >= id", P(Op.LT_EQ, "id", -5)),
    ("'x' = name", P(Op.EQ, "name", "x")),
    ("price = 14.20", P(Op.EQ, "price", Decimal("14.20"))),
    ("price = -0.5", P(Op.EQ, "price", Decimal("-0.5"))),
    ("x = 1e3", P(Op.EQ, "x", Decimal("1e3"))),
    ("name = 'it''s'", P(Op.EQ, "name", "it's")),
    ("name = ''", P(Op.EQ, "name", "")),
    ("flag = true", P(Op.EQ, "flag", True)),
    ("flag = FALSE", P(Op.EQ, "flag", False)),
    ("d = date '2024-01-01'", P(Op.EQ, "d", dt.date(2024, 1, 1))),
    ("ts >= timestamp '2024-01-01 10:00:00'", P(Op.GT_EQ, "ts", "2024-01-01 10:00:00")),
    ("ts >= TIMESTAMP '2024-01-01T10:00:00.123456789+01:00'",
     P(Op.GT_EQ, "ts", "2024-01-01T10:00:00.123456789+01:00")),
    ("t < time '10:30'", P(Op.LT, "t", "10:30")),
    ("id in (1, 2, 3)", P(Op.IN, "id", 1, 2, 3)),
    ("id IN (1)", P(Op.IN, "id", 1)),
    ("id not in (1, -2)", P(Op.NOT_IN, "id", 1, -2)),
    ("name is null", P(Op.IS_NULL, "name")),
    ("name IS NOT NULL", P(Op.NOT_NULL, "name")),
    ("score is nan", P(Op.IS_NAN, "score")),
    ("score is not nan", P(Op.NOT_NAN, "score")),
    ("is_nan(score)", P(Op.IS_NAN, "score")),
    ("isnan(score)", P(Op.IS_NAN, "score")),
    ("not_nan(score)", P(Op.NOT_NAN, "score")),
    ("is_null(a.b)", P(Op.IS_NULL, "a.b")),
    ("starts_with(name, 'ab')", P(Op.STARTS_WITH, "name", "ab")),
    ("not_starts_with(name, 'ab')", P(Op.NOT_STARTS_WITH, "name", "ab")),
    ("name like 'ab%'", P(Op.STARTS_WITH, "name", "ab")),
    ("name not like 'ab%'", P(Op.NOT_STARTS_WITH, "name", "ab")),
    ("name like 'ab'", P(Op.EQ, "name", "ab")),
    ("location.city = 'Oslo'", P(Op.EQ, "location.city", "Oslo")),
    ("`odd name`.`x``y` = 1", P(Op.EQ, "odd name.x`y", 1)),
    ('"select" = 1', P(Op.EQ, "select", 1)),
    ("date = date '2024-01-01'", P(Op.EQ, "date", dt.date(2024, 1, 1))),
    ("timestamp > 3", P(Op.GT, "timestamp", 3)),
    ("true", TRUE),
    ("false or id = 1", P(Op.EQ, "id", 1)),
])
def test_predicates(text, expected):
    assert parse_filter(text) == expected


def test_precedence_and_grouping():
    a, b, c = P(Op.EQ, "a", 1), P(Op.EQ, "b", 2), P(Op.EQ, "c", 3)
    assert parse_filter("a = 1 or b = 2 and c = 3") == or_(a, and_(b, c))
    assert parse_filter("(a = 1 or b = 2) and c = 3") == and_(or_(a, b), c)
    assert parse_filter("not a = 1 and b = 2") == and_(not_(a), b)
    assert parse_filter("NOT (a = 1 AND b = 2)") == not_(and_(a, b))
    assert parse_filter("not not a = 1") == a
    assert parse_filter("a = 1 and b = 2 and c = 3") == and_(and_(a, b), c)
    assert parse_filter("((a = 1))") == a
    assert parse_filter("a = 1 and false") == FALSE


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty expression"),
    ("id =", "expected a literal after '=' but found end of input at position 4"),
    ("id = 5)", "found ')' at position 6"),
    ("(id = 5", "expected ')' but found end of input at position 7"),
    ("id = 5 and", "expected a column name but found end of input at position 10"),
    ("id # 5", "unexpected character '#' at position 3"),
    ("name = 'abc", "unterminated quote ' starting at position 7"),
    ("`abc = 1", "unterminated quote ` starting at position 0"),
    ("id = other", "comparing two columns is not supported) but found 'other' at position 5"),
    ("1 = 2", "comparing two literals is not supported"),
    ("id = null", "comparison with null at position 5 is never true"),
    ("null = id", "comparison with null at position 0"),
    ("id in (1, null)", "null in an 'in' list at position 10"),
    ("id in ()", "expected a literal in the list but found ')' at position 7"),
    ("id in 1", "expected '(' but found '1' at position 6"),
    ("name like 'a%c'", "unsupported like pattern 'a%c' at position 10"),
    ("name like '%abc'", "only prefix patterns"),
    ("name like 'a_c%'", "only prefix patterns"),
    ("id is 5", "expected 'null' or 'nan' after 'is' but found '5' at position 6"),
    ("id not = 5", "expected 'in' or 'like' after 'not' but found '=' at position 7"),
    ("id 5", "expected a comparison, 'in', 'is', 'like' or 'not' after the column"),
    ("starts_with(name, 5)", "expected a quoted string prefix but found '5' at position 18"),
    ("is_nan(score, 1)", "expected ')' but found ',' at position 12"),
    ("d = date '2024-13-01'", "invalid date literal '2024-13-01' at position 9"),
    ("ts = timestamp 'noon'", "invalid timestamp literal 'noon' at position 15"),
    ("ts = timestamp_ntz '2024-01-01T00:00:00Z'", "invalid timestamp_ntz literal"),
    ("id = 5 id = 6", "expected 'and', 'or' or the end of the filter but found 'id'"),
])
def test_errors_name_the_token_and_position(text, message):
    with pytest.raises(FilterError, match=r"^filter: ") as error:
        parse_filter(text)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_tokens_carry_positions():
    tokens = tokenize("a.b >= 'x''y'")
    assert [(t.kind, t.text, t.pos) for t in tokens] == [
        ("name", "a", 0), ("punct", ".", 1), ("name", "b", 2), ("op", ">=", 4),
        ("string", "'x''y'", 7), ("end", "", 13)]


def test_parsed_filters_bind_to_schema_types():
    schema = Schema((
        NestedField(1, "id", LONG),
        NestedField(2, "price", primitive("decimal(9,2)")),
        NestedField(3, "score", DOUBLE),
        NestedField(4, "ts", TIMESTAMPTZ),
        NestedField(5, "local", TIMESTAMP),
        NestedField(6, "name", STRING),
        NestedField(7, "loc", StructType((NestedField(8, "city", STRING),))),
        NestedField(9, "nanos", PrimitiveType("timestamp_ns")),
    ))
    bound = bind(parse_filter(
        "id > 5 and price = 14.2 and score < 0.5 and ts >= timestamp '2024-01-01T00:00:00Z' "
        "and local < date '2024-01-02' and name like 'ab%' and loc.city = 'Oslo' "
        "and nanos = timestamp '1970-01-01 00:00:00.000000001'"), schema)
    leaves = []

    def collect(expr):
        if hasattr(expr, "left"):
            collect(expr.left)
            collect(expr.right)
        else:
            leaves.append((expr.field_id, expr.op, expr.literals))

    collect(bound)
    assert leaves == [
        (1, Op.GT, (5,)),
        (2, Op.EQ, (Decimal("14.20"),)),
        (3, Op.LT, (0.5,)),
        (4, Op.GT_EQ, (1704067200000000,)),
        (5, Op.LT, (1704153600000000,)),
        (6, Op.STARTS_WITH, ("ab",)),
        (8, Op.EQ, ("Oslo",)),
        (9, Op.EQ, (1,)),
    ]


def test_binding_errors_name_column_and_literal():
    schema = Schema((NestedField(1, "id", LONG), NestedField(2, "local", TIMESTAMP)))
    with pytest.raises(FilterError, match="unknown column 'nope'"):
        bind(parse_filter("nope = 1"), schema)
    with pytest.raises(FilterError, match="literal 'x' does not fit column 'id'"):
        bind(parse_filter("id = 'x'"), schema)
    with pytest.raises(FilterError, match="without time zone"):
        bind(parse_filter("local = timestamp '2024-01-01T00:00:00+02:00'"), schema)


def test_bare_boolean_column_means_equal_true():
    from meltwater.planner.expressions.tree import And, Op, Predicate

    assert parse_filter("b") == Predicate(Op.EQ, "b", (True,))
    parsed = parse_filter("(x > 1 and flag) or other")
    assert isinstance(parsed.left, And) and parsed.left.right == Predicate(Op.EQ, "flag", (True,))
    assert parsed.right == Predicate(Op.EQ, "other", (True,))


def _depth(expr) -> int:
    """The tree's depth, counted without recursing (the point is that it may be deep)."""
    deepest, todo = 0, [(expr, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        todo.extend((child, depth + 1) for child in
                    ((node.left, node.right) if isinstance(node, (And, Or))
                     else (node.child,) if isinstance(node, Not) else ()))
    return deepest


@pytest.mark.parametrize("joiner", ["or", "and"])
def test_a_long_chain_is_a_balanced_tree_every_pass_can_walk(joiner):
    """5000 terms make a tree 14 deep, not 5000 (Python recurses at most ~1000 deep); the
    first three still nest as written."""
    op = Op.EQ if joiner == "or" else Op.NOT_EQ
    text = f" {joiner} ".join(f"id {op.value} {i}" for i in range(5000))
    expr = parse_filter(text)
    assert _depth(expr) == 14
    schema = Schema((NestedField(1, "id", LONG),))
    bound = bind(expr, schema)
    assert sorted(p.literal for p in predicates(bound)) == list(range(5000))
    assert rewrite_not(not_(bound)) != bound and hash(bound) and str(bound).count(joiner) == 4999
    combine = or_ if joiner == "or" else and_
    a, b, c = (P(op, "id", i) for i in range(3))
    assert parse_filter(f"id {op.value} 0 {joiner} id {op.value} 1 {joiner} id {op.value} 2") \
        == combine(combine(a, b), c) == combine(a, b, c)


def test_nesting_deeper_than_the_limit_is_refused_at_its_token():
    assert parse_filter("(" * MAX_NESTING + "id = 1" + ")" * MAX_NESTING) == P(Op.EQ, "id", 1)
    with pytest.raises(FilterError, match=rf"^filter: nested more than {MAX_NESTING} levels deep "
                                          rf"\(parentheses or 'not'\) at position {MAX_NESTING}$"):
        parse_filter("(" * (MAX_NESTING + 1) + "id = 1" + ")" * (MAX_NESTING + 1))
    with pytest.raises(FilterError, match=f"at position {4 * MAX_NESTING}$"):
        parse_filter("not " * (MAX_NESTING + 1) + "id = 1")
