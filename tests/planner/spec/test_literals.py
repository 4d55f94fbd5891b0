"""User values to internal values and back, following Iceberg Java's literal conversions."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from literal_oracle import to_python, to_string

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.tree import Op, Predicate, bind
from meltwater.planner.spec.literals import to_internal
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
    NestedField,
    PrimitiveType,
    Schema,
    primitive,
)

BOOLEAN = PrimitiveType("boolean")
TIMESTAMP_NS = PrimitiveType("timestamp_ns")
TIMESTAMPTZ_NS = PrimitiveType("timestamptz_ns")
DEC = primitive("decimal(9,2)")
UTC = dt.timezone.utc


@pytest.mark.parametrize(("value", "type_", "expected"), [
    (True, BOOLEAN, True),
    (34, INT, 34),
    (2**31 - 1, INT, 2**31 - 1),
    (2**40, LONG, 2**40),
    (1, DOUBLE, 1.0),
    (Decimal("2.5"), DOUBLE, 2.5),
    (0.1, FLOAT, 0.10000000149011612),  # rounded to single precision, as Java casts
    (Decimal("14.2"), DEC, Decimal("14.20")),
    ("14.20", DEC, Decimal("14.20")),
    (14, DEC, Decimal("14.00")),
    (0.5, DEC, Decimal("0.50")),
    ("2017-11-16", DATE, 17486),
    (dt.date(1969, 12, 31), DATE, -1),
    (17486, DATE, 17486),
    ("22:31:08", TIME, 81068000000),
    ("22:31", TIME, 81060000000),
    (dt.time(0, 0, 0, 1), TIME, 1),
    ("2017-11-16T22:31:08", TIMESTAMP, 1510871468000000),
    ("2017-11-16 22:31:08.000001", TIMESTAMP, 1510871468000001),
    ("2017-11-16", TIMESTAMP, 1510790400000000),
    (dt.date(2017, 11, 16), TIMESTAMP, 1510790400000000),
    (dt.datetime(1969, 12, 31, 23, 59, 59, 999999), TIMESTAMP, -1),
    ("2017-11-16T14:31:08-08:00", TIMESTAMPTZ, 1510871468000000),
    ("2017-11-16T22:31:08Z", TIMESTAMPTZ, 1510871468000000),
    ("2017-11-16T22:31:08", TIMESTAMPTZ, 1510871468000000),  # naive string read as UTC
    (dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(dt.timedelta(hours=-8))),
     TIMESTAMPTZ, 1510871468000000),
    ("2017-11-16T22:31:08.000001001", TIMESTAMP_NS, 1510871468000001001),
    ("1969-12-31T23:59:59.999999999", TIMESTAMP_NS, -1),
    ("2017-11-16T14:31:08.000001001-08:00", TIMESTAMPTZ_NS, 1510871468000001001),
    (dt.datetime(2017, 11, 16, 22, 31, 8, 1, tzinfo=UTC), TIMESTAMPTZ_NS, 1510871468000001000),
    ("iceberg", STRING, "iceberg"),
    ("F79C3E09-677C-4BBD-A479-3F349CB785E7", UUID,
     uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")),
    (bytes.fromhex("f79c3e09677c4bbda4793f349cb785e7"), UUID,
     uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")),
    (bytearray(b"\x00\x01"), BINARY, b"\x00\x01"),
    ("0001ff", BINARY, b"\x00\x01\xff"),
    ("00010203", primitive("fixed[4]"), b"\x00\x01\x02\x03"),
    (None, LONG, None),
])
def test_to_internal(value, type_, expected):
    result = to_internal(value, type_)
    assert result == expected
    assert type(result) is type(expected)
    if isinstance(expected, Decimal):
        assert result.as_tuple().exponent == expected.as_tuple().exponent


@pytest.mark.parametrize(("value", "type_", "error", "message"), [
    (2**31, INT, ValueError, "out of range"),
    (-(2**63) - 1, LONG, ValueError, "out of range"),
    (True, INT, TypeError, "boolean"),
    (1, BOOLEAN, TypeError, "not a boolean"),
    (1.5, INT, TypeError, "float"),
    ("5", LONG, TypeError, "str"),
    (1e300, FLOAT, ValueError, "out of range"),
    (Decimal("14.205"), DEC, ValueError, "rounding"),
    (0.001, DEC, ValueError, "rounding"),
    (Decimal("12345678.00"), DEC, ValueError, "9 digits"),
    ("abc", DEC, ValueError, "not a decimal"),
    (Decimal("NaN"), DEC, ValueError, "finite"),
    ("2017-13-01", DATE, ValueError, "month"),
    ("16/11/2017", DATE, ValueError, "ISO date"),
    (dt.datetime(2017, 1, 1), DATE, TypeError, "datetime"),
    ("25:00", TIME, ValueError, "valid time"),
    ("2017-11-16T22:31:08+01:00", TIMESTAMP, ValueError, "without time zone"),
    (dt.datetime(2017, 1, 1, tzinfo=UTC), TIMESTAMP, ValueError, "without time zone"),
    ("2017-11-16T22:31:08.000000001", TIMESTAMP, ValueError, "nanoseconds"),
    ("yesterday", TIMESTAMPTZ, ValueError, "ISO timestamp"),
    ("not-a-uuid", UUID, ValueError, "not a UUID"),
    (b"\x00" * 15, UUID, ValueError, "16 bytes"),
    (b"\x00", primitive("fixed[4]"), ValueError, "exactly 4"),
    ("zz", BINARY, ValueError, "hex"),
    (5, STRING, TypeError, "not a string"),
])
def test_to_internal_rejects(value, type_, error, message):
    with pytest.raises(error, match=message):
        to_internal(value, type_)


def test_bind_reports_bad_literals_as_filter_errors():
    schema = Schema((NestedField(1, "id", INT, True), NestedField(2, "ts", TIMESTAMPTZ)))
    with pytest.raises(FilterError, match="does not fit column 'id' of type int"):
        bind(Predicate(Op.EQ, "id", (2**40,)), schema)
    bound = bind(Predicate(Op.GT, "ts", ("2024-01-01T00:00:00+00:00",)), schema)
    assert bound.literal == 1704067200000000


@pytest.mark.parametrize(("value", "type_", "expected"), [
    (17486, DATE, dt.date(2017, 11, 16)),
    (-1, DATE, dt.date(1969, 12, 31)),
    (81068000001, TIME, dt.time(22, 31, 8, 1)),
    (-1, TIMESTAMP, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
    (1510871468000000, TIMESTAMPTZ, dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=UTC)),
    (1510871468000001999, TIMESTAMP_NS, dt.datetime(2017, 11, 16, 22, 31, 8, 1)),
    (-1, TIMESTAMPTZ_NS, dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    (Decimal("1.50"), DEC, Decimal("1.50")),
    (b"\x01", BINARY, b"\x01"),
    (None, DATE, None),
])
def test_to_python(value, type_, expected):
    result = to_python(value, type_)
    assert result == expected
    assert type(result) is type(expected)
    if isinstance(expected, dt.datetime):
        assert result.tzinfo == expected.tzinfo


@pytest.mark.parametrize(("value", "type_", "expected"), [
    (17486, DATE, "2017-11-16"),
    (1510871468000001001, TIMESTAMP_NS, "2017-11-16T22:31:08.000001001"),
    (-1, TIMESTAMPTZ, "1969-12-31T23:59:59.999999+00:00"),
    (0, TIMESTAMP, "1970-01-01T00:00:00"),
    (b"\x00\xff", BINARY, "00ff"),
    (None, LONG, "null"),
])
def test_to_string(value, type_, expected):
    assert to_string(value, type_) == expected


@given(st.datetimes(timezones=st.just(UTC)))
def test_timestamptz_round_trip(moment):
    micros = to_internal(moment, TIMESTAMPTZ)
    assert to_python(micros, TIMESTAMPTZ) == moment
    assert to_internal(to_string(micros, TIMESTAMPTZ), TIMESTAMPTZ) == micros


@given(st.datetimes())
def test_timestamp_round_trip(moment):
    micros = to_internal(moment, TIMESTAMP)
    assert to_python(micros, TIMESTAMP) == moment
    assert to_internal(moment.isoformat(), TIMESTAMP) == micros
    nanos = to_internal(to_string(micros, TIMESTAMP), TIMESTAMP_NS)
    assert nanos == micros * 1000


@given(st.dates(), st.times())
def test_date_and_time_round_trip(date, time):
    assert to_python(to_internal(date, DATE), DATE) == date
    assert to_python(to_internal(date.isoformat(), DATE), DATE) == date
    assert to_python(to_internal(time, TIME), TIME) == time
    assert to_internal(time.isoformat(), TIME) == to_internal(time, TIME)
