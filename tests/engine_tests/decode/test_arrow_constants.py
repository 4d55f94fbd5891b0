"""`constant_array` equals `pa.repeat` for every kind of value the engine repeats."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from meltwater.stream.engine.decode.arrow_constants import constant_array

VALUES = [
    pa.scalar(3, pa.int8()), pa.scalar(-5, pa.int32()), pa.scalar(2**40, pa.int64()),
    pa.scalar(1.5, pa.float32()), pa.scalar(2.5),
    pa.scalar(1_700_000_000_000_000, pa.timestamp("us", tz="UTC")),
    pa.scalar(datetime.date(2020, 1, 2)), pa.scalar(7, pa.time64("us")),
    pa.scalar(Decimal("-12.34"), pa.decimal128(10, 2)),
    pa.scalar(Decimal("1.5"), pa.decimal256(40, 1)),
    pa.scalar(b"abcd", pa.binary(4)), pa.scalar("INSERT"), pa.scalar(b"xy"),
    pa.scalar(True), pa.scalar(None, pa.int64()), pa.scalar(None, pa.string()),
    pa.scalar([1, 2], pa.list_(pa.int32())),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{v.type}:{v.as_py()!r}")
def test_equals_repeat(value: pa.Scalar) -> None:
    for length in (1, 5, 70_000, 3, 70_001, 0):
        try:
            expected = pa.repeat(value, length)
        except pa.ArrowInvalid:  # pyarrow cannot repeat a nested value zero times
            continue
        got = constant_array(value, length)
        got.validate(full=True)
        assert got.type == expected.type and got.equals(expected), length


@pytest.mark.parametrize(("start", "length"), [(0, 0), (0, 1), (5, 4), (2**40, 3), (-3, 6)])
def test_int64_range_counts_up_from_its_start(start, length):
    from meltwater.stream.engine.decode.arrow_constants import int64_range

    got = int64_range(start, length)
    assert got.type == pa.int64()
    assert got.to_pylist() == list(range(start, start + length))
