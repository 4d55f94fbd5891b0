"""The spec's single-value binary serialization (Appendix D), both directions.

Manifests store column bounds (`lower_bounds`, `upper_bounds`) and partition summaries in
this form; the planner decodes them once, into the internal representation of
`meltwater.planner.spec.types`, so evaluators compare plain Python values. Encoding exists for
tests and for writing summaries.

| type                  | bytes                                                        |
| --------------------- | ------------------------------------------------------------ |
| boolean               | one byte, 0x00 false, anything else true                     |
| int, date             | 4-byte little-endian two's complement                        |
| long, time, timestamp*| 8-byte little-endian two's complement (micros or nanos)      |
| float / double        | 4 / 8-byte little-endian IEEE 754                            |
| decimal(P, S)         | unscaled value, big-endian two's complement, minimal bytes   |
| string                | UTF-8                                                        |
| uuid                  | 16 bytes, big-endian (most significant byte first)           |
| fixed[L] / binary     | the bytes                                                    |

Decoding reads by length where type promotion allows older, narrower bounds: a column
promoted from int to long may carry 4-byte bounds, one promoted from float to double
4-byte ones.
"""

from __future__ import annotations

import struct
import uuid
from decimal import Decimal
from typing import Any

from meltwater.planner.spec.literals import rescale_decimal
from meltwater.planner.spec.types import PrimitiveType

_INT = struct.Struct("<i")
_LONG = struct.Struct("<q")
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")
_LONG_KINDS = frozenset({"time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"})


def from_bytes(type_: PrimitiveType, data: bytes) -> Any:
    """Decode one serialized value of `type_` into its internal representation.

    Raises ValueError for a length the type cannot have and for types without a
    single-value form (variant, geometry, geography, unknown): callers treat those bounds
    as absent.
    """
    kind = type_.kind
    data = bytes(data)
    size = len(data)
    if kind == "boolean":
        _expect(type_, size, 1)
        return data[0] != 0
    if kind in ("int", "date"):
        _expect(type_, size, 4)
        return _INT.unpack(data)[0]
    if kind == "long":
        if size == 4:  # written before int -> long promotion
            return _INT.unpack(data)[0]
        _expect(type_, size, 8)
        return _LONG.unpack(data)[0]
    if kind in _LONG_KINDS:
        _expect(type_, size, 8)
        return _LONG.unpack(data)[0]
    if kind == "float":
        _expect(type_, size, 4)
        return _FLOAT.unpack(data)[0]
    if kind == "double":
        if size == 4:  # written before float -> double promotion
            return _FLOAT.unpack(data)[0]
        _expect(type_, size, 8)
        return _DOUBLE.unpack(data)[0]
    if kind == "decimal":
        if size == 0:
            raise ValueError(f"an empty byte string is not a {type_} value")
        return decimal_from_unscaled(int.from_bytes(data, "big", signed=True), type_.scale)
    if kind == "string":
        return data.decode("utf-8")
    if kind == "uuid":
        _expect(type_, size, 16)
        return uuid.UUID(bytes=data)
    if kind == "fixed":
        _expect(type_, size, type_.length)
        return data
    if kind == "binary":
        return data
    raise ValueError(f"type {type_} has no single-value binary form")


def to_bytes(type_: PrimitiveType, value: Any) -> bytes:
    """Encode an internal value of `type_` in the single-value binary form."""
    kind = type_.kind
    if kind == "boolean":
        return b"\x01" if value else b"\x00"
    if kind in ("int", "date"):
        return _INT.pack(value)
    if kind == "long" or kind in _LONG_KINDS:
        return _LONG.pack(value)
    if kind == "float":
        return _FLOAT.pack(value)
    if kind == "double":
        return _DOUBLE.pack(value)
    if kind == "decimal":
        return unscaled_to_bytes(decimal_unscaled(value, type_.scale))
    if kind == "string":
        text: str = value
        return text.encode("utf-8")
    if kind == "uuid":
        uuid_value: uuid.UUID = value
        return uuid_value.bytes
    if kind in ("fixed", "binary"):
        return bytes(value)
    raise ValueError(f"type {type_} has no single-value binary form")


def decimal_unscaled(value: Decimal, scale: int) -> int:
    """The unscaled integer of `value` at `scale` (ValueError if it has more digits)."""
    sign, digits, _ = rescale_decimal(value, scale).as_tuple()
    unscaled = int("".join(map(str, digits)) or "0")
    return -unscaled if sign else unscaled


def decimal_from_unscaled(unscaled: int, scale: int) -> Decimal:
    """The Decimal `unscaled * 10**-scale`, built exactly (no context rounding)."""
    return Decimal((1 if unscaled < 0 else 0, tuple(int(c) for c in str(abs(unscaled))), -scale))


def unscaled_to_bytes(unscaled: int) -> bytes:
    """Minimal big-endian two's complement bytes, as Java's `BigInteger.toByteArray`.

    The bucket hash of a decimal is over exactly these bytes, so "minimal" must match
    Java's: one sign bit always fits, hence zero is one byte and 128 is two.
    """
    magnitude = unscaled if unscaled >= 0 else ~unscaled
    return unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


def _expect(type_: PrimitiveType, size: int, expected: int) -> None:
    if size != expected:
        raise ValueError(f"a {type_} value has {expected} bytes, not {size}")
