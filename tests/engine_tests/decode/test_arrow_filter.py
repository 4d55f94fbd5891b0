"""Residual filters on Arrow batches: SQL three-valued logic, NaN, nested paths, literals."""

from __future__ import annotations

import math
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.tree import FALSE, TRUE, And, BoundPredicate, Not, Op, Or
from meltwater.planner.spec.types import NestedField, PrimitiveType, Schema, StructType
from meltwater.stream.engine.decode.arrow_filter import to_arrow_filter
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema

LONG, DOUBLE, STRING = PrimitiveType("long"), PrimitiveType("double"), PrimitiveType("string")
SCHEMA = Schema((
    NestedField(1, "id", LONG),
    NestedField(2, "x", DOUBLE),
    NestedField(3, "name", STRING),
    NestedField(4, "d", PrimitiveType("date")),
    NestedField(5, "ts", PrimitiveType("timestamptz")),
    NestedField(6, "amount", PrimitiveType("decimal(9,2)")),
    NestedField(7, "u", PrimitiveType("uuid")),
    NestedField(8, "s", StructType((NestedField(9, "inner", LONG),))),
))
ROWS = [
    {"id": 1, "x": 1.0, "name": "apple", "d": 0, "ts": 0, "amount": Decimal("1.00"),
     "u": uuid.UUID(int=1).bytes, "s": {"inner": 10}},
    {"id": 2, "x": math.nan, "name": "banana", "d": 1, "ts": 1_000_000,
     "amount": Decimal("2.50"), "u": uuid.UUID(int=2).bytes, "s": {"inner": None}},
    {"id": None, "x": None, "name": None, "d": None, "ts": None, "amount": None, "u": None,
     "s": None},
    {"id": 4, "x": -3.0, "name": "apricot", "d": 3, "ts": 3_000_000,
     "amount": Decimal("-1.25"), "u": uuid.UUID(int=4).bytes, "s": {"inner": 40}},
]


def _batch() -> pa.RecordBatch:
    arrow = to_arrow_schema(SCHEMA)
    columns = {f.name: pa.array([r[f.name] for r in ROWS], f.type) for f in arrow}
    return pa.RecordBatch.from_pydict(columns, schema=arrow)


def kept(expr) -> list:
    """ids (row numbers 1-based) of the rows the filter keeps."""
    batch = _batch().append_column("row", pa.array(range(1, len(ROWS) + 1)))
    return batch.filter(to_arrow_filter(expr, SCHEMA)).column("row").to_pylist()


def p(op: Op, fid: int, *literals) -> BoundPredicate:
    type_ = SCHEMA.find_field(fid).type
    return BoundPredicate(op, fid, type_, tuple(literals))


def test_comparisons_with_null_are_never_true() -> None:
    assert kept(p(Op.LT, 1, 3)) == [1, 2]
    assert kept(p(Op.GT_EQ, 1, 3)) == [4]
    assert kept(p(Op.NOT_EQ, 1, 2)) == [1, 4]
    assert kept(p(Op.EQ, 1, 2)) == [2]


def test_not_is_pushed_down_so_nulls_stay_excluded() -> None:
    assert kept(Not(p(Op.LT, 1, 3))) == [4]
    assert kept(Not(And(p(Op.GT, 1, 1), p(Op.LT, 1, 4)))) == [1, 4]


def test_nan_compares_false() -> None:
    assert kept(p(Op.GT, 2, -10.0)) == [1, 4]
    assert kept(p(Op.LT_EQ, 2, 10.0)) == [1, 4]


def test_is_nan_and_not_nan_treat_null_as_not_nan() -> None:
    assert kept(p(Op.IS_NAN, 2)) == [2]
    assert kept(p(Op.NOT_NAN, 2)) == [1, 3, 4]


def test_null_checks() -> None:
    assert kept(p(Op.IS_NULL, 3)) == [3]
    assert kept(p(Op.NOT_NULL, 3)) == [1, 2, 4]


def test_set_membership_excludes_null_in_both_directions() -> None:
    assert kept(p(Op.IN, 1, 1, 4)) == [1, 4]
    assert kept(p(Op.NOT_IN, 1, 1, 4)) == [2]


def test_starts_with() -> None:
    assert kept(p(Op.STARTS_WITH, 3, "ap")) == [1, 4]
    assert kept(p(Op.NOT_STARTS_WITH, 3, "ap")) == [2]


def test_literals_of_dates_timestamps_decimals_and_uuids() -> None:
    assert kept(p(Op.GT_EQ, 4, 1)) == [2, 4]
    assert kept(p(Op.GT, 5, 1_000_000)) == [4]
    assert kept(p(Op.LT, 6, Decimal("1.00"))) == [4]
    assert kept(p(Op.EQ, 7, uuid.UUID(int=2))) == [2]
    assert kept(p(Op.IN, 7, uuid.UUID(int=1), uuid.UUID(int=4))) == [1, 4]


def test_nested_struct_fields_by_path() -> None:
    assert kept(p(Op.GT, 9, 15)) == [4]
    assert kept(p(Op.IS_NULL, 9)) == [2, 3]


def test_constants_and_or() -> None:
    assert kept(TRUE) == [1, 2, 3, 4]
    assert kept(FALSE) == []
    assert kept(Or(p(Op.EQ, 1, 1), p(Op.IS_NULL, 1))) == [1, 3]


def test_unknown_field_is_an_error_naming_it() -> None:
    with pytest.raises(FilterError, match="field id 99"):
        to_arrow_filter(BoundPredicate(Op.EQ, 99, LONG, (1,)), SCHEMA)
