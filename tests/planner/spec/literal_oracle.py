"""Internal values turned back into Python objects and text: the inverse of
`meltwater.planner.spec.literals.to_internal`, which the literal tests round-trip through.
The product never needs this direction (values leave the planner as Arrow data)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from meltwater.planner.spec.literals import EPOCH, EPOCH_DATE, EPOCH_UTC, NANOS_PER_MICRO
from meltwater.planner.spec.types import PrimitiveType


def to_python(value: Any, type_: PrimitiveType) -> Any:
    """Turn an internal value into the natural Python object for display and Arrow.

    date -> `datetime.date`, time -> `datetime.time`, timestamp -> naive `datetime`,
    timestamptz -> `datetime` in UTC. Nanosecond timestamps become `datetime` floored to the
    microsecond, the finest `datetime` can hold (use the internal int for full precision, or
    `to_string` for display). Everything else is already natural and returned as is.
    """
    if value is None:
        return None
    kind = type_.kind
    if kind == "date":
        return EPOCH_DATE + dt.timedelta(days=value)
    if kind == "time":
        return (EPOCH + dt.timedelta(microseconds=value)).time()
    if kind in ("timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"):
        micros = value // NANOS_PER_MICRO if kind.endswith("_ns") else value
        base = EPOCH_UTC if kind.startswith("timestamptz") else EPOCH
        return base + dt.timedelta(microseconds=micros)
    return value


def to_string(value: Any, type_: PrimitiveType) -> str:
    """A readable, exact rendering (ISO dates and times, nanoseconds kept, hex for bytes)."""
    if value is None:
        return "null"
    kind = type_.kind
    if kind in ("date", "time"):
        moment: dt.date | dt.time = to_python(value, type_)
        return moment.isoformat()
    if kind in ("timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"):
        nanos = value if kind.endswith("_ns") else value * NANOS_PER_MICRO
        seconds, frac = divmod(nanos, 1_000_000_000)
        text = (EPOCH + dt.timedelta(seconds=seconds)).isoformat()
        if frac:
            digits = 9 if kind.endswith("_ns") else 6
            scale = 10 ** (9 - digits)
            text += "." + str(frac // scale).rjust(digits, "0")
        return text + ("+00:00" if kind.startswith("timestamptz") else "")
    if kind in ("fixed", "binary"):
        data: bytes = value
        return data.hex()
    return str(value)
