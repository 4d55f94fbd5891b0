"""A batch of change rows -> its net effect per key: the rows to upsert and the keys to delete.

Events are put in commit order: by `_change_ordinal`, and within one commit the rows that
left (DELETE, UPDATE_BEFORE) before the rows that arrived (INSERT, UPDATE_AFTER), input
order breaking ties. A key's last event decides: a key that last left ends absent, one that
last arrived ends present with that row. Everything runs in `pyarrow.compute`: one stable
sort by commit order, one stable sort by key, and a comparison of neighbours.

Worked example, key `id`, rows (ordinal, type, id, v)::

    (0, INSERT, 1, a) (0, INSERT, 2, b) (1, UPDATE_AFTER, 1, c) (1, UPDATE_BEFORE, 1, a)
    (2, DELETE, 2, b)

sorted by key then commit order: id 1: INSERT a, UPDATE_BEFORE a, UPDATE_AFTER c -> present
(1, c); id 2: INSERT b, DELETE b -> absent 2.

A mirror by key needs keys to be unique among live rows. With unique keys a key's events
alternate between leaving and arriving; two arrivals in a row mean the table held two rows
with that key at once, and the batch is refused (`DuplicateKeyError`) rather than mirrored as
one of them. Two departures in a row are harmless (the key ends absent either way).

Memory: the batch is held whole plus a few index arrays of its length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.sinks.errors import DuplicateKeyError, InvalidChangesError, NullKeyError
from meltwater.stream.engine.changes.change_schema import (
    CANONICAL_NAMES,
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)

ARRIVING = sorted(n for n, c in CANONICAL_NAMES.items() if c in (INSERT, UPDATE_AFTER))
LEAVING = sorted(n for n, c in CANONICAL_NAMES.items() if c in (DELETE, UPDATE_BEFORE))
_ARRIVES = "__meltwater_arrives"


@dataclass(frozen=True)
class NetEffect:
    """What a batch leaves behind: `present` rows (all input columns) by key, `absent` keys.

    The commit the batch reaches is not part of it: `meltwater.sinks.source_table` says
    that for every sink (`last_commit`)."""

    present: pa.Table
    absent: pa.Table


def net_effect(changes: pa.Table, keys: Sequence[str], what: str = "batch") -> NetEffect:
    """The net effect per key of a batch of change rows (see the module doc)."""
    _require_columns(changes, [CHANGE_TYPE, CHANGE_ORDINAL, *keys], what)
    _refuse_null_keys(changes, keys, what)
    arrives = _arrives(changes, what)
    table = changes.append_column(_ARRIVES, arrives)
    data_columns = list(changes.column_names)
    if table.num_rows == 0:
        empty = changes.slice(0, 0)
        return NetEffect(empty, empty.select(list(keys)))

    ordinals = pc.cast(table.column(CHANGE_ORDINAL), pa.int64())
    table = table.set_column(table.column_names.index(CHANGE_ORDINAL), CHANGE_ORDINAL, ordinals)
    in_commit_order = table.take(pc.sort_indices(
        table, sort_keys=[(CHANGE_ORDINAL, "ascending"), (_ARRIVES, "ascending")]))
    # A stable sort by key keeps commit order within each key's run of events.
    by_key = in_commit_order.take(pc.sort_indices(
        in_commit_order, sort_keys=[(k, "ascending") for k in keys]))
    n = by_key.num_rows
    same_as_previous = _same_key_as_previous(by_key, keys)
    arrive = by_key.column(_ARRIVES).combine_chunks()
    twice = pc.and_(same_as_previous, pc.and_(arrive.slice(1), arrive.slice(0, n - 1)))
    if pc.any(twice).as_py():
        _raise_duplicate(by_key, keys, pc.indices_nonzero(twice)[0].as_py() + 1, what)
    # The last event of each key's run: the next row has another key, or there is none.
    last = pa.concat_arrays([pc.invert(same_as_previous), pa.array([True])])
    finals = by_key.filter(last)
    finals_arrive = finals.column(_ARRIVES)
    present = finals.filter(finals_arrive).select(data_columns)
    absent = finals.filter(pc.invert(finals_arrive)).select(list(keys))
    return NetEffect(present, absent)


def _require_columns(changes: pa.Table, needed: Sequence[str], what: str) -> None:
    missing = [c for c in needed if c not in changes.column_names]
    if missing:
        raise InvalidChangesError(f"{what} lacks column(s) {', '.join(missing)} "
                             f"(columns: {', '.join(changes.column_names)})")


def _refuse_null_keys(changes: pa.Table, keys: Sequence[str], what: str) -> None:
    for key in keys:
        nulls = changes.column(key).null_count
        if nulls:
            raise NullKeyError(f"{what} has {nulls} change row(s) with a null in key column "
                               f"{key!r}; a mirror by key needs keys that are never null")


def _arrives(changes: pa.Table, what: str) -> pa.ChunkedArray:
    types = pc.cast(changes.column(CHANGE_TYPE), pa.string())
    arriving = pc.is_in(types, value_set=pa.array(ARRIVING))
    leaving = pc.is_in(types, value_set=pa.array(LEAVING))
    unknown = pc.invert(pc.or_(arriving, leaving))
    if pc.any(unknown).as_py():
        bad = pc.unique(pc.filter(types, unknown)).to_pylist()
        raise InvalidChangesError(f"{what} has unknown change type(s) {bad[:5]} in {CHANGE_TYPE} "
                             f"(expected {', '.join(ARRIVING + LEAVING)})")
    return arriving


def _same_key_as_previous(by_key: pa.Table, keys: Sequence[str]) -> pa.Array:
    """For rows 1..n-1: whether the row has the same key as the one before it."""
    n = by_key.num_rows
    same = pa.repeat(True, n - 1)
    for key in keys:
        column = by_key.column(key).combine_chunks()
        equal = pc.equal(column.slice(1), column.slice(0, n - 1))
        same = pc.and_(same, equal)
    return same


def _raise_duplicate(by_key: pa.Table, keys: Sequence[str], row: int, what: str) -> None:
    key = {k: by_key.column(k)[row].as_py() for k in keys}
    snapshot = (by_key.column(COMMIT_SNAPSHOT_ID)[row].as_py()
                if COMMIT_SNAPSHOT_ID in by_key.column_names else "?")
    raise DuplicateKeyError(f"{what}: key {key} arrives twice without leaving in between (second "
                       f"time in snapshot {snapshot}): the table holds two live rows with "
                       "that key; choose key columns that are unique")
