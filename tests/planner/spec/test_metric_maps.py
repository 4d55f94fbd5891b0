"""Column metrics decoded on first lookup behave as the dicts they replace."""

from __future__ import annotations

import pickle
import struct

from meltwater.planner.spec.metric_maps import MetricMap


def _pairs(values: dict[int, bytes]) -> list[dict]:
    return [{"key": k, "value": v} for k, v in values.items()]


def _decode_int(field_id: int, raw: bytes) -> int | None:
    if field_id == 9:
        return None  # a type without a single-value form
    if len(raw) != 4:
        raise ValueError("an int bound has 4 bytes")  # as conversions.from_bytes does
    return struct.unpack("<i", raw)[0]


def test_bounds_decode_per_field_and_compare_as_dicts():
    calls = []

    def decode(field_id, raw):
        calls.append(field_id)
        return _decode_int(field_id, raw)

    bounds = MetricMap(_pairs({1: struct.pack("<i", 5), 2: b"\x01", 9: b"x"}), decode)
    assert bounds.get(1) == 5 and bounds[1] == 5 and 1 in bounds
    assert calls == [1], "one lookup decodes one field, once"
    assert bounds.get(2) is None and 2 not in bounds, "an undecodable bound is absent"
    assert bounds.get(9, "none") == "none" and bounds.get(3) is None
    expected = {1: 5}
    assert bounds == expected and expected == bounds and len(bounds) == 1
    assert sorted(calls) == [1, 2, 9]


def test_counts_and_pickling():
    counts = MetricMap(_pairs({1: 10, 2: 0}))
    assert counts.get(2) == 0 and counts[1] == 10 and counts == {1: 10, 2: 0}
    again = pickle.loads(pickle.dumps(counts))
    assert type(again) is dict and again == {1: 10, 2: 0}
    bounds = MetricMap(_pairs({1: struct.pack("<i", -3)}), _decode_int)
    assert pickle.loads(pickle.dumps(bounds)) == {1: -3}
