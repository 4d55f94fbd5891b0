"""Rows named by position read from their Parquet pages (`parquet_pages`) are the rows a
whole row group read gives, for files of many pages: dictionary and plain pages, v1 and v2
data pages, nulls, every compression, a nested column beside flat ones, several row
groups. Files without an OffsetIndex, and files whose index disagrees with their pages, are
read whole; and the corpus's `small_pages` table, written by Iceberg Java in pages of 100
rows, read by page commit by commit, replays to Iceberg Java's snapshots."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import zlib
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.decode import page_metadata, parquet_layout, parquet_pages
from meltwater.stream.engine.decode.formats import ParquetSource

ROWS = 3_000


@pytest.fixture(autouse=True)
def _small_row_groups_by_page(monkeypatch):
    """These files are small: read their row groups by page all the same."""
    monkeypatch.setattr(parquet_layout, "MIN_PAGED_GROUP_ROWS", 0)


def _table(seed: int) -> pa.Table:
    rng = random.Random(seed)

    def maybe(value):
        return None if rng.random() < 0.1 else value

    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "i": pa.array([maybe(rng.randrange(-2**31, 2**31)) for _ in range(ROWS)], pa.int32()),
        "s": pa.array([maybe(rng.choice(["a", "bb", "ccc", "é😀"])) for _ in range(ROWS)]),
        "u": pa.array([maybe(f"note {rng.random()}") for _ in range(ROWS)]),
        "d": pa.array([maybe(rng.uniform(-1, 1)) for _ in range(ROWS)], pa.float64()),
        "dec": pa.array([maybe(Decimal(rng.randrange(-10**6, 10**6)) / 100)
                         for _ in range(ROWS)], pa.decimal128(10, 2)),
        "ts": pa.array([maybe(base + dt.timedelta(seconds=rng.randrange(10**6)))
                        for _ in range(ROWS)], pa.timestamp("us", "UTC")),
        "b": pa.array([maybe(rng.random() < 0.5) for _ in range(ROWS)]),
        "st": pa.array([maybe({"x": rng.randrange(9), "y": "y"}) for _ in range(ROWS)],
                       pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "l": pa.array([maybe([rng.randrange(9)] * rng.randrange(3)) for _ in range(ROWS)],
                      pa.list_(pa.int32())),
    })


WRITES = {
    "v1 pages, dictionaries, snappy": dict(data_page_version="1.0", compression="snappy"),
    "v2 pages, zstd": dict(data_page_version="2.0", compression="zstd"),
    "plain, no compression": dict(use_dictionary=False, compression="none"),
    "three row groups, gzip": dict(row_group_size=1_000, compression="gzip"),
}


def _write(path, options: dict) -> pa.Table:
    table = _table(len(str(path)))
    pq.write_table(table, path, write_page_index=True, data_page_size=512,
                   write_batch_size=50, **options)
    return table


def _read(path, rows: list[int], selection=None) -> dict[int, dict]:
    """Each position's row as the source's batches give it, checked against the positions
    the batches claim."""
    source = ParquetSource(str(path), PyArrowFileIO())
    selection = selection or {i: True for i in range(len(source.schema))}
    found = {}
    for first, batch in source.batches(selection, 128, rows=rows):
        for offset, row in enumerate(batch.to_pylist()):
            found[first + offset] = row
    return found


@pytest.mark.parametrize("write", sorted(WRITES))
def test_rows_read_by_page_are_the_whole_reads(tmp_path, monkeypatch, write):
    path = tmp_path / "f.parquet"
    table = _write(path, WRITES[write])
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).has_offset_index
    pages = []
    original = parquet_pages.PageReader._paged
    monkeypatch.setattr(parquet_pages.PageReader, "_paged",
                        lambda self, *a: pages.append(1) or original(self, *a))
    whole = table.to_pylist()
    rng = random.Random(7)
    for count in (1, 3, 20):
        rows = sorted(rng.sample(range(ROWS), count))
        found = _read(path, rows)
        for r in rows:
            assert found[r] == whole[r], (write, r)
        assert all(row == whole[p] for p, row in found.items())  # every row it gave is right
        assert len(found) < ROWS  # not the whole file
    assert pages, "no column was read by page"


def test_columns_cut_at_the_same_rows_are_decoded_from_one_page_file(tmp_path, monkeypatch):
    """Pages of every column cut at the same rows (as parquet-mr cuts them at its row
    limit): one page file holds all the flat columns a row group read needs; columns cut
    elsewhere get files of their own. Either way the rows are the whole read's."""
    files: list[int] = []
    original = parquet_pages.decode_columns
    monkeypatch.setattr(parquet_pages, "decode_columns",
                        lambda thrift, footer, columns: files.append(len(columns))
                        or original(thrift, footer, columns))
    aligned = tmp_path / "aligned.parquet"
    table = _table(3)
    pq.write_table(table, aligned, write_page_index=True, data_page_size=1,
                   write_batch_size=100)  # a page each 100 rows, in every column
    rows = [5, 1_234, 2_999]
    found = _read(aligned, rows)
    whole = table.to_pylist()
    assert all(found[r] == whole[r] for r in rows)
    flat = 8  # the columns but the struct and the list
    assert files == [flat]

    files.clear()
    ragged = tmp_path / "ragged.parquet"
    table = _write(ragged, {})  # pages cut by size: where depends on each column's bytes
    found = _read(ragged, rows)
    whole = table.to_pylist()
    assert all(found[r] == whole[r] for r in rows)
    assert len(files) > 1 and sum(files) == flat


def _chosen_as_dictionary(monkeypatch) -> dict[str, bool]:
    """Column name -> whether its pages were decoded to a dictionary, as they are read."""
    chosen: dict[str, bool] = {}
    original = parquet_pages.dictionary_strings

    def recording(thrift, meta):
        chosen[meta.path_in_schema[0]] = answer = original(thrift, meta)
        return answer

    monkeypatch.setattr(parquet_pages, "dictionary_strings", recording)
    return chosen


@pytest.mark.parametrize("write", sorted(WRITES))
def test_byte_arrays_whose_pages_are_all_dictionary_encoded_decode_to_a_dictionary(
        tmp_path, monkeypatch, write):
    """Such string columns are decoded to a dictionary array first (then cast); other
    columns and plain string pages never are. Either way the rows are the whole read's."""
    path = tmp_path / "f.parquet"
    table = _write(path, WRITES[write])
    chosen = _chosen_as_dictionary(monkeypatch)
    rows = sorted(random.Random(3).sample(range(ROWS), 5))
    found = _read(path, rows)
    assert all(found[r] == table.to_pylist()[r] for r in rows)
    assert chosen["i"] is False and chosen["d"] is False  # no byte arrays
    dictionary = WRITES[write].get("use_dictionary", True)
    assert chosen["s"] is dictionary and chosen["u"] is dictionary, chosen


def test_a_dictionary_that_fell_back_to_plain_pages_is_decoded_as_it_is(tmp_path):
    """A chunk whose dictionary outgrew its limit has plain data pages after the dictionary
    ones (its `encoding_stats` say so): not decoded to a dictionary, rows still right."""
    path = tmp_path / "f.parquet"
    table = pa.table({"id": pa.array(range(ROWS), pa.int64()),
                      "u": [f"note {i:05d}" for i in range(ROWS)]})
    pq.write_table(table, path, write_page_index=True, data_page_size=512,
                   write_batch_size=50, dictionary_pagesize_limit=4096)
    meta = _thrift_footer(path).row_groups[0].columns[1].meta_data
    assert {e.encoding for e in meta.encoding_stats if e.page_type == 0} == {0, 8}
    assert parquet_pages.dictionary_strings(parquet_pages.parquet_thrift(), meta) is False
    rows = [10, 2_500]
    found = _read(path, rows)
    assert [found[r]["u"] for r in rows] == ["note 00010", "note 02500"]


def _thrift_footer(path):
    """The file's footer as Thrift."""
    data = path.read_bytes()
    thrift = parquet_pages.parquet_thrift()
    length = int.from_bytes(data[-8:-4], "little")
    return thrift.decode(thrift.module.FileMetaData(), data[-8 - length:-8])


def test_a_file_read_again_decodes_no_thrift_and_gives_the_same_rows(tmp_path, monkeypatch):
    """Its footer, OffsetIndexes and checked page headers are kept by the process."""
    path = tmp_path / "f.parquet"
    table = _write(path, {})
    thrift = parquet_pages.parquet_thrift()
    decoded = []
    counting = dataclasses.replace(
        thrift, decode=lambda *a: decoded.append(1) or thrift.decode(*a))
    monkeypatch.setattr(parquet_pages, "parquet_thrift", lambda: counting)
    rows = [5, 1_500, 2_990]
    first = _read(path, rows)
    assert decoded, "the first read decoded no page metadata"
    decoded.clear()
    again = _read(path, rows)
    assert again == first and not decoded
    whole = table.to_pylist()
    assert all(again[r] == whole[r] for r in rows)


def _counting_decodes(monkeypatch) -> dict[str, int]:
    """Thrift decodes by struct name, from now on."""
    thrift = parquet_pages.parquet_thrift()
    counts: dict[str, int] = {}

    def decode(struct_, raw):
        counts[type(struct_).__name__] = counts.get(type(struct_).__name__, 0) + 1
        return thrift.decode(struct_, raw)

    monkeypatch.setattr(parquet_pages, "parquet_thrift",
                        lambda: dataclasses.replace(thrift, decode=decode))
    return counts


def test_page_facts_kept_on_disk_spare_the_next_process_and_are_checked(tmp_path,
                                                                         monkeypatch):
    """Another process (the process's cache emptied) reads the OffsetIndexes and checked
    pages a first one saved, decoding only the footer; facts damaged on disk, or saved for
    another file at the same path and size, are not used: decoded again, same rows."""
    path = tmp_path / "f.parquet"
    table = _write(path, {})
    whole = table.to_pylist()
    facts_dir = tmp_path / "pages"
    monkeypatch.setattr(page_metadata, "_kept", page_metadata.OrderedDict())
    monkeypatch.setattr(page_metadata, "_persisted", facts_dir)
    counts = _counting_decodes(monkeypatch)
    rows = [5, 1_500, 2_990]
    first = _read(path, rows)
    assert counts.get("OffsetIndex") and counts.get("PageHeader")
    saved = list(facts_dir.iterdir())
    assert len(saved) == 1

    def as_a_new_process() -> dict[int, dict]:
        page_metadata._kept.clear()
        counts.clear()
        return _read(path, rows)

    assert as_a_new_process() == first
    assert counts == {"FileMetaData": 1}  # the footer alone
    assert all(first[r] == whole[r] for r in rows)
    content = bytearray(saved[0].read_bytes())
    content[-5] ^= 0x01  # a digit of the content: its CRC-32 no longer agrees
    saved[0].write_bytes(bytes(content))
    assert as_a_new_process() == first and counts.get("OffsetIndex")
    # facts of another file at this path and size (its footer's CRC-32 differs)
    _, _, stored = saved[0].read_bytes().partition(b"\n")
    data = json.loads(stored)
    data["footer_crc"] += 1
    forged = json.dumps(data).encode()
    saved[0].write_bytes(b"%d\n" % zlib.crc32(forged) + forged)
    assert as_a_new_process() == first and counts.get("OffsetIndex")


def test_a_selection_of_columns_and_the_batch_schema_are_the_whole_reads(tmp_path):
    path = tmp_path / "f.parquet"
    _write(path, {})
    source = ParquetSource(str(path), PyArrowFileIO())
    selection = {0: True, 2: True, 8: {0: True}}  # id, s, st.x
    (first, batch), = source.batches(selection, 10_000)
    assert first == 0
    paged = list(source.batches(selection, 10_000, rows=[5, 2_000]))
    assert paged and all(b.schema == batch.schema for _, b in paged)
    for start, part in paged:
        assert part.to_pylist() == batch.slice(start, part.num_rows).to_pylist()


def test_many_wanted_rows_read_the_row_group_whole(tmp_path, monkeypatch):
    path = tmp_path / "f.parquet"
    _write(path, {})
    monkeypatch.setattr(parquet_pages.PageReader, "_paged",
                        lambda *_: pytest.fail("read by page"))
    found = _read(path, list(range(0, ROWS, 7)))
    assert len(found) == ROWS


def test_a_file_without_an_offset_index_is_read_whole(tmp_path):
    path = tmp_path / "f.parquet"
    table = _table(1)
    pq.write_table(table, path, write_page_index=False, data_page_size=512)
    assert _read(path, [10, 11])[10] == table.slice(10, 1).to_pylist()[0]


def test_an_offset_index_that_disagrees_with_the_pages_is_not_trusted(tmp_path, monkeypatch):
    """A page whose header counts other rows than its OffsetIndex entry: the row group is
    read whole, never rows taken from the wrong positions."""
    path = tmp_path / "f.parquet"
    table = _write(path, {})
    real = parquet_pages.PageReader._page_starts

    def shifted(self, offsets, rows):
        starts = real(self, offsets, rows)
        return None if starts is None else [0] + [s + 1 for s in starts[1:-1]] + [starts[-1]]

    monkeypatch.setattr(parquet_pages.PageReader, "_page_starts", shifted)
    source = ParquetSource(str(path), PyArrowFileIO())
    reader = source._pages = parquet_pages.PageReader(
        parquet_pages.read_range_of(source._handle), parquet_pages.file_size_of(source._handle),
        source._file)
    assert reader.read(0, 0, [0, 1], lambda _: [], [1_500], 128) is None
    found = _read(path, [1_500])
    assert found[1_500] == table.slice(1_500, 1).to_pylist()[0]


def test_iceberg_javas_small_pages_read_by_page_replay_to_its_snapshots(corpus, monkeypatch):
    """Every commit of `small_pages` (scattered position deletes, equality deletes, DVs;
    pages of 100 rows) read with page reads on: the changes replay each parent to Iceberg
    Java's next snapshot, and reads went by page."""
    import meltwater.stream
    from corpus.compare import assert_replays, live_ranges
    from meltwater.planner.table.table_loading import load_table

    paged = []
    original = parquet_pages.PageReader._paged
    monkeypatch.setattr(parquet_pages.PageReader, "_paged",
                        lambda self, *a: paged.append(1) or original(self, *a))
    scenario = corpus.scenarios["small_pages"]
    table = load_table(scenario.location)
    checked = 0
    for parent, child in live_ranges(scenario, table.metadata):
        changes = meltwater.stream.changes(table, from_snapshot_id=parent,
                                           to_snapshot_id=child).read_all()
        assert_replays(scenario, table.metadata, parent, child, changes)
        checked += 1
    assert checked >= 5
    assert len(paged) >= 20  # six flat columns of two files, commit after commit

