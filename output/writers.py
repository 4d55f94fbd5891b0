"""Writing record batch streams for people and tools: table, JSON lines, CSV, Parquet.

Every writer consumes the stream batch by batch, so `meltwater scan ... --format parquet`
of a large table holds one batch at a time (the table format prints, it does not sort).
An output file is written beside its path and renamed into place only when complete
(`meltwater.output.files`): a failure or a signal never leaves part of one.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
from collections.abc import Callable, Iterable
from typing import IO, Any

import pyarrow as pa

from meltwater.output.errors import OutputError
from meltwater.output.files import WriteBack, output_destination, write_in_pieces
from meltwater.output.formats import ROW_FORMATS, OutputFormat, choices
from meltwater.output.json_values import json_default, json_safe, json_value
from meltwater.output.pipeline import ordered_map, writing_behind
from meltwater.output.text import csv_text, json_lines, text_buffer

FORMATS = choices(ROW_FORMATS)


def _csv_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    """CSV holds text: struct, list and map columns are written as JSON text (as `jsonl`
    writes them), binary and fixed columns (and UUIDs, which Arrow holds as 16 bytes) in
    base64, as `jsonl` and `debezium-jsonl` write bytes (and BigQuery's CSV export does)."""
    columns = []
    for column in batch.columns:
        if pa.types.is_nested(column.type):
            column = pa.array([None if v is None else json.dumps(json_value(v),
                                                                 default=json_default,
                                                                 allow_nan=False)
                               for v in column.to_pylist(maps_as_pydicts="strict")], pa.string())
        elif _is_bytes(column.type):
            column = pa.array([None if v is None else base64.b64encode(v).decode("ascii")
                               for v in column.to_pylist(maps_as_pydicts="strict")], pa.string())
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _is_bytes(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t))


def _render_cell(value: Any, width: int = 40) -> str:
    if value is None:
        text = "null"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, default=json_default)
    elif isinstance(value, (bytes, bytearray)):
        text = "0x" + bytes(value).hex()
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def write_table(batches: Iterable[pa.RecordBatch], schema: pa.Schema, out: IO[str]) -> int:
    """Write batches as an aligned text table with a row count, for a terminal; returns the rows
    written."""
    names = schema.names
    rows: list[list[str]] = []
    for batch in batches:
        for row in batch.to_pylist():
            rows.append([_render_cell(row[n]) for n in names])
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    out.write("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
    out.write(f"({len(rows)} {'row' if len(rows) == 1 else 'rows'})\n")
    return len(rows)


def _json_lines_slow(batch: pa.RecordBatch) -> bytes:
    return "".join(json.dumps(json_safe(row), default=json_default, allow_nan=False) + "\n"
                   for row in batch.to_pylist(maps_as_pydicts="strict")).encode()


def _jsonl_text(batch: pa.RecordBatch, _first: bool) -> pa.Buffer | bytes:
    lines = json_lines(batch)
    return _json_lines_slow(batch) if lines is None else text_buffer(lines)


def _csv_text(batch: pa.RecordBatch, first: bool) -> pa.Buffer:
    return csv_text(_csv_columns(batch), header=first)


def _csv_header(names: list[str]) -> bytes:
    """The header alone, for a result without rows: as Arrow writes it above rows (names
    quoted, so a comma or quote in one cannot shift the columns)."""
    no_rows = pa.RecordBatch.from_arrays([pa.nulls(0, pa.string()) for _ in names],
                                         names=names)
    return csv_text(no_rows, header=True).to_pybytes()


def _write_text(reader: pa.RecordBatchReader, output: str | None,
                render: Callable[[pa.RecordBatch, bool], pa.Buffer | bytes],
                empty: bytes = b"") -> int:
    """Batches rendered to text on worker threads (`pipeline.ordered_map`), written
    in order on a writer thread that writes them back to disk as it goes (`WriteBack`);
    `render(batch, first)`, and `empty` when there is no batch at all. Returns the rows
    written."""
    def job(numbered: tuple[int, pa.RecordBatch]) -> tuple[int, pa.Buffer | bytes]:
        index, batch = numbered
        return batch.num_rows, render(batch, index == 0)

    with output_destination(output, text=False) as binary, \
            contextlib.closing(ordered_map(job, enumerate(reader))) as rendered:
        if not output:  # a pipe or terminal: written here, where a signal interrupts it
            return _write_rendered(rendered, functools.partial(write_in_pieces, binary),
                                   empty)
        with writing_behind(WriteBack(binary).write, depth=TEXT_WRITES_QUEUED) as write:
            return _write_rendered(rendered, write, empty)


def _write_rendered(rendered: Iterable[tuple[int, pa.Buffer | bytes]],
                    write: Callable[[pa.Buffer | bytes], None], empty: bytes) -> int:
    count = 0
    written = False
    for rows, text in rendered:
        write(text)
        count += rows
        written = True
    if not written:
        write(empty)
    return count


# Rendered batches (a few MB of text each) queued for the writer thread, so that the
# rendering goes on while it waits for the disk.
TEXT_WRITES_QUEUED = 4


def write_stream(reader: pa.RecordBatchReader, fmt: OutputFormat | str,
                 output: str | None = None) -> int:
    """Write a stream in a format to a file (or stdout); returns the number of rows.

    A file is whole or absent: it replaces `output` only once every row is written
    (`meltwater.output.files`), so a failure leaves an existing file as it was."""
    chosen = OutputFormat.named(fmt)
    if chosen is None or chosen not in ROW_FORMATS:
        raise OutputError(f"unknown output format {fmt!r} (choose from {', '.join(FORMATS)})")
    if chosen is OutputFormat.PARQUET:  # loaded only for it: pyarrow.parquet and Thrift
        from meltwater.output.parquet_writer import write_parquet

        return write_parquet(reader, output)
    if chosen is OutputFormat.CSV:
        return _write_text(reader, output, _csv_text, empty=_csv_header(reader.schema.names))
    if chosen is OutputFormat.JSONL:
        return _write_text(reader, output, _jsonl_text)
    with output_destination(output, text=True) as handle:
        return write_table(reader, reader.schema, handle)
