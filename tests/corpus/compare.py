"""Multiset comparison of Arrow tables, the way the interop tests judge a reader.

Rows become hashable canonical tuples: NaN becomes a marker (NaN never equals itself), maps
become sorted item tuples (their entry order carries no meaning), structs and lists become
tuples. Two tables are equal when their column names match and their row multisets do.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pyarrow as pa

NAN = ("<NaN>",)


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return NAN
    if isinstance(value, dict):
        return tuple((k, _canonical(v)) for k, v in value.items())
    if isinstance(value, list):
        items = [_canonical(v) for v in value]
        if items and all(isinstance(i, tuple) and len(i) == 2 for i in value):
            return tuple(sorted(items, key=repr))  # a map: list of (key, value) pairs
        return tuple(items)
    return value


def row_multiset(table: pa.Table) -> Counter:
    return Counter(tuple(_canonical(v) for v in row.values()) for row in table.to_pylist())


def assert_same_rows(actual: pa.Table, expected: pa.Table, what: str) -> None:
    """Fail with the first differing rows when the two tables differ as multisets."""
    assert actual.column_names == expected.column_names, (
        f"{what}: columns {actual.column_names} != expected {expected.column_names}")
    got, want = row_multiset(actual), row_multiset(expected)
    if got != want:
        extra = list((got - want).elements())[:5]
        missing = list((want - got).elements())[:5]
        raise AssertionError(
            f"{what}: {actual.num_rows} rows vs {expected.num_rows} expected; "
            f"unexpected {extra}; missing {missing}")


# -- change rows against Iceberg Java's reads ------------------------------------------------

META = ["_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_sequence_number",
        "_commit_timestamp", "_row_id", "_last_updated_sequence_number"]
REMOVES = {"DELETE", "UPDATE_BEFORE"}
ADDS = {"INSERT", "UPDATE_AFTER"}


def truth_as(scenario, metadata, snapshot_id: int | None, target_schema) -> pa.Table:
    """Iceberg Java's read at a snapshot, in the columns of `target_schema` (by field id)."""
    names = [f.name for f in target_schema.fields]
    if snapshot_id is None:
        return pa.table({n: pa.array([], pa.null()) for n in names})
    truth = scenario.snapshot(snapshot_id).rows()
    source_schema = metadata.schema_for(metadata.snapshots.get(snapshot_id))
    columns = {}
    for field in target_schema.fields:
        if source_schema.has_field(field.field_id):
            name = source_schema.find_field(field.field_id).name
            columns[field.name] = truth.column(name)
        else:
            columns[field.name] = pa.nulls(truth.num_rows)
    return pa.table(columns)


def replay(start: pa.Table, changes: pa.Table, what: str) -> Counter:
    state = row_multiset(start)
    table_columns = [c for c in changes.column_names if c not in META]
    rows = changes.to_pylist()
    rows.sort(key=lambda r: (r["_change_ordinal"], r["_change_type"] not in REMOVES))
    for row in rows:
        key = tuple(_canonical(row[c]) for c in table_columns)
        kind = row["_change_type"]
        if kind in REMOVES:
            assert state[key] > 0, f"{what}: {kind} of a row that did not exist: {row}"
            state[key] -= 1
            if not state[key]:
                del state[key]
        else:
            assert kind in ADDS, kind
            state[key] += 1
    return state


def assert_replays(scenario, metadata, start_id: int | None, end_id: int,
                   changes: pa.Table) -> None:
    """Replaying `changes` of (start, end] on what Iceberg Java read at `start` gives what
    it read at `end`, every removal removing a row that existed."""
    end_schema = metadata.schema_for(metadata.snapshot(end_id))
    what = f"{scenario.name} ({start_id}, {end_id}]"
    replayed = replay(truth_as(scenario, metadata, start_id, end_schema), changes, what)
    expected = row_multiset(truth_as(scenario, metadata, end_id, end_schema))
    if replayed != expected:
        extra = list((replayed - expected).elements())[:3]
        missing = list((expected - replayed).elements())[:3]
        raise AssertionError(f"{what}: replay differs; extra {extra}; missing {missing}")


def live_ranges(scenario, metadata):
    """(parent, snapshot) for every live snapshot whose parent is live too (or none): the
    consecutive change ranges a table's retained history has."""
    for snap in scenario.snapshots:
        if snap.expired or snap.snapshot_id not in metadata.snapshots:
            continue
        parent = snap.parent_id
        if parent is None or parent in metadata.snapshots:
            yield parent, snap.snapshot_id
