"""Single-value binary serialization (spec Appendix D): exact bytes and round trips."""

from __future__ import annotations

import math
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltwater.planner.spec.conversions import from_bytes, to_bytes, unscaled_to_bytes
from meltwater.planner.spec.types import (
    BINARY,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    PrimitiveType,
    primitive,
)

BOOLEAN = PrimitiveType("boolean")
TIMESTAMP_NS = PrimitiveType("timestamp_ns")
TIMESTAMPTZ_NS = PrimitiveType("timestamptz_ns")


@pytest.mark.parametrize(("type_", "value", "data"), [
    (BOOLEAN, True, b"\x01"),
    (BOOLEAN, False, b"\x00"),
    (INT, 34, b"\x22\x00\x00\x00"),
    (INT, -1, b"\xff\xff\xff\xff"),
    (LONG, 34, b"\x22\x00\x00\x00\x00\x00\x00\x00"),
    (LONG, -2, b"\xfe\xff\xff\xff\xff\xff\xff\xff"),
    (FLOAT, 1.0, b"\x00\x00\x80\x3f"),
    (DOUBLE, 1.0, b"\x00\x00\x00\x00\x00\x00\xf0\x3f"),
    (DATE, 17486, (17486).to_bytes(4, "little")),
    (TIME, 81068000000, (81068000000).to_bytes(8, "little")),
    (TIMESTAMP, 1510871468000001, (1510871468000001).to_bytes(8, "little")),
    (TIMESTAMPTZ, -1, b"\xff" * 8),
    (TIMESTAMP_NS, 1510871468000001001, (1510871468000001001).to_bytes(8, "little")),
    (primitive("decimal(9,2)"), Decimal("14.20"), b"\x05\x8c"),
    (primitive("decimal(9,2)"), Decimal("-14.20"), b"\xfa\x74"),
    (primitive("decimal(9,2)"), Decimal("0.00"), b"\x00"),
    (primitive("decimal(9,2)"), Decimal("1.28"), b"\x00\x80"),
    (primitive("decimal(9,2)"), Decimal("-1.28"), b"\x80"),
    (STRING, "iceberg", b"iceberg"),
    (STRING, "é🧊", "é🧊".encode()),
    (UUID, uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"),
     bytes.fromhex("f79c3e09677c4bbda4793f349cb785e7")),
    (primitive("fixed[4]"), b"\x00\x01\x02\x03", b"\x00\x01\x02\x03"),
    (BINARY, b"", b""),
])
def test_exact_bytes_both_ways(type_, value, data):
    assert to_bytes(type_, value) == data
    decoded = from_bytes(type_, data)
    assert decoded == value
    assert type(decoded) is type(value)


def test_decimal_keeps_the_column_scale():
    decoded = from_bytes(primitive("decimal(38,10)"), unscaled_to_bytes(-(10**37) - 1))
    assert decoded == Decimal("-1000000000000000000000000000.0000000001")
    assert decoded.as_tuple().exponent == -10
    assert to_bytes(primitive("decimal(9,2)"), Decimal("14.2")) == b"\x05\x8c"  # rescaled


def test_promoted_columns_read_narrow_bounds_by_length():
    assert from_bytes(LONG, b"\xfe\xff\xff\xff") == -2
    assert from_bytes(DOUBLE, b"\x00\x00\xc0\x3f") == 1.5


def test_float_specials():
    assert math.isnan(from_bytes(DOUBLE, to_bytes(DOUBLE, math.nan)))
    assert from_bytes(FLOAT, to_bytes(FLOAT, -math.inf)) == -math.inf
    assert math.copysign(1, from_bytes(DOUBLE, to_bytes(DOUBLE, -0.0))) == -1


@pytest.mark.parametrize(("type_", "data"), [
    (INT, b"\x00\x00"),
    (LONG, b"\x00" * 5),
    (TIMESTAMP, b"\x00" * 4),
    (UUID, b"\x00" * 15),
    (primitive("fixed[4]"), b"\x00" * 3),
    (BOOLEAN, b""),
    (primitive("decimal(9,2)"), b""),
])
def test_wrong_lengths_are_errors(type_, data):
    with pytest.raises(ValueError, match=r"bytes|empty"):
        from_bytes(type_, data)


@pytest.mark.parametrize("name", ["variant", "geometry", "unknown"])
def test_types_without_a_single_value_form(name):
    with pytest.raises(ValueError, match="no single-value binary form"):
        from_bytes(PrimitiveType(name), b"\x00")


def test_invalid_utf8_is_an_error():
    with pytest.raises(UnicodeDecodeError):
        from_bytes(STRING, b"\xff")


INT_RANGE = st.integers(-(2**31), 2**31 - 1)
LONG_RANGE = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(("type_", "strategy"), [
    (BOOLEAN, st.booleans()),
    (INT, INT_RANGE),
    (LONG, LONG_RANGE),
    (FLOAT, st.floats(width=32, allow_nan=False)),
    (DOUBLE, st.floats(allow_nan=False)),
    (DATE, INT_RANGE),
    (TIME, st.integers(0, 86_400_000_000 - 1)),
    (TIMESTAMP, LONG_RANGE),
    (TIMESTAMPTZ, LONG_RANGE),
    (TIMESTAMP_NS, LONG_RANGE),
    (TIMESTAMPTZ_NS, LONG_RANGE),
    (primitive("decimal(38,6)"), st.decimals(places=6, allow_nan=False, allow_infinity=False,
                                             min_value=Decimal("-1e31"),
                                             max_value=Decimal("1e31"))),
    (primitive("decimal(3,0)"), st.integers(-999, 999).map(Decimal)),
    (STRING, st.text()),
    (UUID, st.uuids()),
    (primitive("fixed[7]"), st.binary(min_size=7, max_size=7)),
    (BINARY, st.binary()),
], ids=lambda x: str(x) if isinstance(x, PrimitiveType) else "")
def test_round_trip_every_type(type_, strategy):
    @given(strategy)
    def check(value):
        decoded = from_bytes(type_, to_bytes(type_, value))
        assert decoded == value
        if isinstance(value, Decimal):
            assert decoded.as_tuple().exponent == -type_.scale

    check()


@given(st.integers(-(2**200), 2**200))
def test_unscaled_bytes_are_minimal_twos_complement(n):
    data = unscaled_to_bytes(n)
    assert int.from_bytes(data, "big", signed=True) == n
    if len(data) > 1:  # one byte fewer could not hold it
        with pytest.raises(OverflowError):
            n.to_bytes(len(data) - 1, "big", signed=True)
