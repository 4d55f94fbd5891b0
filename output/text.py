"""CSV and JSON lines rendered column by column with Arrow's compute kernels.

`meltwater scan --format jsonl` turned every row into a Python dict and `json.dumps` it,
minutes for a few million rows. And `--format csv` spent most of its time in pyarrow's
CSV writer formatting one column, the `timestamptz`: Arrow formats a zoned timestamp
through its time zone database, some thirty times slower than a naive one.

Here each column becomes an array of its values' text (a "cell" array), then one
`binary_join_element_wise` joins the cells of a row with a separator (arrays only: with
literal text among its arguments it took three times as long), slice replacements put
keys, brackets and newlines around them, and the joined array's data buffer is the
output, written as is. The text is byte for byte what
the row-by-row writers gave, and a column whose values this module cannot render exactly
takes the slow path alone:

- JSON: `json.dumps(row, default=json_default, allow_nan=False)` of `json_value`'s row
  (`meltwater.output.writers`), so ", " and ": " separators, ASCII only (non-ASCII
  escaped), floats as Python's `repr`, NaN and the infinities as strings, times as
  `isoformat()`. Integers, booleans, strings, doubles and floats, decimals, dates and
  timestamps (naive or UTC, to microseconds) are rendered by Arrow; the few values Arrow
  writes otherwise than Python (floats Arrow or Python writes with an exponent, strings
  that need escaping) go through `json.dumps` one by one. Any other column is rendered value
  by value in Python, as before.
- CSV: what `pyarrow.csv.write_csv` writes: a header of quoted names, strings quoted with
  inner quotes doubled, nulls empty, other values as Arrow casts them to text (which is
  what the CSV writer does), a UTC timestamp as the naive one followed by "Z". A batch
  with a column of any other type is written by `pyarrow.csv.write_csv` itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from meltwater.output.json_values import json_default, json_value

# Python's repr writes a float without an exponent from 1e-4 up to 1e16. There, when Arrow
# writes it without an exponent too (it switches by digits, not magnitude: 1e+15, and
# 2.3801918634710773e+10), both write the same shortest digits, once ".0" is added to
# integral values. Every other float goes through Python.
_FIXED_LOW, _FIXED_HIGH = 1e-4, 1e16
# Text JSON (ensure_ascii) escapes: a quote, a backslash, anything outside ' '..'~'.
_NEEDS_ESCAPE = r'[^\x20-\x7e]|["\\]'
# Datetimes Python can hold (to_pylist raises for others, and so does the slow path).
_MIN_US = -62135596800 * 1_000_000  # 0001-01-01T00:00:00
_MAX_US = 253402300799 * 1_000_000 + 999_999  # 9999-12-31T23:59:59.999999
_MIN_DAY, _MAX_DAY = -719162, 2932896
_UTC = ("UTC", "Etc/UTC", "+00:00")


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _strings(column: pa.Array) -> pa.Array:
    return column if pa.types.is_string(column.type) else column.cast(pa.string())


_END = 2**31 - 1  # a slice start past any string's end: replacing there appends


def _wrap(text: pa.Array, before: str, after: str) -> pa.Array:
    """Each value between `before` and `after` (two slice replacements cost a third of a
    `binary_join_element_wise` with scalars)."""
    if before:
        text = pc.binary_replace_slice(text, 0, 0, before)
    return pc.binary_replace_slice(text, _END, _END, after) if after else text


def _fill(cells: pa.Array, column: pa.Array, text: str) -> pa.Array:
    return cells if column.null_count == 0 else pc.fill_null(cells, text)


def _replace_where(cells: pa.Array, mask: pa.Array, render: Callable[[Any], str],
                   column: pa.Array) -> pa.Array:
    """`cells` with the values where `mask` is true rendered by `render` in Python."""
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return cells
    values = column.filter(mask).to_pylist()
    return pc.replace_with_mask(cells, mask, pa.array([render(v) for v in values],
                                                      pa.string()))


def _in_range(column: pa.Array, low: int, high: int) -> bool:
    bounds = pc.min_max(column.cast(pa.int64()))
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    return lo is None or (lo >= low and hi <= high)


# -- JSON -----------------------------------------------------------------------------------
def _json_float(column: pa.Array) -> pa.Array:
    doubles = column.cast(pa.float64())
    text = pc.cast(doubles, pa.string())
    exponent = pc.match_substring(text, "e")
    integral = pc.invert(pc.or_(exponent, pc.match_substring(text, ".")))
    cells = pc.if_else(integral, _wrap(text, "", ".0"), text)
    magnitude = pc.abs(doubles)
    odd = pc.or_(pc.less(magnitude, _FIXED_LOW), pc.greater_equal(magnitude, _FIXED_HIGH))
    odd = pc.or_(pc.or_(odd, exponent), pc.is_nan(doubles))
    cells = _replace_where(cells, odd, lambda v: json.dumps(json_value(v), allow_nan=False),
                           doubles)
    return _fill(cells, column, "null")


def _json_string(column: pa.Array) -> pa.Array:
    strings = _strings(column)
    cells = _wrap(strings, '"', '"')
    cells = _replace_where(cells, pc.match_substring_regex(strings, _NEEDS_ESCAPE),
                           json.dumps, strings)
    return _fill(cells, column, "null")


def _fraction_trimmed(text: pa.Array, whole: int) -> pa.Array:
    """Arrow's text of a microsecond time less ".000000", which `isoformat()` leaves out
    when the microseconds are zero; `whole` is the length up to the seconds."""
    return pc.if_else(pc.ends_with(text, ".000000"), pc.utf8_slice_codeunits(text, 0, whole),
                      text)


def _json_timestamp(column: pa.Array) -> pa.Array | None:
    unit, tz = column.type.unit, column.type.tz
    if unit == "ns" or (tz is not None and tz not in _UTC):
        return None
    micros = column.cast(pa.timestamp("us"))
    if not _in_range(micros, _MIN_US, _MAX_US):
        return None
    text = pc.cast(micros, pa.string())  # 2024-01-02 03:04:05.000006
    text = _fraction_trimmed(pc.utf8_replace_slice(text, 10, 11, "T"), 19)
    cells = _wrap(text, '"', '+00:00"' if tz else '"')
    return _fill(cells, column, "null")


def _json_date(column: pa.Array) -> pa.Array | None:
    if not _in_range(column.cast(pa.int32()), _MIN_DAY, _MAX_DAY):
        return None
    return _fill(_wrap(pc.cast(column, pa.string()), '"', '"'), column, "null")


def _json_cells_python(column: pa.Array) -> pa.Array:
    return pa.array([json.dumps(json_value(v), default=json_default, allow_nan=False)
                     for v in column.to_pylist(maps_as_pydicts="strict")], pa.string())


def json_cells(column: pa.Array) -> pa.Array:
    """The JSON text of each value of a column, as `json.dumps` of the row would write it."""
    t = column.type
    cells: pa.Array | None = None
    if pa.types.is_integer(t):
        cells = _fill(pc.cast(column, pa.string()), column, "null")
    elif pa.types.is_boolean(t):
        cells = _fill(pc.if_else(column, "true", "false"), column, "null")
    elif pa.types.is_float32(t) or pa.types.is_float64(t):
        cells = _json_float(column)
    elif _is_string(t):
        cells = _json_string(column)
    elif pa.types.is_decimal(t) and t.scale >= 0:  # str(Decimal), as Arrow's text
        cells = _fill(_wrap(pc.cast(column, pa.string()), '"', '"'), column, "null")
    elif pa.types.is_timestamp(t):
        cells = _json_timestamp(column)
    elif pa.types.is_date32(t):
        cells = _json_date(column)
    return _json_cells_python(column) if cells is None else cells


def json_objects(batch: pa.RecordBatch, end: str = "") -> pa.Array | None:
    """One JSON object per row, as `json.dumps` of the row's dict writes it, each followed
    by `end`, as one string array; None when the batch's rows are no dict of its columns
    (no columns, or a name twice)."""
    names = batch.schema.names
    if not names or len(set(names)) != len(names):
        return None
    keyed = [pc.binary_replace_slice(json_cells(column), 0, 0, json.dumps(name) + ": ")
             for name, column in zip(names, batch.columns, strict=True)]
    return _wrap(_join([*keyed, ", "]), "{", "}" + end)


def json_lines(batch: pa.RecordBatch) -> pa.Array | None:
    """One JSON object per row, each ending in a newline, as one string array; None when
    the batch's rows are no dict of its columns (no columns, or a name twice)."""
    return json_objects(batch, "\n")


# -- CSV ------------------------------------------------------------------------------------
def _csv_cells(column: pa.Array) -> pa.Array | None:
    t = column.type
    if _is_string(t):
        strings = _strings(column)
        if pc.any(pc.match_substring(strings, '"')).as_py():
            strings = pc.replace_substring(strings, '"', '""')
        return _fill(_wrap(strings, '"', '"'), column, "")
    if pa.types.is_timestamp(t) and t.tz == "UTC":
        naive = column.cast(pa.timestamp(t.unit))
        return _fill(_wrap(pc.cast(naive, pa.string()), "", "Z"), column, "")
    if (pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t)
            or pa.types.is_boolean(t) or pa.types.is_decimal(t) or pa.types.is_date(t)
            or pa.types.is_time(t)
            or (pa.types.is_timestamp(t) and t.tz is None)):
        return _fill(pc.cast(column, pa.string()), column, "")
    return None


def csv_lines(batch: pa.RecordBatch) -> pa.Array | None:
    """The CSV rows of a batch (no header), each ending in a newline, as one string array;
    None when a column's type is left to `pyarrow.csv.write_csv`."""
    if batch.num_columns == 0:
        return None
    cells = []
    for column in batch.columns:
        cell = _csv_cells(column)
        if cell is None:
            return None
        cells.append(cell)
    return _wrap(_join([*cells, ","]), "", "\n")


def csv_text(batch: pa.RecordBatch, header: bool) -> pa.Buffer:
    """A batch as `pyarrow.csv.write_csv` writes it (with or without the header line)."""
    lines = csv_lines(batch) if batch.num_rows else None
    if lines is None:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(batch, sink, write_options=pacsv.WriteOptions(include_header=header))
        return sink.getvalue()
    body = text_buffer(lines)
    if not header:
        return body
    sink = pa.BufferOutputStream()
    pacsv.write_csv(batch.slice(0, 0), sink)
    sink.write(body)
    return sink.getvalue()


# -- both -----------------------------------------------------------------------------------
def _join(pieces: list[Any]) -> pa.Array:
    """`binary_join_element_wise(*pieces)`: the last piece is the separator. Large offsets
    when the text might not fit in 2 GiB."""
    arrays = [p for p in pieces if isinstance(p, pa.Array)]
    rows = len(arrays[0]) if arrays else 0
    size = sum(a.nbytes for a in arrays) + rows * sum(len(p) for p in pieces
                                                      if isinstance(p, str))
    if size >= 1 << 30:
        pieces = [p.cast(pa.large_string()) if isinstance(p, pa.Array) else p
                  for p in pieces]
    return pc.binary_join_element_wise(*pieces)


def text_buffer(lines: pa.Array) -> pa.Buffer:
    """The bytes of a string array's values, back to back (its data buffer, sliced)."""
    if len(lines) == 0:
        return pa.py_buffer(b"")
    _validity, offsets, data = lines.buffers()
    width = 8 if pa.types.is_large_string(lines.type) else 4
    ends = memoryview(offsets.slice(lines.offset * width, (len(lines) + 1) * width))
    positions = ends.cast("q" if width == 8 else "i")
    start, end = positions[0], positions[len(lines)]
    return data.slice(start, end - start)
