"""Row groups encoded apart, whole or cut into runs of columns, and put into one file are
the file `pq.ParquetWriter` writes for the same row groups, byte for byte; `write_stream`
writes Parquet that way. A column whose dictionary the first row group abandoned is
written plain in the later ones, whatever order the threads run in, and nothing else is."""

from __future__ import annotations

import io
import threading
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from meltwater.output.errors import ParquetFooterError
from meltwater.output.parquet_footer import MAGIC, split_parquet
from meltwater.output.parquet_parts import (
    PartEncoder,
    PartsWriter,
    column_runs,
    encode_part,
    part_capacity,
)
from meltwater.output.parquet_writer import row_groups
from meltwater.output.writers import write_stream


def _table(rows: int) -> pa.Table:
    ids = pa.array(range(rows), pa.int64())
    return pa.table({
        "id": ids,
        "name": pa.array([f"name {i % 97}" for i in range(rows)]),
        "score": pa.array([None if i % 5 == 0 else i / 7 for i in range(rows)]),
        "tags": pa.array([[str(i % 3)] * (i % 4) for i in range(rows)],
                         pa.list_(pa.field("element", pa.string()))),
        "point": pa.array([{"x": i, "y": None} for i in range(rows)]),
        # Types whose statistics fill more of the footer: NaN counts, decimals, times.
        "ratio": pa.array([float("nan") if i % 7 == 0 else i / 3 for i in range(rows)]),
        "price": pa.array([Decimal(i) / 100 for i in range(rows)], pa.decimal128(12, 2)),
        "at": pa.array(range(rows), pa.timestamp("us", tz="UTC")),
        "day": pa.array(range(rows), pa.date32()),
        "raw": pa.array([bytes([i % 256]) * (i % 5) for i in range(rows)], pa.binary()),
    })


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (Arrow's `equals` holds NaN unequal to itself)."""
    def comparable(t: pa.Table) -> pa.Table:
        return t.set_column(t.schema.get_field_index("ratio"), "ratio",
                            t["ratio"].cast(pa.string()))
    return comparable(a).equals(comparable(b))


def _sequential(groups: list[pa.Table], schema: pa.Schema) -> bytes:
    """What the writer did before: ParquetWriter, one row group per write (none if empty)."""
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, schema) as writer:
        for group in groups:
            writer.write_table(group, row_group_size=1 << 20)
    return sink.getvalue()


def _stitched(groups: list[pa.Table], schema: pa.Schema, pieces: int = 1) -> bytes:
    """Row groups cut into `pieces` runs of columns (`column_runs`), encoded by one
    `PartEncoder`, each buffer taken back once written, as the CLI does."""
    sink = io.BytesIO()
    writer = PartsWriter(sink, schema)
    encoder = PartEncoder(schema, 1 << 20, spares=1)
    for number, group in enumerate(groups):
        runs = column_runs(group, pieces)
        for index, columns in enumerate(runs):
            part = encoder.encode(number, columns, group.select(list(columns)))
            writer.append(part, ends_row_group=index == len(runs) - 1)
            encoder.recycle(part)
    writer.close()
    return sink.getvalue()


@pytest.mark.parametrize("pieces", [1, 3, 100])
@pytest.mark.parametrize("sizes", [[5000], [3000, 1, 4999, 20], []])
def test_parts_make_the_file_the_parquet_writer_makes(sizes, pieces) -> None:
    table = _table(sum(sizes))
    groups, start = [], 0
    for size in sizes:
        groups.append(table.slice(start, size))
        start += size
    stitched = _stitched(groups, table.schema, pieces)
    assert stitched == _sequential(groups, table.schema)
    assert _same(pq.read_table(io.BytesIO(stitched)), table)
    assert pq.ParquetFile(io.BytesIO(stitched)).metadata.num_row_groups == len(sizes)


def test_column_runs_hold_a_share_of_the_bytes_each() -> None:
    table = pa.table({"small": pa.array([1] * 100, pa.int8()),
                      "big": pa.array(range(100), pa.int64()),
                      "tiny": pa.array([1] * 100, pa.int8()),
                      "wide": pa.array(["x" * 8] * 100)})
    assert column_runs(table, 1) == [range(0, 4)]
    assert column_runs(table, 3) == [range(0, 2), range(2, 4)]
    assert column_runs(table, 100) == [range(i, i + 1) for i in range(4)]
    assert column_runs(pa.table({}), 4) == [range(0)]


def _whole(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _footer(part: bytes) -> tuple[int, bytes]:
    length = int.from_bytes(part[-8:-4], "little")
    return length, part[-8 - length:-8]


def test_a_footer_splits_from_its_body() -> None:
    table = _table(100)
    part = _whole(table)
    body, footer = split_parquet(part)
    length, _ = _footer(part)
    assert bytes(body) == part[4:-8 - length]
    assert footer.num_rows == 100
    assert [c.name for c in footer.schema[1:6]] == ["id", "name", "score", "tags", "list"]


def test_a_footer_field_the_definition_does_not_know_is_refused() -> None:
    """Thrift would skip the field and the joined footer would lack it: refused instead."""
    table = _table(10)
    part = _whole(table)
    length, footer = _footer(part)
    # Field 100 of FileMetaData (compact protocol, long form: type i32, zigzag id and
    # value), before the struct's stop byte.
    unknown = footer[:-1] + bytes([0x05, 0xC8, 0x01, 0x0E]) + footer[-1:]
    damaged = part[:-8 - length] + unknown + len(unknown).to_bytes(4, "little") + MAGIC
    with pytest.raises(ParquetFooterError, match="does not know"):
        split_parquet(damaged)
    with pytest.raises(ParquetFooterError, match="not a Parquet file"):
        split_parquet(part[:-1])


def test_row_groups_gather_batches_up_to_rows_and_bytes() -> None:
    table = _table(1000)
    batches = table.to_batches(max_chunksize=70)
    groups = list(row_groups(batches, table.schema, rows=300))
    assert [g.num_rows for g in groups] == [300, 300, 300, 100]
    assert _same(pa.concat_tables(groups), table)
    by_size = list(row_groups(batches, table.schema, rows=10_000, size=1))
    assert [g.num_rows for g in by_size] == [b.num_rows for b in batches]
    first_fewer = list(row_groups(batches, table.schema, rows=300, first_rows=100))
    assert [g.num_rows for g in first_fewer] == [100, 300, 300, 300]
    assert _same(pa.concat_tables(first_fewer), table)


def test_write_stream_parquet(tmp_path) -> None:
    table = _table(3000)
    path = tmp_path / "out.parquet"
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=64))
    assert write_stream(reader, "parquet", str(path)) == 3000
    assert _same(pq.read_table(path), table)
    empty = tmp_path / "empty.parquet"
    reader = pa.RecordBatchReader.from_batches(table.schema, [])
    assert write_stream(reader, "parquet", str(empty)) == 0
    assert empty.read_bytes() == _sequential([], table.schema)


def test_a_part_larger_than_its_arrow_data_is_written_whole(monkeypatch) -> None:
    """No room in the buffer (made tiny here): the part is written again, whole."""
    import meltwater.output.parquet_parts as parts

    table = _table(2000)
    monkeypatch.setattr(parts, "part_capacity", lambda _table: 64)
    part = encode_part(table, table.schema, 1 << 20)
    assert part.memory is None  # a growing stream's: not kept for another part
    sink = io.BytesIO()
    writer = PartsWriter(sink, table.schema)
    writer.append(part)
    writer.close()
    assert _same(pq.read_table(io.BytesIO(sink.getvalue())), table)


def test_a_recycled_buffer_is_written_again_by_a_later_part() -> None:
    table = _table(3000)
    encoder = PartEncoder(table.schema, 1 << 20, spares=1)
    every = range(table.num_columns)
    first = encoder.encode(0, every, table.slice(0, 1500))
    kept = first.memory
    assert kept is not None and kept.size >= part_capacity(table.slice(0, 1500))
    encoder.recycle(first)
    second = encoder.encode(1, every, table.slice(1500, 1000))  # no more room than the first
    assert second.memory is not None and second.memory.address == kept.address


def _dictionary_pages(data: bytes) -> list[dict[str, bool]]:
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    return [{metadata.row_group(g).column(c).path_in_schema:
             metadata.row_group(g).column(c).has_dictionary_page
             for c in range(metadata.num_columns)}
            for g in range(metadata.num_row_groups)]


def test_a_column_whose_dictionary_was_abandoned_is_written_plain_after() -> None:
    """pyarrow gives up a dictionary past 1 MiB: 200,000 distinct int64s (1.6 MB) in a row
    group make it give up on `id`, and only on `id`; the next parts write `id` plain."""
    rows = 600_000
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "kind": pa.array([f"kind {i % 7}" for i in range(rows)])})
    groups = [table.slice(start, 200_000) for start in range(0, rows, 200_000)]
    joined = _stitched(groups, table.schema)
    assert _dictionary_pages(joined) == [{"id": True, "kind": True},
                                         {"id": False, "kind": True},
                                         {"id": False, "kind": True}]
    assert pq.read_table(io.BytesIO(joined)).equals(table)
    # pyarrow alone keeps starting every row group with a dictionary.
    assert [g["id"] for g in _dictionary_pages(_sequential(groups, table.schema))] == [True] * 3


def _id_then_kind(rows: int, distinct_ids: int) -> pa.Table:
    return pa.table({"id": pa.array([i % distinct_ids for i in range(rows)], pa.int64()),
                     "kind": pa.array([f"kind {i % 7}" for i in range(rows)])})


def test_only_the_first_part_decides_which_columns_are_plain() -> None:
    """`id` keeps within the dictionary limit in the first part (1,000 distinct values) and
    outgrows it in the second: the third still starts `id` with a dictionary, as pyarrow
    does, because only the first part's outcome counts."""
    rows = 200_000
    table = pa.concat_tables([_id_then_kind(rows, 1000), _id_then_kind(2 * rows, 2 * rows)])
    groups = [table.slice(0, rows), table.slice(rows, rows), table.slice(2 * rows, rows)]
    joined = _stitched(groups, table.schema)
    assert [g["id"] for g in _dictionary_pages(joined)] == [True, True, True]
    assert pq.read_table(io.BytesIO(joined)).equals(table)


def test_a_later_piece_waits_for_the_first_row_groups() -> None:
    """Row group 1's piece of `id` begun before row group 0's waits for it, then writes
    plain what row group 0 abandoned; its piece of `kind` waits for nothing more."""
    rows = 200_000
    table = _id_then_kind(2 * rows, 2 * rows)
    encoder = PartEncoder(table.schema, 1 << 20)
    waiting = threading.Event()

    class NotedEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waiting.set()
            return super().wait(timeout)

    encoder._decided[0] = NotedEvent()
    ids, kinds = range(0, 1), range(1, 2)
    later = table.slice(rows)
    parts = {}
    thread = threading.Thread(target=lambda: parts.update(
        {(1, 0): encoder.encode(1, ids, later.select([0]))}))
    thread.start()
    assert waiting.wait(30)  # blocked on row group 0's `id`, which has not begun
    parts[0, 0] = encoder.encode(0, ids, table.slice(0, rows).select([0]))
    parts[0, 1] = encoder.encode(0, kinds, table.slice(0, rows).select([1]))
    thread.join(30)
    parts[1, 1] = encoder.encode(1, kinds, later.select([1]))
    sink = io.BytesIO()
    writer = PartsWriter(sink, table.schema)
    for key in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        writer.append(parts[key], ends_row_group=key[1] == 1)
    writer.close()
    assert _dictionary_pages(sink.getvalue()) == [{"id": True, "kind": True},
                                                  {"id": False, "kind": True}]
    assert pq.read_table(io.BytesIO(sink.getvalue())).equals(table)


def test_pieces_that_do_not_make_the_file_columns_are_refused() -> None:
    table = _table(10)
    sink = io.BytesIO()
    writer = PartsWriter(sink, table.schema)
    with pytest.raises(ParquetFooterError, match="do not hold the file's columns in order"):
        writer.append(encode_part(table.select([0, 1]), table.select([0, 1]).schema, 100))
    swapped = table.select([1, 0, *range(2, table.num_columns)])
    with pytest.raises(ParquetFooterError, match="do not hold the file's columns in order"):
        PartsWriter(io.BytesIO(), table.schema).append(
            encode_part(swapped, swapped.schema, 100))
