"""Partition transforms against the spec: Appendix B hash vectors, floor semantics, types."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltwater.planner.spec.literals import to_internal
from meltwater.planner.spec.transforms import (
    BucketTransform,
    UnknownTransform,
    bucket_hash,
    civil_from_days,
    parse_transform,
)
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

TIMESTAMP_NS = PrimitiveType("timestamp_ns")
TIMESTAMPTZ_NS = PrimitiveType("timestamptz_ns")
DECIMAL_9_2 = primitive("decimal(9,2)")

# Iceberg spec, Appendix B: 32-bit hash requirements (values as the spec writes them).
SPEC_HASH_VECTORS = [
    (34, INT, 2017239379),
    (34, LONG, 2017239379),
    (Decimal("14.20"), DECIMAL_9_2, -500754589),
    ("2017-11-16", DATE, -653330422),
    ("22:31:08", TIME, -662762989),
    ("2017-11-16T22:31:08", TIMESTAMP, -2047944441),
    ("2017-11-16T22:31:08.000001", TIMESTAMP, -1207196810),
    ("2017-11-16T14:31:08-08:00", TIMESTAMPTZ, -2047944441),
    ("2017-11-16T14:31:08.000001-08:00", TIMESTAMPTZ, -1207196810),
    ("2017-11-16T22:31:08", TIMESTAMP_NS, -2047944441),
    ("2017-11-16T22:31:08.000001001", TIMESTAMP_NS, -1207196810),
    ("2017-11-16T14:31:08-08:00", TIMESTAMPTZ_NS, -2047944441),
    ("2017-11-16T14:31:08.000001001-08:00", TIMESTAMPTZ_NS, -1207196810),
    ("iceberg", STRING, 1210000089),
    ("f79c3e09-677c-4bbd-a479-3f349cb785e7", UUID, 1488055340),
    (b"\x00\x01\x02\x03", primitive("fixed[4]"), -188683207),
    (b"\x00\x01\x02\x03", BINARY, -188683207),
]


@pytest.mark.parametrize(("value", "type_", "expected"), SPEC_HASH_VECTORS,
                         ids=[f"{t}:{v!s}" for v, t, _ in SPEC_HASH_VECTORS])
def test_bucket_hash_matches_spec_appendix_b(value, type_, expected):
    assert bucket_hash(to_internal(value, type_), type_) == expected


@pytest.mark.parametrize(("type_", "value", "expected"), [
    (INT, 34, 79),
    (LONG, 34, 79),
    (DATE, 17486, 26),
    (TIME, 81068000000, 59),
    (TIMESTAMP, 1510871468000000, 7),
    (DECIMAL_9_2, Decimal("14.20"), 59),
    (STRING, "iceberg", 89),
    (UUID, uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"), 40),
    (BINARY, b"\x00\x01\x02\x03", 41),  # (-188683207 & 0x7FFFFFFF) % 100
])
def test_bucket_100_values(type_, value, expected):
    assert parse_transform("bucket[100]", type_).apply(value) == expected


def test_bucket_masks_the_sign_bit_before_modulo():
    # hash(2017-11-16) is negative: (-653330422 & 0x7FFFFFFF) % 10 = 1494153226 % 10
    assert parse_transform("bucket[10]", DATE).apply(17486) == 6
    assert parse_transform("bucket[16]", INT).apply(34) == 3
    assert parse_transform("bucket[16]", STRING).apply("iceberg") == 9


def test_bucket_of_zero_and_negative_decimals_uses_minimal_java_bytes():
    # BigInteger.toByteArray: 0 -> 00, -1 -> ff, 128 -> 00 80, -128 -> 80
    import mmh3

    dec = primitive("decimal(5,0)")
    assert bucket_hash(Decimal("0"), dec) == mmh3.hash(b"\x00", 0)
    assert bucket_hash(Decimal("-1"), dec) == mmh3.hash(b"\xff", 0)
    assert bucket_hash(Decimal("128"), dec) == mmh3.hash(b"\x00\x80", 0)
    assert bucket_hash(Decimal("-128"), dec) == mmh3.hash(b"\x80", 0)


def test_bucket_promotion_int_to_long_and_timestamp_to_nanos_keep_buckets():
    b16 = parse_transform("bucket[16]")
    for value in (-5, 0, 7, 2**31 - 1):
        assert b16.bind(INT).apply(value) == b16.bind(LONG).apply(value)
    micros = to_internal("1969-07-20T20:17:40.123456", TIMESTAMP)
    assert b16.bind(TIMESTAMP).apply(micros) == b16.bind(TIMESTAMP_NS).apply(micros * 1000 + 999)


def test_bucket_needs_a_source_type():
    with pytest.raises(ValueError, match="needs its source type"):
        parse_transform("bucket[4]").apply(5)


@pytest.mark.parametrize(("type_", "value", "width", "expected"), [
    (INT, 1, 10, 0),
    (INT, -1, 10, -10),
    (INT, 10, 10, 10),
    (INT, -10, 10, -10),
    (LONG, -11, 10, -20),
    (LONG, 2**40 + 7, 8, 2**40),
    (DECIMAL_9_2, Decimal("10.65"), 50, Decimal("10.50")),
    (DECIMAL_9_2, Decimal("-0.05"), 10, Decimal("-0.10")),
    (DECIMAL_9_2, Decimal("12.34"), 10, Decimal("12.30")),
    (STRING, "iceberg", 3, "ice"),
    (STRING, "ab", 3, "ab"),
    (STRING, "\U0001f9ca😀é-x", 3, "\U0001f9ca😀é"),  # code points, not bytes or UTF-16
    (BINARY, b"\x01\x02\x03\x04", 3, b"\x01\x02\x03"),
])
def test_truncate(type_, value, width, expected):
    result = parse_transform(f"truncate[{width}]", type_).apply(value)
    assert result == expected
    if isinstance(expected, Decimal):
        assert result.as_tuple().exponent == -2


@pytest.mark.parametrize(("transform", "type_", "value", "expected"), [
    ("year", DATE, "2017-11-16", 47),
    ("month", DATE, "2017-11-16", 574),
    ("day", DATE, "2017-11-16", 17486),
    ("year", DATE, "1969-12-31", -1),
    ("month", DATE, "1969-12-31", -1),
    ("month", DATE, "1969-01-01", -12),
    ("year", DATE, "1969-01-01", -1),
    ("year", DATE, "1968-12-31", -2),
    ("day", DATE, "1969-12-31", -1),
    ("year", TIMESTAMP, "1969-12-31T23:59:59.999999", -1),
    ("month", TIMESTAMP, "1969-12-31T23:59:59.999999", -1),
    ("day", TIMESTAMP, "1969-12-31T23:59:59.999999", -1),
    ("hour", TIMESTAMP, "1969-12-31T23:59:59.999999", -1),
    ("hour", TIMESTAMP, "1969-12-31T23:00:00", -1),
    ("hour", TIMESTAMP, "1969-12-31T22:59:59", -2),
    ("day", TIMESTAMP, "1970-01-01T00:00:00", 0),
    ("hour", TIMESTAMPTZ, "2017-11-16T14:31:08-08:00", 419686),
    ("day", TIMESTAMPTZ, "2017-11-16T23:31:08+01:00", 17486),
    ("month", TIMESTAMPTZ, "2017-11-16T22:31:08Z", 574),
    ("year", TIMESTAMP_NS, "2017-11-16T22:31:08.000000001", 47),
    ("day", TIMESTAMP_NS, "1969-12-31T23:59:59.999999999", -1),
    ("hour", TIMESTAMPTZ_NS, "1970-01-01T00:00:00.000000001+00:00", 0),
])
def test_time_transforms_floor(transform, type_, value, expected):
    assert parse_transform(transform, type_).apply(to_internal(value, type_)) == expected


@given(st.dates(), st.times())
def test_time_transforms_agree_with_datetime(date, time):
    import datetime as dt

    moment = dt.datetime.combine(date, time)
    micros = to_internal(moment, TIMESTAMP)
    days = (date - dt.date(1970, 1, 1)).days
    assert parse_transform("year", TIMESTAMP).apply(micros) == date.year - 1970
    assert parse_transform("month", TIMESTAMP).apply(micros) == \
        (date.year - 1970) * 12 + date.month - 1
    assert parse_transform("day", TIMESTAMP).apply(micros) == days
    assert parse_transform("hour", TIMESTAMP).apply(micros) == days * 24 + time.hour
    assert parse_transform("month", DATE).apply(days) == (date.year - 1970) * 12 + date.month - 1
    assert civil_from_days(days) == (date.year, date.month, date.day)


def test_null_in_null_out_and_void():
    for text, type_ in [("identity", STRING), ("bucket[4]", LONG), ("truncate[2]", STRING),
                        ("year", DATE), ("hour", TIMESTAMP), ("void", LONG)]:
        assert parse_transform(text, type_).apply(None) is None
    assert parse_transform("void", LONG).apply(5) is None
    assert parse_transform("identity", STRING).apply("x") == "x"


@pytest.mark.parametrize(("text", "source", "result"), [
    ("identity", STRING, STRING),
    ("bucket[16]", STRING, INT),
    ("truncate[4]", DECIMAL_9_2, DECIMAL_9_2),
    ("year", TIMESTAMPTZ, INT),
    ("month", DATE, INT),
    ("day", TIMESTAMP_NS, DATE),
    ("hour", TIMESTAMP, INT),
    ("void", DOUBLE, DOUBLE),
])
def test_result_types(text, source, result):
    assert parse_transform(text).result_type(source) == result


@pytest.mark.parametrize(("text", "accepted", "rejected"), [
    ("identity", [STRING, DOUBLE, UUID], [PrimitiveType("variant")]),
    ("bucket[2]", [INT, LONG, DECIMAL_9_2, DATE, TIME, TIMESTAMP_NS, STRING, UUID, BINARY],
     [FLOAT, DOUBLE, PrimitiveType("boolean")]),
    ("truncate[2]", [INT, LONG, DECIMAL_9_2, STRING, BINARY], [DATE, UUID, DOUBLE]),
    ("year", [DATE, TIMESTAMP, TIMESTAMPTZ_NS], [LONG, TIME, STRING]),
    ("day", [DATE, TIMESTAMPTZ], [TIME]),
    ("hour", [TIMESTAMP, TIMESTAMPTZ, TIMESTAMP_NS], [DATE, TIME]),
    ("void", [DOUBLE, STRING], []),
])
def test_can_transform(text, accepted, rejected):
    transform = parse_transform(text)
    assert all(transform.can_transform(t) for t in accepted)
    assert not any(transform.can_transform(t) for t in rejected)
    for type_ in rejected:
        with pytest.raises(ValueError, match="cannot be applied"):
            transform.bind(type_)


def test_parse_string_forms_and_order():
    assert str(parse_transform("bucket[ 16 ]")) == "bucket[16]"
    assert str(parse_transform("Truncate[4]")) == "truncate[4]"
    assert isinstance(parse_transform("bucket[16]"), BucketTransform)
    assert parse_transform("bucket[16]").num_buckets == 16
    assert parse_transform("truncate[4]").width == 4
    assert [parse_transform(t).preserves_order for t in
            ("identity", "bucket[2]", "truncate[2]", "year", "month", "day", "hour", "void")] \
        == [True, False, True, True, True, True, True, False]
    assert parse_transform("day", DATE) == parse_transform("day").bind(DATE)
    assert parse_transform("day", DATE) != parse_transform("day", TIMESTAMP)


def test_unknown_transform_is_kept_not_fatal():
    transform = parse_transform("zorder[3]")
    assert isinstance(transform, UnknownTransform)
    assert str(transform) == "zorder[3]"
    with pytest.raises(ValueError, match="unknown partition transform"):
        transform.apply(1)


def test_invalid_parameters():
    with pytest.raises(ValueError, match="positive"):
        parse_transform("bucket[0]")
    with pytest.raises(ValueError, match="positive"):
        parse_transform("truncate[0]")
