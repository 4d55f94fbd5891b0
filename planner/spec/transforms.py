"""Partition transforms: what `bucket[16]` or `day` does to a value, per the Iceberg spec.

A partition spec names each field's transform by a string; `parse_transform` turns it into
an object that computes partition values from source values (both in the internal
representation of `meltwater.planner.spec.types`). Projections (`projections.py`) use these
objects to turn row filters into partition filters, so the arithmetic here must agree with
Iceberg Java to the bit: bucket numbers with its Murmur3 hash, time transforms with floor
semantics before 1970 (1969-12-31 is year -1, month -1, day -1, not 0).

Bucket and the time transforms depend on the source type (a long and a `timestamp_ns`
are both ints, but hash and truncate differently), so they must be bound to one::

    >>> parse_transform("bucket[16]", LONG).apply(34)
    3
    >>> day = parse_transform("day", TIMESTAMPTZ)
    >>> day.apply(1510871468000000), day.result_type(TIMESTAMPTZ)
    (17486, PrimitiveType(name='date'))
"""

from __future__ import annotations

import re
import struct
import uuid
from decimal import Decimal
from typing import Any

import mmh3

from meltwater.planner.spec.conversions import (
    decimal_from_unscaled,
    decimal_unscaled,
    unscaled_to_bytes,
)
from meltwater.planner.spec.types import DATE, INT, PrimitiveType

MICROS_PER_HOUR = 3_600_000_000
MICROS_PER_DAY = 24 * MICROS_PER_HOUR
NANOS_PER_MICRO = 1_000

_INTEGER_KINDS = frozenset({"int", "long", "date", "time", "timestamp", "timestamptz"})
_TIMESTAMP_KINDS = frozenset({"timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"})
_BUCKET_KINDS = _INTEGER_KINDS | {
    "timestamp_ns", "timestamptz_ns", "decimal", "string", "uuid", "fixed", "binary"}
_TRUNCATE_KINDS = frozenset({"int", "long", "decimal", "string", "binary"})
_NOT_IDENTITY = frozenset({"variant", "geometry", "geography", "unknown"})
_LONG = struct.Struct("<q")


class Transform:
    """A partition transform, optionally bound to the source column's type.

    `apply` maps a source value to a partition value (None to None). Subclasses that need
    the source type (bucket, year/month/day/hour) refuse to apply until bound.
    """

    preserves_order = False

    def __init__(self, source_type: PrimitiveType | None = None) -> None:
        self.source_type = source_type

    def bind(self, source_type: PrimitiveType) -> Transform:
        """This transform for `source_type`; ValueError if it cannot transform that type."""
        if not self.can_transform(source_type):
            raise ValueError(f"transform {self} cannot be applied to {source_type} columns")
        bound = object.__new__(type(self))
        bound.__dict__.update(self.__dict__)
        bound.source_type = source_type
        return bound

    def can_transform(self, source_type: PrimitiveType) -> bool:
        """Whether the transform applies to values of this type."""
        raise NotImplementedError

    def result_type(self, source_type: PrimitiveType) -> PrimitiveType:
        """The type of the transform's results for a source of this type."""
        return source_type

    def apply(self, value: Any) -> Any:
        """The transform of one internal value; null stays null."""
        if value is None:
            return None
        return self._apply(value)

    def _apply(self, value: Any) -> Any:
        raise NotImplementedError

    def _kind(self) -> str:
        if self.source_type is None:
            raise ValueError(f"transform {self} needs its source type; "
                             f"use parse_transform({str(self)!r}, source_type)")
        return self.source_type.kind

    def __str__(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        bound = f", {self.source_type}" if self.source_type is not None else ""
        return f"Transform({str(self)!r}{bound})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Transform) and str(self) == str(other)
                and self.source_type == other.source_type)

    def __hash__(self) -> int:
        return hash((str(self), self.source_type))


class IdentityTransform(Transform):
    """The value itself."""

    preserves_order = True

    def can_transform(self, source_type: PrimitiveType) -> bool:
        """Whether values of this type can be partition values as they are."""
        return source_type.kind not in _NOT_IDENTITY

    def _apply(self, value: Any) -> Any:
        return value

    def __str__(self) -> str:
        return "identity"


class VoidTransform(Transform):
    """Always null: what v1 tables leave where a partition field was dropped."""

    def can_transform(self, _source_type: PrimitiveType) -> bool:
        """Always: any column can be voided."""
        return True

    def apply(self, _value: Any) -> Any:
        """Always null."""
        return None

    def __str__(self) -> str:
        return "void"


class UnknownTransform(Transform):
    """A transform this version does not know; Iceberg reads such tables without pruning."""

    def __init__(self, name: str, source_type: PrimitiveType | None = None) -> None:
        super().__init__(source_type)
        self.name = name

    def can_transform(self, _source_type: PrimitiveType) -> bool:
        """Always: the type is not checked for a transform not understood."""
        return True

    def result_type(self, _source_type: PrimitiveType) -> PrimitiveType:
        """The unknown type: values of an unknown transform are not interpreted."""
        return PrimitiveType("unknown")

    def _apply(self, _value: Any) -> Any:
        raise ValueError(f"unknown partition transform {self.name!r}")

    def __str__(self) -> str:
        return self.name


class BucketTransform(Transform):
    """`bucket[N]`: (Murmur3-32 of the value's hash bytes & 0x7FFFFFFF) % N."""

    def __init__(self, num_buckets: int, source_type: PrimitiveType | None = None) -> None:
        super().__init__(source_type)
        if num_buckets <= 0:
            raise ValueError(f"bucket[{num_buckets}]: the number of buckets must be positive")
        self.num_buckets = num_buckets

    def can_transform(self, source_type: PrimitiveType) -> bool:
        """Whether the spec defines a bucket hash for this type."""
        return source_type.kind in _BUCKET_KINDS

    def result_type(self, _source_type: PrimitiveType) -> PrimitiveType:
        """Bucket numbers are ints."""
        return INT

    def _apply(self, value: Any) -> int:
        return (bucket_hash(value, self.source_type or _unbound(self))
                & 0x7FFFFFFF) % self.num_buckets

    def __str__(self) -> str:
        return f"bucket[{self.num_buckets}]"


def bucket_hash(value: Any, source_type: PrimitiveType) -> int:
    """The spec's 32-bit hash (Appendix B) of an internal value, as a signed int.

    Integers of every integral type hash as 8-byte little-endian longs so that promoting
    int to long keeps buckets; nanosecond timestamps hash as their microsecond value (v3)
    so that a timestamp and its timestamp_ns copy share a bucket.
    """
    kind = source_type.kind
    if kind in _INTEGER_KINDS:
        data = _LONG.pack(value)
    elif kind in ("timestamp_ns", "timestamptz_ns"):
        data = _LONG.pack(value // NANOS_PER_MICRO)
    elif kind == "decimal":
        data = unscaled_to_bytes(decimal_unscaled(value, source_type.scale))
    elif kind == "string":
        data = value.encode("utf-8")
    elif kind == "uuid":
        data = value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    elif kind in ("fixed", "binary"):
        data = bytes(value)
    else:
        raise ValueError(f"cannot bucket {source_type} values")
    return mmh3.hash(data, 0, signed=True)


class TruncateTransform(Transform):
    """`truncate[W]`: ints and decimals down to a multiple of W (floor, also for negatives);
    strings to their first W code points; binary to its first W bytes."""

    preserves_order = True

    def __init__(self, width: int, source_type: PrimitiveType | None = None) -> None:
        super().__init__(source_type)
        if width <= 0:
            raise ValueError(f"truncate[{width}]: the width must be positive")
        self.width = width

    def can_transform(self, source_type: PrimitiveType) -> bool:
        """Whether the spec defines truncation for this type (ints, longs, decimals, strings,
        binary)."""
        return source_type.kind in _TRUNCATE_KINDS

    def _apply(self, value: Any) -> Any:
        width = self.width
        if isinstance(value, (str, bytes)):
            return value[:width]
        if isinstance(value, Decimal):
            exponent = value.as_tuple().exponent
            if self.source_type is not None:
                scale = self.source_type.scale
            elif isinstance(exponent, int):
                scale = -exponent
            else:  # "n", "N", "F": NaN, signaling NaN, infinity
                raise ValueError(f"{value} is not a finite decimal")
            unscaled = decimal_unscaled(value, scale)
            return decimal_from_unscaled(unscaled - unscaled % width, scale)
        if isinstance(value, int) and not isinstance(value, bool):
            return value - value % width  # Python's % floors, as the spec requires
        raise ValueError(f"cannot truncate {type(value).__name__} values")

    def __str__(self) -> str:
        return f"truncate[{self.width}]"


class TimeTransform(Transform):
    """year / month / day / hour: whole units since 1970-01-01, floored before the epoch."""

    preserves_order = True
    unit = ""

    def can_transform(self, source_type: PrimitiveType) -> bool:
        """Whether values of this type have this unit (dates have no hours)."""
        kind = source_type.kind
        return kind in _TIMESTAMP_KINDS or (kind == "date" and self.unit != "hour")

    def result_type(self, _source_type: PrimitiveType) -> PrimitiveType:
        """Days are dates; years, months and hours are ints counted from 1970."""
        return DATE if self.unit == "day" else INT

    def _apply(self, value: int) -> int:
        kind = self._kind()
        if kind == "date":
            return self._from_days(value)
        micros = value // NANOS_PER_MICRO if kind.endswith("_ns") else value
        if self.unit == "hour":
            return micros // MICROS_PER_HOUR
        return self._from_days(micros // MICROS_PER_DAY)

    def _from_days(self, days: int) -> int:
        if self.unit == "day":
            return days
        year, month, _ = civil_from_days(days)
        if self.unit == "year":
            return year - 1970
        return (year - 1970) * 12 + month - 1

    def __str__(self) -> str:
        return self.unit


class YearTransform(TimeTransform):
    """Years since 1970."""

    unit = "year"


class MonthTransform(TimeTransform):
    """Months since 1970-01."""

    unit = "month"


class DayTransform(TimeTransform):
    """Days since 1970-01-01, as a date."""

    unit = "day"


class HourTransform(TimeTransform):
    """Hours since 1970-01-01 00:00."""

    unit = "hour"


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number since 1970-01-01, proleptic Gregorian.

    Pure integer arithmetic (H. Hinnant's algorithm): no `datetime` range limits and exact
    for negative day numbers.
    """
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


_PARAMETERIZED = re.compile(r"(bucket|truncate)\[\s*(\d+)\s*\]")
_SIMPLE: dict[str, type[Transform]] = {
    "identity": IdentityTransform,
    "void": VoidTransform,
    "year": YearTransform,
    "month": MonthTransform,
    "day": DayTransform,
    "hour": HourTransform,
}


def parse_transform(text: str, source_type: PrimitiveType | None = None) -> Transform:
    """The transform a partition field names (`bucket[16]`, `day`, ...), bound to
    `source_type` when given.

    Names this version does not know give an `UnknownTransform` rather than an error: as in
    Iceberg Java, such a table stays readable, its partitions just cannot prune.
    """
    name = text.strip().lower()
    transform: Transform
    match = _PARAMETERIZED.fullmatch(name)
    if match:
        param = int(match.group(2))
        transform = (BucketTransform(param) if match.group(1) == "bucket"
                     else TruncateTransform(param))
    elif name in _SIMPLE:
        transform = _SIMPLE[name]()
    else:
        transform = UnknownTransform(text)
    return transform.bind(source_type) if source_type is not None else transform


def _unbound(transform: Transform) -> PrimitiveType:
    transform._kind()  # raises the "needs its source type" error
    raise AssertionError("unreachable")
