"""Literal conversion: user values in, internal representation out.

Filters arrive with plain Python values (`5`, `"2024-01-01"`, `Decimal("1.50")`, a
`datetime`), while everything the planner compares them with (partition values, column
bounds) is in the internal representation of `meltwater.planner.spec.types`. `to_internal` is the
one place that bridges the two, so a filter means the same whatever form its literal took.
The rules follow Iceberg Java's `Literals` conversions, which decide what Spark and Trino
users see, with two deliberate leniencies for a command line: a string without an offset is
taken as UTC for `timestamptz` columns, and a date-only string (or `datetime.date`) is
midnight for timestamp columns. A value that would change meaning on the way (an int out of
range, a decimal that needs rounding, an offset on a zone-less timestamp) is an error, never
silently altered.

Example::

    >>> to_internal("2017-11-16T14:31:08-08:00", TIMESTAMPTZ)
    1510871468000000
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from meltwater.planner.spec.types import PrimitiveType

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

EPOCH_DATE = dt.date(1970, 1, 1)
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MICROS_PER_SECOND = 1_000_000
MICROS_PER_DAY = 86_400 * MICROS_PER_SECOND
NANOS_PER_MICRO = 1_000

_DATE = re.compile(r"(-?\d{4,})-(\d{2})-(\d{2})")
_TIME = re.compile(r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?")
_TIMESTAMP = re.compile(
    r"(?P<date>-?\d{4,}-\d{2}-\d{2})"
    r"(?:[T ](?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?))?"
    r"(?P<zone>Z|[+-]\d{2}(?::?\d{2})?)?"
)


def to_internal(value: Any, type_: PrimitiveType) -> Any:
    """Convert a user/Python value to the internal representation of `type_`.

    `None` stays `None` (null is a value of every type). Raises TypeError when the value's
    Python type cannot stand for `type_` at all, ValueError when it can but this value does
    not fit (out of range, needs rounding, malformed string).
    """
    if value is None:
        return None
    converter = _CONVERTERS.get(type_.kind)
    if converter is None:
        raise TypeError(f"literals of type {type_} are not supported")
    return converter(value, type_)


# -- numbers -----------------------------------------------------------------------------------


def _reject_bool(value: Any, type_: PrimitiveType) -> None:
    # bool is an int subclass; `id = true` is a mistake, not the number 1.
    if isinstance(value, bool):
        raise TypeError(f"a boolean is not a {type_} value")


def _to_boolean(value: Any, _type: PrimitiveType) -> bool:
    if isinstance(value, bool):
        return value
    raise TypeError(f"{type(value).__name__} is not a boolean value")


def _to_integer(value: Any, type_: PrimitiveType) -> int:
    _reject_bool(value, type_)
    if not isinstance(value, int):
        raise TypeError(f"{type(value).__name__} is not an {type_} value")
    low, high = (INT_MIN, INT_MAX) if type_.kind == "int" else (LONG_MIN, LONG_MAX)
    if not low <= value <= high:
        raise ValueError(f"{value} is out of range for {type_} [{low}, {high}]")
    return int(value)


def _to_floating(value: Any, type_: PrimitiveType) -> float:
    _reject_bool(value, type_)
    if not isinstance(value, (int, float, Decimal)):
        raise TypeError(f"{type(value).__name__} is not a {type_} value")
    result = float(value)
    if type_.kind == "float":
        # Round to single precision, as Java does, so `f = 0.1` equals the stored float.
        try:
            result = struct.unpack("<f", struct.pack("<f", result))[0]
        except OverflowError:
            raise ValueError(f"{value} is out of range for float") from None
    return result


def _to_decimal(value: Any, type_: PrimitiveType) -> Decimal:
    _reject_bool(value, type_)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a finite decimal")
        value = Decimal(repr(value))  # the shortest decimal that reads back as this float
    elif isinstance(value, (int, str)):
        try:
            value = Decimal(value.strip() if isinstance(value, str) else value)
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a decimal number") from None
    elif not isinstance(value, Decimal):
        raise TypeError(f"{type(value).__name__} is not a {type_} value")
    if not value.is_finite():
        raise ValueError(f"{value} is not a finite decimal")
    return rescale_decimal(value, type_.scale, type_.precision)


def rescale_decimal(value: Decimal, scale: int, precision: int | None = None) -> Decimal:
    """`value` with exactly `scale` fractional digits; ValueError if that needs rounding.

    Exact integer arithmetic is used, so precision-38 values never meet the decimal
    context's default 28-digit rounding.
    """
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # "n", "N", "F": NaN, signaling NaN, infinity
        raise ValueError(f"{value} is not a finite decimal")
    unscaled = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        unscaled *= 10**shift
    else:
        unscaled, rest = divmod(unscaled, 10**-shift)
        if rest:
            raise ValueError(f"{value} needs rounding to fit scale {scale}")
    if precision is not None and len(str(unscaled)) > precision:
        raise ValueError(f"{value} has more than {precision} digits at scale {scale}")
    return Decimal((sign, tuple(int(c) for c in str(unscaled)), -scale))


# -- dates and times ---------------------------------------------------------------------------


def parse_date(text: str) -> int:
    """Days since the epoch of an ISO `YYYY-MM-DD` string."""
    m = _DATE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not an ISO date (YYYY-MM-DD)")
    return (dt.date(int(m[1]), int(m[2]), int(m[3])) - EPOCH_DATE).days


def _parse_time_nanos(text: str) -> int:
    m = _TIME.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not an ISO time (HH:MM[:SS[.fraction]])")
    hour, minute, second = int(m[1]), int(m[2]), int(m[3] or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{text!r} is not a valid time of day")
    fraction = int((m[4] or "").ljust(9, "0"))
    return ((hour * 60 + minute) * 60 + second) * 1_000_000_000 + fraction


def parse_timestamp(text: str, with_zone: bool, nanos: bool = False) -> int:
    """Micros (or nanos) since the epoch of an ISO timestamp string.

    Zone-less columns reject strings with an offset (Java does too: the instant would be
    ambiguous); zoned columns accept `Z`/`+HH:MM` offsets and read a string without one as
    UTC. A bare date means midnight.
    """
    m = _TIMESTAMP.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not an ISO timestamp (YYYY-MM-DDTHH:MM:SS[.fraction])")
    zone = m["zone"]
    if zone and not with_zone:
        raise ValueError(f"{text!r} has a zone offset, but the column is a timestamp "
                         "without time zone; drop the offset")
    day = parse_date(m["date"])
    total = day * 86_400 * 1_000_000_000 + (_parse_time_nanos(m["time"]) if m["time"] else 0)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset_minutes = int(digits[:2]) * 60 + int(digits[2:4] or 0)
        total -= sign * offset_minutes * 60 * 1_000_000_000
    if nanos:
        return total
    micros, rest = divmod(total, NANOS_PER_MICRO)
    if rest:
        raise ValueError(f"{text!r} has nanoseconds, but the column holds microseconds")
    return micros


def _datetime_micros(value: dt.datetime) -> int:
    base = EPOCH_UTC if value.tzinfo is not None else EPOCH
    delta = value - base
    return (delta.days * 86_400 + delta.seconds) * MICROS_PER_SECOND + delta.microseconds


def _to_date(value: Any, type_: PrimitiveType) -> int:
    _reject_bool(value, type_)
    if isinstance(value, dt.datetime):
        raise TypeError("a datetime is not a date value; use datetime.date or 'YYYY-MM-DD'")
    if isinstance(value, dt.date):
        return (value - EPOCH_DATE).days
    if isinstance(value, str):
        return parse_date(value)
    if isinstance(value, int):
        return _to_integer(value, PrimitiveType("int"))
    raise TypeError(f"{type(value).__name__} is not a date value")


def _to_time(value: Any, type_: PrimitiveType) -> int:
    _reject_bool(value, type_)
    if isinstance(value, dt.time):
        if value.tzinfo is not None:
            raise ValueError("Iceberg times have no zone; pass a naive time")
        return ((value.hour * 60 + value.minute) * 60 + value.second) * MICROS_PER_SECOND \
            + value.microsecond
    if isinstance(value, str):
        nanos = _parse_time_nanos(value.strip())
        micros, rest = divmod(nanos, NANOS_PER_MICRO)
        if rest:
            raise ValueError(f"{value!r} has nanoseconds, but times hold microseconds")
        return micros
    if isinstance(value, int):
        if not 0 <= value < MICROS_PER_DAY:
            raise ValueError(f"{value} is not a time of day in microseconds")
        return value
    raise TypeError(f"{type(value).__name__} is not a time value")


def _to_timestamp(value: Any, type_: PrimitiveType) -> int:
    _reject_bool(value, type_)
    kind = type_.kind
    with_zone = kind.startswith("timestamptz")
    nanos = kind.endswith("_ns")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None and not with_zone:
            raise ValueError(f"{value.isoformat()} has a zone, but the column is a timestamp "
                             "without time zone; pass a naive datetime")
        micros = _datetime_micros(value)
        return micros * NANOS_PER_MICRO if nanos else micros
    if isinstance(value, dt.date):
        days = (value - EPOCH_DATE).days
        return days * MICROS_PER_DAY * (NANOS_PER_MICRO if nanos else 1)
    if isinstance(value, str):
        return parse_timestamp(value, with_zone, nanos)
    if isinstance(value, int):
        return _to_integer(value, PrimitiveType("long"))
    raise TypeError(f"{type(value).__name__} is not a {type_} value")


# -- strings, uuids, bytes ---------------------------------------------------------------------


def _to_string(value: Any, _type: PrimitiveType) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"{type(value).__name__} is not a string value")


def _to_uuid(value: Any, _type: PrimitiveType) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not a UUID") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) != 16:
            raise ValueError(f"a UUID has 16 bytes, not {len(value)}")
        return uuid.UUID(bytes=bytes(value))
    raise TypeError(f"{type(value).__name__} is not a uuid value")


def _to_bytes(value: Any, type_: PrimitiveType) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        result = bytes(value)
    elif isinstance(value, str):
        # Iceberg's JSON single-value form of binary and fixed is hex.
        try:
            result = bytes.fromhex(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not hex-encoded bytes") from None
    else:
        raise TypeError(f"{type(value).__name__} is not a {type_} value")
    if type_.kind == "fixed" and len(result) != type_.length:
        raise ValueError(f"{type_} holds exactly {type_.length} bytes, not {len(result)}")
    return result


_CONVERTERS = {
    "boolean": _to_boolean,
    "int": _to_integer,
    "long": _to_integer,
    "float": _to_floating,
    "double": _to_floating,
    "decimal": _to_decimal,
    "date": _to_date,
    "time": _to_time,
    "timestamp": _to_timestamp,
    "timestamptz": _to_timestamp,
    "timestamp_ns": _to_timestamp,
    "timestamptz_ns": _to_timestamp,
    "string": _to_string,
    "uuid": _to_uuid,
    "fixed": _to_bytes,
    "binary": _to_bytes,
}
