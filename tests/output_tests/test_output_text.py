"""CSV and JSON lines rendered by Arrow's kernels are byte for byte what the row-by-row
writers give: `json.dumps` of each row and `pyarrow.csv.write_csv`, over every type a scan
returns and the values where Arrow's text and Python's differ (floats near the switch to
exponents, escapes, non-ASCII, microseconds of zero, dates before 1000, nulls)."""

from __future__ import annotations

import datetime as dt
import json
import random
import struct
from decimal import Decimal

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from meltwater.output.json_values import json_default, json_safe
from meltwater.output.text import csv_text, json_lines, text_buffer
from meltwater.output.writers import write_stream

UTC = dt.timezone.utc
EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, 1e-4, 9.99e-5, 1e-5, 1e-7, 1.5e-300, 5e-324,
               1e15, 1e15 - 1, 999999999999999.9, 1e16, 9999999999999998.0, 1e21, 1e22,
               123456789.123, 1.7976931348623157e308, float("nan"), float("inf"),
               float("-inf"), 2.5, 100.0, 1234.5678, None]
EDGE_STRINGS = ["", "plain", 'a "quoted" word', "back\\slash", "new\nline", "tab\there",
                "\x00\x1f\x7f", "caf\u00e9", "\u4e2d\u6587", "emoji \U0001f600", "\u2028",
                "comma, here", None]


def _random_floats(rng: random.Random, n: int) -> list[float | None]:
    values: list[float | None] = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.3:
            values.append(round(rng.uniform(-1e4, 1e4), rng.randint(0, 6)))
        elif kind < 0.6:
            values.append(rng.uniform(-1, 1) * 10 ** rng.randint(-20, 20))
        elif kind < 0.9:  # any bit pattern that is a finite double
            value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            values.append(value if value == value else None)
        else:
            values.append(float(rng.randint(-10**17, 10**17)))
    return values


def _rows(n: int = 400, seed: int = 7) -> pa.Table:
    rng = random.Random(seed)
    floats = EDGE_FLOATS + _random_floats(rng, n - len(EDGE_FLOATS))
    strings = (EDGE_STRINGS * (n // len(EDGE_STRINGS) + 1))[:n]
    base = dt.datetime(2024, 3, 1, tzinfo=UTC)
    spread = 6 * 10**16  # microseconds: +-1900 years
    stamps = [base + dt.timedelta(microseconds=rng.randint(-spread, spread)) for _ in range(n)]
    stamps[:6] = [base, dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(999, 12, 31, 23, 59, 59,
                                                                      tzinfo=UTC),
                  dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
                  dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None]
    ints = [rng.randint(-2**63, 2**63 - 1) for _ in range(n)]
    ints[0] = None
    return pa.table({
        "i64": pa.array(ints, pa.int64()),
        "i32": pa.array([rng.randint(-2**31, 2**31 - 1) for _ in range(n)], pa.int32()),
        "u8": pa.array([rng.randint(0, 255) for _ in range(n)], pa.uint8()),
        "flag": pa.array([[True, False, None][i % 3] for i in range(n)], pa.bool_()),
        "f64": pa.array(floats, pa.float64()),
        "f32": pa.array(floats, pa.float32()),
        "s": pa.array(strings, pa.string()),
        "ls": pa.array(strings, pa.large_string()),
        "dec": pa.array([None if i % 7 == 0 else Decimal(rng.randint(-10**12, 10**12))
                         .scaleb(-rng.randint(0, 10)) for i in range(n)], pa.decimal128(38, 10)),
        "ts_utc": pa.array(stamps, pa.timestamp("us", tz="UTC")),
        "ts": pa.array([None if s is None else s.replace(tzinfo=None) for s in stamps],
                       pa.timestamp("us")),
        "ts_ms": pa.array([None if s is None else s.replace(microsecond=s.microsecond // 1000
                                                              * 1000, tzinfo=None)
                           for s in stamps], pa.timestamp("ms")),
        "day": pa.array([None if s is None else s.date() for s in stamps], pa.date32()),
        "clock": pa.array([None if s is None else s.time() for s in stamps], pa.time64("us")),
        "bytes": pa.array([None if s is None else s.encode() for s in strings], pa.binary()),
        "nested": pa.array([{"x": f, "l": [f]} for f in floats],
                           pa.struct([("x", pa.float64()), ("l", pa.list_(pa.float64()))])),
        "zoned": pa.array([None if s is None or s.year < 2 else s for s in stamps],
                          pa.timestamp("us", tz="America/New_York")),
        "\u00e9t\u00e9 \"col\"": pa.array(strings, pa.string()),
    })


def _json_reference(batch: pa.RecordBatch) -> bytes:
    return "".join(json.dumps(json_safe(row), default=json_default, allow_nan=False) + "\n"
                   for row in batch.to_pylist(maps_as_pydicts="strict")).encode()


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_json_lines_are_json_dumps_of_each_row(seed) -> None:
    for batch in _rows(seed=seed).to_batches(max_chunksize=150):
        lines = json_lines(batch)
        assert lines is not None
        assert text_buffer(lines).to_pybytes() == _json_reference(batch)


def test_json_lines_column_by_column() -> None:
    """Each column alone, so a mismatch names its type."""
    table = _rows()
    for name in table.column_names:
        batch = table.select([name]).combine_chunks().to_batches()[0]
        assert text_buffer(json_lines(batch)).to_pybytes() == _json_reference(batch), name


def _csv_reference(batch: pa.RecordBatch, header: bool) -> bytes:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(batch, sink, write_options=pacsv.WriteOptions(include_header=header))
    return sink.getvalue().to_pybytes()


CSV_COLUMNS = ["i64", "i32", "u8", "flag", "f64", "f32", "s", "ls", "dec", "ts_utc", "ts",
               "ts_ms", "day", "clock", "\u00e9t\u00e9 \"col\""]


@pytest.mark.parametrize("header", [True, False])
def test_csv_text_is_pyarrows_csv(header) -> None:
    table = _rows().select(CSV_COLUMNS)
    for batch in table.to_batches(max_chunksize=150):
        assert csv_text(batch, header).to_pybytes() == _csv_reference(batch, header)
    for name in CSV_COLUMNS:
        batch = table.select([name]).combine_chunks().to_batches()[0]
        assert csv_text(batch, header).to_pybytes() == _csv_reference(batch, header), name


def test_csv_of_other_types_is_left_to_pyarrow() -> None:
    batch = _rows().select(["i64", "bytes", "zoned"]).combine_chunks().to_batches()[0]
    assert csv_text(batch, True).to_pybytes() == _csv_reference(batch, True)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_write_stream_writes_what_it_wrote_row_by_row(tmp_path, fmt) -> None:
    table = _rows().select([*CSV_COLUMNS, "nested"] if fmt == "jsonl" else CSV_COLUMNS)
    batches = table.to_batches(max_chunksize=97)
    path = tmp_path / f"out.{fmt}"
    reader = pa.RecordBatchReader.from_batches(table.schema, batches)
    assert write_stream(reader, fmt, str(path)) == table.num_rows
    if fmt == "jsonl":
        expected = b"".join(_json_reference(b) for b in batches)
    else:
        expected = b"".join(_csv_reference(b, i == 0) for i, b in enumerate(batches))
    assert path.read_bytes() == expected


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_empty_stream(tmp_path, fmt) -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.string())])
    path = tmp_path / f"out.{fmt}"
    assert write_stream(pa.RecordBatchReader.from_batches(schema, []), fmt, str(path)) == 0
    # the header pyarrow's CSV writer puts above rows
    assert path.read_bytes() == (b'"a","b"\n' if fmt == "csv" else b"")
