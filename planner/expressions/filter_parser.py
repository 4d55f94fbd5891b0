"""`--filter EXPR`: a small SQL-like language for row filters, parsed to an unbound Expression.

Grammar (keywords case-insensitive)::

    expr      := or
    or        := and ("or" and)*
    and       := unary ("and" unary)*
    unary     := "not" unary | "(" expr ")" | "true" | "false" | predicate
    predicate := column cmp literal | literal cmp column
               | column ["not"] "in" "(" literal ("," literal)* ")"
               | column "is" ["not"] ("null" | "nan")
               | column ["not"] "like" 'prefix%'
               | func "(" column ["," literal] ")"
    cmp       := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    func      := is_nan | isnan | not_nan | notnan | is_null | not_null
               | starts_with | not_starts_with
    column    := part ("." part)*       part := name | `any text` | "any text"
    literal   := ["-"] number | 'text' ('' escapes a quote) | true | false
               | date 'YYYY-MM-DD' | time '...' | timestamp '...' | timestamptz '...'

Numbers with a point or exponent become `Decimal`, so decimal columns bind exactly (binding
turns them into floats for float columns); plain integers stay `int`. Typed date literals
become `datetime.date`; typed time and timestamp literals stay strings (validated here) so
that nanoseconds survive until binding. `LIKE` takes a prefix pattern only (`'abc%'` ->
starts_with, no wildcard -> equality). Errors are `FilterError`s naming the offending token
and its 0-based character position.

Example::

    >>> parse_filter("id >= 10 and not (name like 'tmp%' or ts < timestamp '2024-01-01')")
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.tree import (
    FALSE,
    TRUE,
    Expression,
    Op,
    Predicate,
    and_,
    not_,
    or_,
)
from meltwater.planner.spec.literals import EPOCH_DATE, parse_date, parse_timestamp

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<backtick>`(?:[^`]|``)*`)
  | (?P<dquote>"(?:[^"]|"")*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<op><=|>=|<>|!=|==|=|<|>)
  | (?P<punct>[(),.\-])
""", re.VERBOSE)

_COMPARISONS = {
    "=": Op.EQ, "==": Op.EQ, "!=": Op.NOT_EQ, "<>": Op.NOT_EQ,
    "<": Op.LT, "<=": Op.LT_EQ, ">": Op.GT, ">=": Op.GT_EQ,
}
_FLIPPED = {Op.LT: Op.GT, Op.LT_EQ: Op.GT_EQ, Op.GT: Op.LT, Op.GT_EQ: Op.LT_EQ,
            Op.EQ: Op.EQ, Op.NOT_EQ: Op.NOT_EQ}
_UNARY_FUNCTIONS = {
    "is_nan": Op.IS_NAN, "isnan": Op.IS_NAN, "not_nan": Op.NOT_NAN, "notnan": Op.NOT_NAN,
    "is_null": Op.IS_NULL, "isnull": Op.IS_NULL, "not_null": Op.NOT_NULL,
    "notnull": Op.NOT_NULL,
}
_PREFIX_FUNCTIONS = {"starts_with": Op.STARTS_WITH, "startswith": Op.STARTS_WITH,
                     "not_starts_with": Op.NOT_STARTS_WITH}
# Parentheses and `not`s nest the tree as written (an `and` or `or` chain does not: it is
# balanced, see `meltwater.planner.expressions.tree.and_`), and every pass over a filter recurses
# through it; deeper than this is refused rather than left to exceed Python's recursion limit.
MAX_NESTING = 100
_TYPED_LITERALS = ("date", "time", "timestamp", "timestamptz", "timestamp_ntz",
                   "timestamp_ltz")


@dataclass(frozen=True)
class Token:
    """One token of a filter's text, with its position for error messages."""

    kind: str  # number, string, name, quoted (an escaped identifier), op, punct, end
    text: str  # the source text
    pos: int

    @property
    def word(self) -> str:
        """The lower-cased keyword this token could be ('' unless a bare name)."""
        return self.text.lower() if self.kind == "name" else ""

    def describe(self) -> str:
        """The token as an error message names it."""
        return "end of input" if self.kind == "end" else repr(self.text)


def tokenize(text: str) -> list[Token]:
    """Split a filter into tokens; FilterError at the first character that starts none."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos] in "'`\"":
                raise FilterError(f"filter: unterminated quote {text[pos]} "
                                  f"starting at position {pos}")
            raise FilterError(f"filter: unexpected character {text[pos]!r} at position {pos}")
        kind = match.lastgroup
        assert kind is not None  # every alternative of _TOKEN is a named group
        if kind in ("backtick", "dquote"):
            kind = "quoted"
        if kind != "space":
            tokens.append(Token(kind, match.group(), pos))
        pos = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def parse_filter(text: str) -> Expression:
    """Parse a `--filter` expression into an unbound Expression (see the module grammar)."""
    if not text.strip():
        raise FilterError("filter: empty expression")
    return _Parser(tokenize(text)).parse()


class _Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    @contextlib.contextmanager
    def nested(self, opening: Token) -> Iterator[None]:
        """One level deeper, into the parenthesis or `not` `opening`; refused past
        `MAX_NESTING`."""
        if self.depth >= MAX_NESTING:
            raise FilterError(f"filter: nested more than {MAX_NESTING} levels deep (parentheses "
                              f"or 'not') at position {opening.pos}")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    # -- token helpers

    @property
    def tok(self) -> Token:
        return self.tokens[self.index]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.tok
        if token.kind != "end":
            self.index += 1
        return token

    def error(self, expected: str, token: Token | None = None) -> FilterError:
        token = token or self.tok
        return FilterError(f"filter: expected {expected} but found {token.describe()} "
                           f"at position {token.pos}")

    def accept_word(self, *words: str) -> Token | None:
        if self.tok.word in words:
            return self.advance()
        return None

    def expect_punct(self, char: str) -> Token:
        if self.tok.kind == "punct" and self.tok.text == char:
            return self.advance()
        raise self.error(repr(char))

    def at_punct(self, char: str) -> bool:
        return self.tok.kind == "punct" and self.tok.text == char

    # -- grammar

    def parse(self) -> Expression:
        expr = self.parse_or()
        if self.tok.kind != "end":
            raise self.error("'and', 'or' or the end of the filter")
        return expr

    def parse_or(self) -> Expression:
        terms = [self.parse_and()]
        while self.accept_word("or"):
            terms.append(self.parse_and())
        return or_(*terms)  # a balanced tree, however many terms

    def parse_and(self) -> Expression:
        terms = [self.parse_unary()]
        while self.accept_word("and"):
            terms.append(self.parse_unary())
        return and_(*terms)

    def parse_unary(self) -> Expression:
        negation = self.accept_word("not")
        if negation:
            with self.nested(negation):
                return not_(self.parse_unary())
        if self.at_punct("("):
            with self.nested(self.advance()):
                expr = self.parse_or()
            self.expect_punct(")")
            return expr
        if self.tok.word in ("true", "false") and self.peek().kind != "op":
            return TRUE if self.advance().word == "true" else FALSE
        return self.parse_predicate()

    def parse_predicate(self) -> Expression:
        token = self.tok
        if (token.kind == "name" and self.peek().kind == "punct" and self.peek().text == "("
                and token.word in {*_UNARY_FUNCTIONS, *_PREFIX_FUNCTIONS}):
            return self.parse_function()
        if self.at_literal():
            return self.parse_flipped()
        column = self.parse_column()
        if self.tok.kind == "op":
            op_token = self.advance()
            value = self.parse_comparison_literal(op_token)
            return Predicate(_COMPARISONS[op_token.text], column, (value,))
        if self.accept_word("is"):
            negated = self.accept_word("not") is not None
            word = self.accept_word("null", "nan")
            if word is None:
                raise self.error("'null' or 'nan' after 'is'")
            op = Op.IS_NULL if word.word == "null" else Op.IS_NAN
            return Predicate(op.negated if negated else op, column)
        negated = self.accept_word("not") is not None
        if self.accept_word("in"):
            values = self.parse_literal_list()
            return Predicate(Op.NOT_IN if negated else Op.IN, column, values)
        like = self.accept_word("like")
        if like:
            return self.parse_like(column, negated)
        if not negated and (self.tok.kind == "end" or self.tok.word in ("and", "or")
                            or self.at_punct(")")):
            return Predicate(Op.EQ, column, (True,))  # a bare boolean column, as in SQL
        raise self.error("a comparison, 'in', 'is', 'like' or 'not' after the column"
                         if not negated else "'in' or 'like' after 'not'")

    def parse_function(self) -> Expression:
        name = self.advance()
        self.expect_punct("(")
        column = self.parse_column()
        if name.word in _UNARY_FUNCTIONS:
            self.expect_punct(")")
            return Predicate(_UNARY_FUNCTIONS[name.word], column)
        self.expect_punct(",")
        value_token = self.tok
        value = self.parse_literal()
        if not isinstance(value, str):
            raise self.error("a quoted string prefix", value_token)
        self.expect_punct(")")
        return Predicate(_PREFIX_FUNCTIONS[name.word], column, (value,))

    def parse_flipped(self) -> Expression:
        """`5 < id` is `id > 5`."""
        first = self.tok
        value = self.parse_literal()
        if self.tok.kind != "op":
            raise self.error("a comparison after the literal")
        op_token = self.advance()
        if value is None:
            raise FilterError(f"filter: comparison with null at position {first.pos} is never "
                              "true; use 'column is null'")
        if self.at_literal():
            raise self.error("a column name (comparing two literals is not supported)")
        column = self.parse_column()
        return Predicate(_FLIPPED[_COMPARISONS[op_token.text]], column, (value,))

    def parse_comparison_literal(self, op_token: Token) -> Any:
        if not self.at_literal():
            if self.tok.kind in ("name", "quoted"):
                raise self.error("a literal (comparing two columns is not supported)")
            raise self.error(f"a literal after {op_token.text!r}")
        value_token = self.tok
        value = self.parse_literal()
        if value is None:
            raise FilterError(f"filter: comparison with null at position {value_token.pos} "
                              "is never true; use 'is null' or 'is not null'")
        return value

    def parse_like(self, column: str, negated: bool) -> Expression:
        token = self.tok
        if token.kind != "string":
            raise self.error("a quoted pattern after 'like'")
        self.advance()
        pattern = _unquote(token.text, "'")
        if "%" not in pattern and "_" not in pattern:
            return Predicate(Op.NOT_EQ if negated else Op.EQ, column, (pattern,))
        prefix = pattern[:-1]
        if not pattern.endswith("%") or "%" in prefix or "_" in prefix:
            raise FilterError(f"filter: unsupported like pattern {token.text} at position "
                              f"{token.pos}: only prefix patterns such as 'abc%' are supported")
        return Predicate(Op.NOT_STARTS_WITH if negated else Op.STARTS_WITH, column, (prefix,))

    def parse_literal_list(self) -> tuple[Any, ...]:
        self.expect_punct("(")
        values = []
        while True:
            token = self.tok
            if not self.at_literal():
                raise self.error("a literal in the list")
            value = self.parse_literal()
            if value is None:
                raise FilterError(f"filter: null in an 'in' list at position {token.pos} never "
                                  "matches; use 'is null'")
            values.append(value)
            if self.at_punct(","):
                self.advance()
                continue
            self.expect_punct(")")
            return tuple(values)

    def parse_column(self) -> str:
        parts = [self.parse_name_part()]
        while self.at_punct("."):
            self.advance()
            parts.append(self.parse_name_part())
        return ".".join(parts)

    def parse_name_part(self) -> str:
        token = self.tok
        if token.kind == "name":
            self.advance()
            return token.text
        if token.kind == "quoted":
            self.advance()
            return _unquote(token.text, token.text[0])
        raise self.error("a column name")

    def at_literal(self) -> bool:
        token = self.tok
        if token.kind in ("number", "string"):
            return True
        if token.kind == "punct" and token.text == "-":
            return self.peek().kind == "number"
        if token.word in ("true", "false", "null"):
            return True
        return token.word in _TYPED_LITERALS and self.peek().kind == "string"

    def parse_literal(self) -> Any:
        token = self.advance()
        if token.kind == "punct" and token.text == "-":
            number = self.advance()
            return _number(number.text, negative=True)
        if token.kind == "number":
            return _number(token.text)
        if token.kind == "string":
            return _unquote(token.text, "'")
        if token.word in ("true", "false"):
            return token.word == "true"
        if token.word == "null":
            return None
        if token.word in _TYPED_LITERALS:
            return self.parse_typed(token)
        raise self.error("a literal", token)

    def parse_typed(self, keyword: Token) -> Any:
        token = self.advance()
        text = _unquote(token.text, "'")
        try:
            if keyword.word == "date":
                return EPOCH_DATE + dt.timedelta(days=parse_date(text))
            if keyword.word == "time":
                dt.time.fromisoformat(text[:15])  # validates; the string binds exactly
                return text
            # an offset is checked against the column at binding (timestamp or timestamptz)
            parse_timestamp(text, with_zone=keyword.word != "timestamp_ntz", nanos=True)
        except ValueError as error:
            raise FilterError(f"filter: invalid {keyword.word} literal {token.text} at "
                              f"position {token.pos}: {error}") from None
        return text


def _number(text: str, negative: bool = False) -> int | Decimal:
    value: int | Decimal = (Decimal(text) if any(c in text for c in ".eE") else int(text))
    return -value if negative else value


def _unquote(text: str, quote: str) -> str:
    return text[1:-1].replace(quote * 2, quote)
