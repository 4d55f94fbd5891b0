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
