"""How a value is written as JSON, in one place for every JSON writer: the row-by-row
writer and the column renderer of `--format jsonl` (`writers`, `text`) and the
change events of `change_events`, so that the three agree value for value.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any


def json_default(value: Any) -> Any:
    """JSON for the values Arrow hands back: ISO times, exact decimals, base64 bytes."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def json_value(value: Any) -> Any:
    """A value JSON can hold: NaN and the infinities, which JSON has no literal for (bare
    `NaN`/`Infinity` are rejected by JSON parsers), become the strings "NaN", "Infinity"
    and "-Infinity" at any depth; Arrow maps (lists of key/value tuples) become objects."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):  # a struct, or a map (`to_pylist(maps_as_pydicts=...)`)
        return {k if isinstance(k, str) else str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and isinstance(value[0], tuple):
            return {str(k): json_value(v) for k, v in value}  # an Arrow map
        return [json_value(v) for v in value]
    return value


def json_safe(row: dict[str, Any]) -> dict[str, Any]:
    """A row as `json_value` writes it (see there)."""
    return {key: json_value(value) for key, value in row.items()}
