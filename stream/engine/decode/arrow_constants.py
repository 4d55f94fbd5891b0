"""Columns that repeat one value, or count up from one, built without visiting every row.

Every change row carries its commit's ordinal, snapshot id, sequence number and timestamp
and its change type: five columns of one value per batch. `pa.repeat` appends the value
row by row, a noticeable share of reading an append-only commit. A fixed-width value is
laid out once and its bytes repeated; any other value is a zero-copy slice of one long
column built per value and kept.
"""

from __future__ import annotations

import threading

import pyarrow as pa

_KEPT_VALUES = 64  # distinct non-fixed-width values kept: change types and a few defaults
_kept: dict[tuple[pa.DataType, object], pa.Array] = {}
_lock = threading.Lock()


def constant_array(value: pa.Scalar, length: int) -> pa.Array:
    """`length` copies of `value`, equal to `pa.repeat(value, length)`."""
    type_ = value.type
    if not value.is_valid:
        return pa.nulls(length, type_)
    width = _byte_width(type_)
    if width is not None:
        one = pa.repeat(value, 1)  # pyarrow lays the value out, in its own byte order
        data = one.buffers()[1].to_pybytes()[:width]
        return pa.Array.from_buffers(type_, length, [None, pa.py_buffer(data * length)])
    try:
        key = (type_, value.as_py())
        hash(key)
    except TypeError:  # nested values: rare, and not worth keeping
        return pa.repeat(value, length)
    with _lock:
        kept = _kept.get(key)
        if kept is None or len(kept) < length:
            if len(_kept) >= _KEPT_VALUES:
                _kept.clear()
            kept = pa.repeat(value, max(length, 2 * len(kept) if kept is not None else 0))
            _kept[key] = kept
    return kept.slice(0, length)


def _byte_width(type_: pa.DataType) -> int | None:
    """Bytes per value of a primitive type stored as one fixed-width buffer, else None."""
    if not (pa.types.is_integer(type_) or pa.types.is_floating(type_)
            or pa.types.is_timestamp(type_) or pa.types.is_date(type_)
            or pa.types.is_time(type_) or pa.types.is_duration(type_)
            or pa.types.is_decimal(type_) or pa.types.is_fixed_size_binary(type_)):
        return None
    bits = type_.bit_width
    return bits // 8 if bits % 8 == 0 else None


def int64_range(start: int, length: int) -> pa.Array:
    """start, start + 1, ..., start + length - 1 as int64, computed by Arrow's kernels
    (`pa.array(range(...))` converts every Python int: 0.18 s of a DV commit's changes on a
    20M-row v3 table, filling row lineage ids)."""
    import pyarrow.compute as pc

    if length == 0:
        return pa.array([], pa.int64())
    ones = constant_array(pa.scalar(1, pa.int64()), length)
    return pc.add(pc.cumulative_sum(ones), pa.scalar(start - 1, pa.int64()))
