"""Row identity, carry-over removal, update pairing and net changes on hand-made tables."""

from __future__ import annotations

import math
import random
import struct
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_tests.helpers import F
from meltwater.planner.errors import MeltwaterError
from meltwater.stream.engine.changes import updates
from meltwater.stream.engine.changes.updates import (
    deletes_first,
    net_changes,
    pair_updates,
    remove_carryover,
    row_codes,
)
from meltwater.stream.errors import MissingIdentifierColumnError


def _other_nan() -> float:
    """A NaN with a different bit pattern than Python's float('nan')."""
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]


def changes(rows: list[tuple[str, dict]], fields: list[pa.Field] | None = None) -> pa.Table:
    fields = fields or [F("id", pa.int64(), 1), F("name", pa.string(), 2)]
    schema = pa.schema([*fields, pa.field("_change_type", pa.string())])
    return pa.Table.from_pylist([{**r, "_change_type": t} for t, r in rows], schema=schema)


def summary(table: pa.Table) -> list[tuple]:
    return [(r["_change_type"], r["id"], r.get("name")) for r in table.to_pylist()]


def test_row_codes_are_equal_exactly_for_equal_rows() -> None:
    nested = pa.struct([F("a", pa.int32(), 11), F("b", pa.float64(), 12)])
    columns = [
        pa.array([1.0, math.nan, _other_nan(), None, -0.0, math.nan]),
        pa.array([{"a": 1, "b": 2.0}, None, None, {"a": None, "b": None}, None, None],
                 nested),
        pa.array([[1, 2], None, None, [], [None], None], pa.list_(pa.int64())),
        pa.array([[("k", 1.0)], None, None, [], [], [("k", math.nan)]],
                 pa.map_(pa.string(), pa.float64())),
    ]
    codes = row_codes(columns).to_pylist()
    assert codes[1] == codes[2]  # NaN payloads differ, the rows do not
    assert len({codes[0], codes[1], codes[3], codes[4], codes[5]}) == 5
    # A null struct is not a struct of nulls.
    assert row_codes([pa.array([None, {"a": None, "b": None}], nested)]).to_pylist() == [0, 1]
    assert row_codes([], 3).to_pylist() == [0, 0, 0]


def test_row_codes_match_python_equality_on_random_rows() -> None:
    rng = random.Random(11)
    values = [(rng.choice([None, 1, 2]), rng.choice(["x", "y", None]),
               rng.choice([None, [1], [1, None], []])) for _ in range(300)]
    columns = [pa.array([v[i] for v in values]) for i in range(3)]
    codes = row_codes(columns).to_pylist()
    by_value: dict = {}
    for value, code in zip(values, codes, strict=True):
        key = (value[0], value[1], None if value[2] is None else tuple(value[2]))
        assert by_value.setdefault(key, code) == code
    assert len(set(codes)) == len(by_value)
    assert sorted(set(codes)) == list(range(len(by_value)))  # dense
    first_seen = list(dict.fromkeys(codes))
    assert first_seen == sorted(first_seen)  # numbered by first appearance: deterministic


def test_row_codes_refined_column_by_column_are_the_one_pass_codes() -> None:
    """Codes built a column at a time (what every table below 2**31 rows gets) tell the
    same rows apart as one hash pass over all columns (Arrow's group_by, the fallback above
    it): each code of one is one code of the other."""
    rng = random.Random(5)
    n = 2_000
    columns = [pa.array([rng.choice([None, 1, 2, 3]) for _ in range(n)], pa.int64()),
               pa.array([rng.choice(["a", "b", None]) for _ in range(n)]),
               pa.array([rng.choice([0.5, float("nan"), None]) for _ in range(n)])]
    keys = [key for column in columns for key in updates._key_arrays(column)]
    refined = row_codes(columns).to_pylist()
    grouped = updates._grouped_codes(keys, n).to_pylist()
    pairs = set(zip(refined, grouped, strict=True))
    assert len(pairs) == len(set(refined)) == len(set(grouped)) > 10


def test_carry_over_cancels_matching_pairs_as_a_multiset() -> None:
    table = changes([
        ("DELETE", {"id": 1, "name": "a"}),
        ("DELETE", {"id": 1, "name": "a"}),
        ("DELETE", {"id": 1, "name": "a"}),
        ("DELETE", {"id": 2, "name": "b"}),
        ("INSERT", {"id": 1, "name": "a"}),
        ("INSERT", {"id": 2, "name": "B"}),
        ("INSERT", {"id": 3, "name": None}),
        ("INSERT", {"id": 1, "name": "a"}),
    ])
    assert summary(remove_carryover(table)) == [
        ("DELETE", 1, "a"), ("DELETE", 2, "b"), ("INSERT", 2, "B"), ("INSERT", 3, None)]


def test_carry_over_with_nested_values_nan_and_nulls() -> None:
    fields = [F("id", pa.int64(), 1), F("v", pa.float64(), 2),
              F("s", pa.struct([F("x", pa.list_(pa.int32()), 11)]), 3),
              F("m", pa.map_(pa.string(), pa.string()), 4)]
    row = {"id": 1, "v": math.nan, "s": {"x": [1, None]}, "m": [("k", None)]}
    table = changes([
        ("DELETE", row),
        ("DELETE", {"id": 2, "v": None, "s": None, "m": None}),
        ("INSERT", {**row, "v": _other_nan()}),
        ("INSERT", {"id": 2, "v": None, "s": {"x": None}, "m": None}),
    ], fields)
    got = remove_carryover(table)
    assert [(r["_change_type"], r["id"], r["s"]) for r in got.to_pylist()] == [
        ("DELETE", 2, None), ("INSERT", 2, {"x": None})]


def test_carry_over_keeps_one_sided_commits_untouched() -> None:
    table = changes([("INSERT", {"id": 1, "name": "a"}), ("INSERT", {"id": 1, "name": "a"})])
    assert remove_carryover(table) is table


def test_update_pairing_puts_each_before_next_to_its_after() -> None:
    table = changes([
        ("DELETE", {"id": 1, "name": "a"}),
        ("DELETE", {"id": 2, "name": "b"}),
        ("DELETE", {"id": 3, "name": "c"}),
        ("INSERT", {"id": 4, "name": "d"}),
        ("INSERT", {"id": 2, "name": "B"}),
        ("INSERT", {"id": 1, "name": "A"}),
    ])
    assert summary(pair_updates(table, [1])) == [
        ("DELETE", 3, "c"),
        ("UPDATE_BEFORE", 1, "a"), ("UPDATE_AFTER", 1, "A"),
        ("UPDATE_BEFORE", 2, "b"), ("UPDATE_AFTER", 2, "B"),
        ("INSERT", 4, "d"),
    ]


def test_update_pairing_with_duplicate_keys_pairs_the_minimum() -> None:
    table = changes([
        ("DELETE", {"id": 1, "name": "a"}),
        ("DELETE", {"id": 1, "name": "b"}),
        ("INSERT", {"id": 1, "name": "c"}),
        ("INSERT", {"id": None, "name": "n"}),
        ("DELETE", {"id": None, "name": "m"}),
    ])
    assert summary(pair_updates(table, [1], change_type_names="delta")) == [
        ("delete", 1, "b"),
        ("update_preimage", 1, "a"), ("update_postimage", 1, "c"),
        ("update_preimage", None, "m"), ("update_postimage", None, "n"),
    ]


def test_update_pairing_by_a_key_inside_a_struct() -> None:
    fields = [F("k", pa.struct([F("id", pa.int64(), 11)]), 1), F("name", pa.string(), 2)]
    table = changes([("DELETE", {"k": {"id": 1}, "name": "a"}),
                     ("INSERT", {"k": {"id": 1}, "name": "b"})], fields)
    assert pair_updates(table, [11]).column("_change_type").to_pylist() == [
        "UPDATE_BEFORE", "UPDATE_AFTER"]
    with pytest.raises(MissingIdentifierColumnError):
        pair_updates(table, [99])


def test_deletes_first_is_stable() -> None:
    table = changes([("INSERT", {"id": 1}), ("DELETE", {"id": 2}), ("INSERT", {"id": 3}),
                     ("UPDATE_BEFORE", {"id": 4})])
    assert [r[1] for r in summary(deletes_first(table))] == [2, 4, 1, 3]


def test_unknown_change_types_are_an_error() -> None:
    with pytest.raises(MeltwaterError, match="unknown change types"):
        remove_carryover(changes([("UPSERT", {"id": 1}), ("DELETE", {"id": 1})]))


def _range(rows: list[tuple[str, int, str, int]]) -> list[pa.RecordBatch]:
    """Change batches, one per commit: (type, id, name, snapshot)."""
    by_snapshot: dict[int, list] = {}
    for change_type, id_, name, snapshot in rows:
        by_snapshot.setdefault(snapshot, []).append(
            {"id": id_, "name": name, "_change_type": change_type,
             "_commit_snapshot_id": snapshot})
    schema = pa.schema([F("id", pa.int64(), 1), F("name", pa.string(), 2),
                        pa.field("_change_type", pa.string()),
                        pa.field("_commit_snapshot_id", pa.int64())])
    return [pa.RecordBatch.from_pylist(r, schema=schema) for r in by_snapshot.values()]


def test_net_changes_are_the_multiset_difference() -> None:
    batches = _range([
        ("INSERT", 1, "a", 1), ("INSERT", 2, "b", 1), ("INSERT", 2, "b", 1),
        ("DELETE", 1, "a", 2), ("DELETE", 2, "b", 2), ("INSERT", 3, "c", 2),
        ("DELETE", 9, "z", 3), ("INSERT", 1, "a", 3), ("DELETE", 1, "a", 4),
    ])
    got = net_changes(batches)
    assert [(r["_change_type"], r["id"], r["_commit_snapshot_id"]) for r in got.to_pylist()] == [
        ("DELETE", 9, 3), ("INSERT", 2, 2), ("INSERT", 3, 2)]


def test_net_changes_with_updates_and_delta_names() -> None:
    batches = _range([
        ("UPDATE_BEFORE", 1, "a", 1), ("UPDATE_AFTER", 1, "b", 1),
        ("update_preimage", 1, "b", 2), ("update_postimage", 1, "c", 2),
        ("DELETE", 2, "x", 2),
    ])
    got = net_changes(batches, identifier_field_ids=[1], compute_updates=True,
                      change_type_names="delta")
    assert summary(got) == [("delete", 2, "x"), ("update_preimage", 1, "a"),
                            ("update_postimage", 1, "c")]
    unpaired = net_changes(batches)
    assert summary(unpaired) == [("DELETE", 1, "a"), ("DELETE", 2, "x"), ("INSERT", 1, "c")]


def test_net_changes_of_nothing() -> None:
    assert net_changes(_range([("INSERT", 1, "a", 1), ("DELETE", 1, "a", 2)])).num_rows == 0
    schema = pa.schema([pa.field("_change_type", pa.string())])
    assert net_changes([], schema=schema).num_rows == 0


# -- properties over random histories ------------------------------------------------------------

ROW = st.tuples(st.sampled_from([None, 1, 2, 3]), st.sampled_from([None, "a", "b"]),
                st.sampled_from([None, 0.5, math.nan, -1.0]))
FIELDS = [F("id", pa.int64(), 1), F("name", pa.string(), 2), F("v", pa.float64(), 3)]


def _key(row: tuple) -> tuple:
    return tuple("NaN" if isinstance(x, float) and math.isnan(x) else x for x in row)


def _as_table(rows: list[tuple[str, tuple]]) -> pa.Table:
    return changes([(t, {"id": r[0], "name": r[1], "v": r[2]}) for t, r in rows], FIELDS)


def _effect(table: pa.Table) -> tuple[Counter, Counter]:
    removed, added = Counter(), Counter()
    for r in table.to_pylist():
        side = removed if r["_change_type"] in ("DELETE", "UPDATE_BEFORE") else added
        side[_key((r["id"], r["name"], r["v"]))] += 1
    return removed, added


@st.composite
def histories(draw):
    start = draw(st.lists(ROW, max_size=8))
    state = Counter(_key(r) for r in start)
    values = {_key(r): r for r in start}
    commits = []
    for _ in range(draw(st.integers(1, 4))):
        rows = []
        for key in list(state.elements()):
            if draw(st.booleans()):
                rows.append(("DELETE", values[key]))
                if draw(st.booleans()):  # a copy-on-write rewrite puts it back unchanged
                    rows.append(("INSERT", values[key]))
        rows += [("INSERT", r) for r in draw(st.lists(ROW, max_size=4))]
        draw(st.randoms()).shuffle(rows)
        for kind, r in rows:
            values[_key(r)] = r
            state[_key(r)] += 1 if kind == "INSERT" else -1
        commits.append(rows)
    return start, commits, +state


@settings(max_examples=150, deadline=None)
@given(histories())
def test_carry_over_pairing_and_net_keep_the_replay_exact(history) -> None:
    start, commits, end = history
    state = Counter(_key(r) for r in start)
    batches = []
    for rows in commits:
        raw = _as_table(rows)
        cleaned = remove_carryover(raw)
        removed, added = _effect(cleaned)
        assert not (removed & added)  # no carry-over left
        raw_removed, raw_added = _effect(raw)
        assert raw_added - raw_removed == added - removed  # same effect as the raw rows
        assert raw_removed - raw_added == removed - added
        paired = pair_updates(cleaned, [1])
        assert _effect(paired) == (removed, added)
        types = paired.column("_change_type").to_pylist()
        for i, t in enumerate(types):
            if t == "UPDATE_BEFORE":
                assert types[i + 1] == "UPDATE_AFTER"
                assert paired.column("id")[i].as_py() == paired.column("id")[i + 1].as_py()
        assert state >= removed  # every DELETE removes a row that exists
        state = state - removed + added
        batches.extend(paired.to_batches())
    assert state == end
    begin = Counter(_key(r) for r in start)
    net_removed, net_added = _effect(net_changes(batches, schema=_as_table([]).schema))
    assert net_removed == begin - end
    assert net_added == end - begin
