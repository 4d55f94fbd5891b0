"""Change rows of a commit or a range -> what users mean by a change.

Raw reconstruction (`meltwater.stream.engine.changes.reconstruction`) says which rows left and which
arrived; three steps turn that into the changes people expect, all vectorized with
`pyarrow.compute`:

- **Carry-over removal** (`remove_carryover`): a copy-on-write commit rewrites every row of
  a file it touches, so an UPDATE of one row DELETEs and re-INSERTs all the others
  unchanged. Those pairs are not changes. Within one commit, k DELETEs and m INSERTs of the
  same full row cancel min(k, m) of each (a multiset, so duplicate rows stay right).
- **Update pairing** (`pair_updates`): with identifier columns, a DELETE and an INSERT of
  the same key in one commit are one UPDATE, emitted as an adjacent UPDATE_BEFORE then
  UPDATE_AFTER.
- **Net changes** (`net_changes`): over a whole range, each distinct row's net effect, the
  multiset difference between the table at the end and at the start.

All three need *row identity*: which rows are equal. Hashing is not exact and Arrow's
`group_by` cannot key on nested types, so `row_codes` gives each row a dense int64 code,
equal codes exactly for equal rows. Each primitive column is coded as the index of its
value among the column's distinct values (null gets its own index; every NaN is first made
the one canonical NaN, because Arrow hashes NaNs by their bits), structs are coded through
their children plus their own validity, and lists and maps, which Arrow cannot hash, fall
back to a canonical text encoding built in Python, row by row, the only per-row loop here.
Column codes are combined pairwise (`code * cardinality + next`) and re-densified, so no
code ever overflows and no two distinct rows ever collide.

Worked example (`_change_type`, row): a copy-on-write UPDATE of id 2 in a file of ids 1..3
arrives as DELETE 1, DELETE 2, DELETE 3, INSERT 1, INSERT 2', INSERT 3. Carry-over removal
leaves DELETE 2, INSERT 2'; with `id` as identifier, pairing gives UPDATE_BEFORE 2,
UPDATE_AFTER 2'.

Memory: these steps compare all change rows of a commit (of a range, for net changes), so
they hold that many rows at once; everything else in the engine streams batch by batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.errors import MeltwaterError
from meltwater.stream.engine.changes.change_schema import (
    CANONICAL_NAMES,
    CHANGE_TYPE,
    CHANGE_TYPE_NAMES,
    DELETE,
    INSERT,
    LINEAGE_COLUMNS,
    METADATA_COLUMNS,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    ChangeTypeNames,
    change_mode,
)
from meltwater.stream.engine.decode.arrow_constants import int64_range
from meltwater.stream.engine.decode.arrow_schema import field_id
from meltwater.stream.errors import MissingIdentifierColumnError

_ARRIVING = [n for n, c in CANONICAL_NAMES.items() if c in (INSERT, UPDATE_AFTER)]
_LEAVING = [n for n, c in CANONICAL_NAMES.items() if c in (DELETE, UPDATE_BEFORE)]


# -- row identity ---------------------------------------------------------------------------


def row_codes(columns: Sequence[pa.Array | pa.ChunkedArray], length: int | None = None
              ) -> pa.Array:
    """Dense int64 codes of the rows of `columns`: equal rows get equal codes, distinct rows
    distinct ones, with null equal to null and NaN to NaN.

    `length` is the row count, needed only when `columns` is empty (every row then has
    code 0). Codes are in [0, number of distinct rows).
    """
    n = length if length is not None else (len(columns[0]) if columns else 0)
    keys = [key for column in columns for key in _key_arrays(_whole(column))]
    if not keys or n == 0:
        return pa.repeat(pa.scalar(0, pa.int64()), n)
    # Codes are numbered in order of first appearance (dictionary encoding's), so output
    # that sorts by code (update pairs) is the same on every run. Each further column
    # refines the codes so far: (code, the column's code) pairs made one int64 and encoded
    # again, dense below n, so the pair never exceeds n * n (no overflow below 2**31 rows).
    # Arrow's group_by would hash all columns at once, but loads Acero and the dataset
    # module (5 ms of every small command's start).
    if n >= _MAX_REFINED_ROWS:
        return _grouped_codes(keys, n)
    codes, _ = _dense(keys[0])
    for key in keys[1:]:
        column, width = _dense(key)
        codes, _ = _dense(pc.add(pc.multiply(codes, pa.scalar(width, pa.int64())), column))
    return codes


_MAX_REFINED_ROWS = 2**31


def _dense(key: pa.Array) -> tuple[pa.Array, int]:
    """Dense int64 codes of one array's values (null one of them) by first appearance, and
    how many there are."""
    encoded = pc.dictionary_encode(key, null_encoding="encode")
    return encoded.indices.cast(pa.int64()), len(encoded.dictionary)


def _grouped_codes(keys: list[pa.Array], n: int) -> pa.Array:
    """`row_codes` by one hash pass over every key column (each group's rows, then each
    row's group): for tables too long for pairs of codes to fit an int64."""
    names = [f"k{i}" for i in range(len(keys))]
    table = pa.table([*keys, _arange(n)], names=[*names, "row"])
    groups = table.group_by(names, use_threads=False).aggregate([("row", "list")])
    lists = groups.column("row_list").combine_chunks()
    return pc.scatter(pc.list_parent_indices(lists).cast(pa.int64()), pc.list_flatten(lists),
                      max_index=n - 1)


def _whole(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def _key_arrays(column: pa.Array) -> list[pa.Array]:
    """Primitive arrays that together identify a column's values, for Arrow's hashing."""
    type_ = column.type
    if pa.types.is_null(type_):
        return []  # every value is null: nothing tells rows apart
    if pa.types.is_floating(type_):
        if column.null_count < len(column):
            column = pc.if_else(pc.is_nan(column), pa.scalar(float("nan"), type_), column)
        return [column]
    if pa.types.is_struct(type_):
        # A null struct's children may hold anything: flatten() nulls them, and the struct's
        # own validity tells a null struct from a struct of nulls.
        keys = [column.is_valid()] if column.null_count else []
        for child in column.flatten():
            keys.extend(_key_arrays(_whole(child)))
        return keys
    if pa.types.is_nested(type_):  # list, large list, fixed-size list, map: no Arrow hash
        return [pa.array([None if v is None else repr(_canonical(v))
                          for v in column.to_pylist()], pa.string())]
    return [column]


def _canonical(value: Any) -> Any:
    """A Python value with NaN made canonical (repr of any NaN is 'nan' already; -0.0 stays
    distinct from 0.0, as in the primitive columns, where Arrow hashes bits)."""
    if isinstance(value, dict):
        return tuple((k, _canonical(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    return value


def column_by_id(table: pa.Table | pa.RecordBatch, fid: int) -> pa.Array | None:
    """The column with an Iceberg field id, top-level or inside structs, or None."""
    def visit(fields: list[pa.Field], arrays: list[Any]) -> pa.Array | None:
        for field, array in zip(fields, arrays, strict=True):
            if field_id(field) == fid:
                return _whole(array)
            if pa.types.is_struct(field.type):
                whole = _whole(array)
                found = visit(list(field.type), whole.flatten())
                if found is not None:
                    return found
        return None
    return visit(list(table.schema), list(table.columns))


def data_columns(table: pa.Table | pa.RecordBatch) -> list[str]:
    """The table columns of change rows: every column but the change metadata."""
    return [n for n in table.schema.names if n not in METADATA_COLUMNS]


def content_columns(table: pa.Table | pa.RecordBatch) -> list[str]:
    """The columns that make a row's content: table columns without v3 row lineage.

    Carry-over removal and net changes compare content: a writer that re-assigns row ids
    when it copies rows must not turn unchanged rows into changes.
    """
    return [n for n in data_columns(table) if n not in LINEAGE_COLUMNS]


# -- small vectorized helpers ----------------------------------------------------------------


def _arange(n: int) -> pa.Array:
    return int64_range(0, n)


def _rank_within(groups: pa.Array) -> pa.Array:
    """For each row, how many earlier rows share its group (0 for the first)."""
    n = len(groups)
    if n == 0:
        return pa.array([], pa.int64())
    order = pc.sort_indices(groups).cast(pa.int64())  # stable: ties keep row order
    ordered = pc.take(groups, order)
    index = _arange(n)
    starts = pc.not_equal(ordered.slice(1), ordered.slice(0, n - 1))
    starts = pa.concat_arrays([pa.array([True]), starts])
    first = pc.cumulative_max(pc.if_else(starts, index, pa.scalar(0, pa.int64())))
    ranks = pc.subtract(index, first)
    return pc.scatter(ranks, order, max_index=n - 1)


def _counts_by_code(codes: pa.Array, flag: pa.Array, cardinality: int
                    ) -> tuple[pa.Array, pa.Array]:
    """Per dense code: how many rows have `flag` set and how many do not."""
    def counted(rows: pa.Array) -> pa.Array:
        """How many of `rows`' codes each code has (value counts: no Acero to load)."""
        counts = pc.value_counts(rows)
        if len(counts) == 0:
            return pa.repeat(pa.scalar(0, pa.int64()), cardinality)
        spread = pc.scatter(counts.field("counts").cast(pa.int64()), counts.field("values"),
                            max_index=cardinality - 1)
        return pc.fill_null(spread, 0)

    return counted(codes.filter(flag)), counted(codes.filter(pc.invert(flag)))


def _arriving(change_types: pa.Array | pa.ChunkedArray) -> pa.Array:
    """True for INSERT / UPDATE_AFTER rows, False for DELETE / UPDATE_BEFORE (either
    vocabulary); any other value is an error, not a silent guess."""
    types = _whole(change_types)
    arriving = pc.is_in(types, value_set=pa.array(_ARRIVING))
    leaving = pc.is_in(types, value_set=pa.array(_LEAVING))
    if not pc.all(pc.or_(arriving, leaving)).as_py():
        unknown = pc.unique(types.filter(pc.invert(pc.or_(arriving, leaving)))).to_pylist()
        raise MeltwaterError(f"unknown change types {unknown} in {CHANGE_TYPE}")
    return arriving


def _with_change_types(table: pa.Table, types: pa.Array) -> pa.Table:
    index = table.schema.get_field_index(CHANGE_TYPE)
    return table.set_column(index, table.schema.field(index), types)


def _names(vocabulary: ChangeTypeNames | str) -> dict[str, str]:
    return CHANGE_TYPE_NAMES[change_mode(ChangeTypeNames, vocabulary, "change type names")]


# -- the three steps ----------------------------------------------------------------------------


def remove_carryover(table: pa.Table) -> pa.Table:
    """One commit's change rows without the rows DELETEd and re-INSERTed unchanged.

    k DELETEs and m INSERTs of the same row (all table columns equal) cancel min(k, m) of
    each, the earliest ones; every other row is kept in its order.
    """
    n = table.num_rows
    if n == 0:
        return table
    arriving = _arriving(table.column(CHANGE_TYPE))
    some = pc.sum(arriving.cast(pa.int64())).as_py() or 0
    if some in (0, n):  # only INSERTs or only DELETEs: nothing can cancel
        return table
    codes = row_codes([table.column(c) for c in content_columns(table)], n)
    cardinality = pc.max(codes).as_py() + 1
    groups = pc.add(pc.multiply(codes, pa.scalar(2, pa.int64())), arriving.cast(pa.int64()))
    rank = _rank_within(groups)
    inserts, deletes = _counts_by_code(codes, arriving, cardinality)
    opposite = pc.if_else(arriving, pc.take(deletes, codes), pc.take(inserts, codes))
    return table.filter(pc.greater_equal(rank, opposite))


def pair_updates(table: pa.Table, identifier_field_ids: Sequence[int], *,
                 change_type_names: ChangeTypeNames | str = ChangeTypeNames.ICEBERG) -> pa.Table:
    """Change rows with each DELETE + INSERT of one key turned into an update pair, ordered
    DELETEs, then pairs (UPDATE_BEFORE immediately followed by its UPDATE_AFTER), then
    INSERTs.

    With duplicate keys, the r-th DELETE of a key pairs with its r-th INSERT; extra rows of
    either kind stay DELETEs or INSERTs. Rows already labelled UPDATE_* are paired anew.
    """
    names = _names(change_type_names)
    n = table.num_rows
    if n == 0:
        return table
    keys = []
    for fid in identifier_field_ids:
        column = column_by_id(table, fid)
        if column is None:
            raise MissingIdentifierColumnError(
                f"identifier field id {fid} is not among the selected columns: select it "
                "or turn update pairing off")
        keys.append(column)
    arriving = _arriving(table.column(CHANGE_TYPE))
    codes = row_codes(keys, n)
    cardinality = pc.max(codes).as_py() + 1
    rank = _rank_within(pc.add(pc.multiply(codes, pa.scalar(2, pa.int64())),
                               arriving.cast(pa.int64())))
    inserts, deletes = _counts_by_code(codes, arriving, cardinality)
    opposite = pc.if_else(arriving, pc.take(deletes, codes), pc.take(inserts, codes))
    paired = pc.less(rank, opposite)
    types = pc.if_else(
        paired,
        pc.if_else(arriving, names[UPDATE_AFTER], names[UPDATE_BEFORE]),
        pc.if_else(arriving, names[INSERT], names[DELETE]))
    table = _with_change_types(table, types)
    # Sort: section (0 DELETE, 1 pair, 2 INSERT), then for pairs key and rank with the
    # before first; then row order.
    section = pc.if_else(paired, 1, pc.if_else(arriving, 2, 0)).cast(pa.int64())
    zero = pa.scalar(0, pa.int64())
    sort = pa.table({
        "section": section,
        "key": pc.if_else(paired, codes, zero),
        "rank": pc.if_else(paired, rank, zero),
        "after": pc.if_else(paired, arriving.cast(pa.int64()), zero),
        "row": _arange(n),
    })
    order = pc.sort_indices(sort, sort_keys=[(c, "ascending") for c in sort.column_names])
    return table.take(order)


def deletes_first(table: pa.Table) -> pa.Table:
    """Change rows with DELETE / UPDATE_BEFORE rows before INSERT / UPDATE_AFTER rows,
    otherwise in their order: a consumer applying rows in order never deletes a row it
    has just inserted."""
    if table.num_rows == 0:
        return table
    arriving = _arriving(table.column(CHANGE_TYPE)).cast(pa.int64())
    sort = pa.table({"arriving": arriving, "row": _arange(table.num_rows)})
    order = pc.sort_indices(sort, sort_keys=[("arriving", "ascending"), ("row", "ascending")])
    return table.take(order)


def net_changes(batches: Iterable[pa.RecordBatch], *,
                identifier_field_ids: Sequence[int] | None = None,
                compute_updates: bool = False,
                change_type_names: ChangeTypeNames | str = ChangeTypeNames.ICEBERG,
                schema: pa.Schema | None = None) -> pa.Table:
    """The net effect of a range's change rows (given in commit order).

    Each distinct row (all table columns) counts +1 per INSERT / UPDATE_AFTER and -1 per
    DELETE / UPDATE_BEFORE; a positive total is that many INSERTs, a negative one that many
    DELETEs, zero nothing (a row inserted and deleted inside the range disappears). That
    is exactly the multiset difference between the table at the end and at the start,
    since every DELETE removes a row that existed. Each net row keeps the metadata columns
    of its row's last change. With `compute_updates` and identifier columns, a net DELETE
    and a net INSERT of one key become an update pair. Rows come DELETEs first, then pairs,
    then INSERTs, each in the order of their last change.

    Holds all change rows of the range in memory (the caller's range bounds it).
    """
    names = _names(change_type_names)
    collected = list(batches)
    if not collected:
        if schema is None:
            raise MeltwaterError("net_changes needs a schema when there are no batches")
        return schema.empty_table()
    table = pa.Table.from_batches(collected, schema=schema or collected[0].schema)
    n = table.num_rows
    if n == 0:
        return table
    sign = pc.if_else(_arriving(table.column(CHANGE_TYPE)), 1, -1).cast(pa.int64())
    codes = row_codes([table.column(c) for c in content_columns(table)], n)
    totals = pa.table({"code": codes, "sign": sign, "row": _arange(n)}).group_by(
        "code", use_threads=False).aggregate([("sign", "sum"), ("row", "max")])
    net = totals.column("sign_sum").combine_chunks()
    last = totals.column("row_max").combine_chunks()
    changed = pc.not_equal(net, pa.scalar(0, pa.int64()))
    net, last = net.filter(changed), last.filter(changed)
    if len(net) == 0:
        return table.schema.empty_table()
    # Repeat each group's last row |net| times: mark where each group's run starts in the
    # output, then fill forward.
    counts = pc.abs(net)
    total = pc.sum(counts).as_py()
    starts = pc.subtract(pc.cumulative_sum(counts), counts)
    group = pc.fill_null_forward(pc.scatter(_arange(len(net)), starts, max_index=total - 1))
    rows = pc.take(last, group)
    arriving = pc.greater(pc.take(net, group), pa.scalar(0, pa.int64()))
    # Order by the last change, deletes first.
    order = pc.sort_indices(pa.table({"arriving": arriving.cast(pa.int64()), "row": rows}),
                            sort_keys=[("arriving", "ascending"), ("row", "ascending")])
    rows, arriving = pc.take(rows, order), pc.take(arriving, order)
    result = _with_change_types(table.take(rows),
                                pc.if_else(arriving, names[INSERT], names[DELETE]))
    if compute_updates and identifier_field_ids:
        result = pair_updates(result, identifier_field_ids, change_type_names=change_type_names)
    return result
