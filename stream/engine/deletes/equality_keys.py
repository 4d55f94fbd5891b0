"""Equality delete keys as a set rows are matched against: null-safe, across promotions.

The spec matches an equality delete's key to a row's values with null equal to null, which
Arrow's joins do not do, and an older data file may hold a key column in a narrower type
than the delete file (int before the table widened it to long). `EqualityKeySet` codes each
distinct key densely and answers, per batch, each row's key code (null: no delete holds
that key), which is all the lookups of a table's equality deletes
(`meltwater.stream.engine.deletes.equality_lookup`) and the changed deletes of a commit
(`meltwater.stream.engine.changes.changed_keys`) need.

Two codings, chosen by the key:

- **sorted**: one key column of a type whose order is its equality (integers, strings,
  binary, dates, times, timestamps, decimals, booleans). The distinct keys are sorted once;
  a batch is matched with a binary search per row (`search_sorted`) and an equality check,
  so nothing is built per batch: a small data file costs next to nothing whatever the
  number of deleted keys (hashing the keys for every batch was the whole cost of a
  backlog table's small files);
- **hashed**: any other key (several columns, floats with their NaNs, nested fields):
  each column is coded as the index of its value among the column's distinct values
  (`index_in`, null with an index of its own), and the codes combined column by column.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def common_type(data: pa.DataType, delete: pa.DataType) -> pa.DataType:
    """The type both sides of an equality key are compared in: the wider of a promotion
    (an older data file may hold an int the table has since widened to long), else the
    data's."""
    if data.equals(delete) or pa.types.is_null(delete):
        return data
    if pa.types.is_null(data):
        return delete
    if pa.types.is_integer(data) and pa.types.is_integer(delete):
        return data if data.bit_width >= delete.bit_width else delete
    if pa.types.is_floating(data) and pa.types.is_floating(delete):
        return data if data.bit_width >= delete.bit_width else delete
    if pa.types.is_decimal(data) and pa.types.is_decimal(delete) and data.scale == delete.scale:
        return data if data.precision >= delete.precision else delete
    return data


def _is_ordered(type_: pa.DataType) -> bool:
    """Whether values of the type are equal exactly when neither sorts before the other."""
    return (pa.types.is_integer(type_) or pa.types.is_string(type_)
            or pa.types.is_large_string(type_) or pa.types.is_binary(type_)
            or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_)
            or pa.types.is_date(type_) or pa.types.is_time(type_)
            or pa.types.is_timestamp(type_) or pa.types.is_decimal(type_)
            or pa.types.is_boolean(type_))


# Up to this many keys `matches` hashes them for every call (microseconds); a larger set
# (a scan's backlog) is binary-searched, which builds nothing per call.
_HASHED_MATCH_KEYS = 1 << 14


class EqualityKeySet:
    """Distinct delete keys over some field ids, coded for null-safe membership tests (see
    the module doc). `row_codes` holds each built key row's code, in [0, code_count)."""

    def __init__(self, field_ids: tuple[int, ...], keys: pa.Table,
                 paths: dict[int, tuple[str, ...]]) -> None:
        self.field_ids = field_ids
        self.paths = [paths[fid] for fid in field_ids]
        self.types = [keys.schema.field(i).type for i in range(keys.num_columns)]
        columns = [keys.column(i).combine_chunks() for i in range(keys.num_columns)]
        self.size = keys.num_rows
        self.sorted = len(columns) == 1 and _is_ordered(self.types[0])
        self.values: list[pa.Array] = []  # distinct values of each key column (null too)
        self.codes: list[pa.Array] = []  # distinct combined codes after each column
        if self.sorted:
            distinct = pc.unique(columns[0])
            distinct = distinct.take(pc.array_sort_indices(distinct, null_placement="at_end"))
            self.values.append(distinct)
            self._null_code = (len(distinct) - 1 if distinct.null_count else None)
            self.row_codes = self._sorted_codes(columns[0])
        else:
            self.row_codes = self._build_hashed(columns)
        self.code_count = len(self.codes[-1]) if self.codes else len(self.values[0])
        self.nbytes = sum(a.nbytes for a in self.values + self.codes)

    def _build_hashed(self, columns: list[pa.Array]) -> pa.Array:
        combined = None
        for column in columns:
            distinct = pc.unique(column)
            self.values.append(distinct)
            code = pc.index_in(column, value_set=distinct, skip_nulls=False).cast(pa.int64())
            if combined is None:
                combined = code
            else:
                combined = pc.add(pc.multiply(combined, len(distinct)), code)
                seen = pc.unique(combined)
                self.codes.append(seen)
                combined = pc.index_in(combined, value_set=seen).cast(pa.int64())
        assert combined is not None  # a key has at least one column
        return combined

    def _sorted_codes(self, column: pa.Array) -> pa.Array:
        """Each value's index among the sorted distinct keys, null where none equals it."""
        values = self.values[0]
        found = len(values) - (1 if self._null_code is not None else 0)
        if found == 0:
            index = pa.nulls(len(column), pa.int64())
        else:
            index = pc.search_sorted(values.slice(0, found), column).cast(pa.int64())
            at = pc.min_element_wise(index, pa.scalar(found - 1, pa.int64()))
            equal = pc.equal(pc.take(values, at), column)
            index = pc.if_else(equal, index, pa.scalar(None, pa.int64()))
        if self._null_code is not None and column.null_count:
            index = pc.if_else(pc.is_null(column), pa.scalar(self._null_code, pa.int64()),
                               index)
        return index

    def _column(self, batch: pa.RecordBatch, j: int) -> pa.Array:
        """The batch's values of key column `j`, in the set's type."""
        column = batch.column(self.paths[j][0])
        for name in self.paths[j][1:]:
            column = pc.struct_field(column, [column.type.get_field_index(name)])
        if not column.type.equals(self.types[j]):
            column = column.cast(self.types[j], safe=False)
        return column

    def codes_of(self, batch: pa.RecordBatch) -> pa.Array:
        """Each row's key code, null for a key the set does not hold (nulls equal nulls)."""
        combined = None
        for j in range(len(self.paths)):
            column = self._column(batch, j)
            if self.sorted:
                return self._sorted_codes(column)
            code = pc.index_in(column, value_set=self.values[j], skip_nulls=False)
            if combined is None:
                combined = code.cast(pa.int64())
            else:
                combined = pc.add(pc.multiply(combined, len(self.values[j])),
                                  code.cast(pa.int64()))
                combined = pc.index_in(combined, value_set=self.codes[j - 1]).cast(pa.int64())
        assert combined is not None
        return combined

    def matches(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """True for each row whose key equals a delete key (nulls equal nulls). A few
        keys (one commit's) are hashed for each call: one probe a row, where coding the
        rows (a binary search, a take and a comparison) costs four passes, and a change
        read matches every candidate row of the table against its commit's keys."""
        if self.sorted and self.size <= _HASHED_MATCH_KEYS:
            return pc.is_in(self._column(batch, 0), value_set=self.values[0],
                            skip_nulls=False)
        return pc.is_valid(self.codes_of(batch))
