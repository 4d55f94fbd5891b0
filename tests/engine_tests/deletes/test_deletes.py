"""Delete files: position masks, deletion vectors, null-safe equality key sets, caching."""

from __future__ import annotations

import dataclasses
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from engine_tests.helpers import (
    F,
    dv_blob,
    equality_deletes,
    portable_roaring64,
    position_deletes,
    write_puffin,
)
from engine_tests.iceberg_tasks import plan_tasks, puffin_blobs
from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.deletes.delete_files import (
    _read_parquet_positions,
    read_deletion_vector,
)
from meltwater.stream.engine.deletes.equality_lookup import equality_lookup
from meltwater.stream.engine.deletes.loader import DeleteLoader, DeletionMask
from meltwater.stream.errors import CorruptDeleteFileError

IO = PyArrowFileIO()


def test_mask_marks_exactly_the_deleted_positions_of_each_batch() -> None:
    rng = random.Random(7)
    deleted = sorted(rng.sample(range(10_000), 700))
    mask = DeletionMask(pa.array(deleted, pa.int64()))
    gone = set(deleted)
    for first, n in [(0, 1000), (1000, 4096), (5096, 4904), (9999, 1)]:
        keep = mask.keep(first, n)
        expected = [first + i not in gone for i in range(n)]
        assert (keep.to_pylist() if keep is not None else [True] * n) == expected


def test_mask_is_none_for_a_batch_without_deletes() -> None:
    mask = DeletionMask(pa.array([5, 500], pa.int64()))
    assert mask.keep(6, 400) is None
    assert mask.keep(501, 10) is None
    assert mask.keep(0, 6).to_pylist() == [True] * 5 + [False]


def test_position_file_for_several_data_files_is_read_once(tmp_path) -> None:
    deletes = position_deletes(tmp_path / "d.parquet",
                               [("a", 9), ("b", 1), ("a", 2), ("a", 5), ("b", 0)])
    loader = DeleteLoader(IO)
    assert loader.positions(deletes, "a").to_pylist() == [2, 5, 9]
    assert loader.positions(deletes, "b").to_pylist() == [0, 1]
    assert loader.positions(deletes, "c").to_pylist() == []
    assert loader.reads == 1


def test_masks_merge_several_delete_files(tmp_path) -> None:
    one = position_deletes(tmp_path / "1.parquet", [("a", 3), ("a", 7)])
    two = position_deletes(tmp_path / "2.parquet", [("a", 1), ("a", 7)])
    mask = DeleteLoader(IO).deletion_mask([one, two], "a")
    assert mask.keep(0, 9).to_pylist() == [i not in (1, 3, 7) for i in range(9)]
    assert DeleteLoader(IO).deletion_mask([one], "zzz") is None


def test_cache_is_bounded_and_evicts_least_recently_used(tmp_path) -> None:
    files = [position_deletes(tmp_path / f"{i}.parquet", [("a", i)]) for i in range(3)]
    loader = DeleteLoader(IO, max_cache_bytes=1)
    for file in files:
        loader.positions(file, "a")
    loader.positions(files[2], "a")  # still cached: the newest entry is always kept
    assert loader.reads == 3
    loader.positions(files[0], "a")
    assert loader.reads == 4


POSITION_LAYOUTS = {
    "one data file": [("a", 1), ("a", 4), ("a", 9)],
    "one data file, positions unsorted": [("a", 9), ("a", 1), ("a", 4)],
    "sorted by path": [("a", 2), ("a", 3), ("b", 0), ("c", 7), ("c", 8)],
    "not sorted by path": [("b", 1), ("a", 2), ("b", 0)],
}


@pytest.mark.parametrize("layout", POSITION_LAYOUTS)
@pytest.mark.parametrize("with_ids", [True, False], ids=["field ids", "names only"])
@pytest.mark.parametrize("row_group_size", [None, 2], ids=["one row group", "row groups of 2"])
def test_position_deletes_read_alike_in_every_layout(tmp_path, layout, with_ids,
                                                     row_group_size) -> None:
    """The fast Parquet path (dictionary-encoded `file_path`, one row group or several,
    each with its own dictionary) and the general reader it falls back to agree."""
    entries = POSITION_LAYOUTS[layout]
    fields = ([F("file_path", pa.string(), 2147483546, False),
               F("pos", pa.int64(), 2147483545, False)] if with_ids
              else [pa.field("file_path", pa.string(), False), pa.field("pos", pa.int64(), False)])
    table = pa.Table.from_pylist([{"file_path": f, "pos": p} for f, p in entries],
                                 schema=pa.schema(fields))
    path = tmp_path / "pos.parquet"
    pq.write_table(table, path, row_group_size=row_group_size)
    file = DataFile(FileContent.POSITION_DELETES, str(path), "PARQUET", 0, (), len(entries),
                    path.stat().st_size)
    loader = DeleteLoader(IO)
    for data_file in [*sorted({f for f, _ in entries}), "elsewhere"]:
        expected = sorted(p for f, p in entries if f == data_file)
        assert loader.positions(file, data_file).to_pylist() == expected
    assert loader.reads == 1
    fast = _read_parquet_positions(IO, file)  # None: the general reader was needed
    assert (fast is None) == (layout == "not sorted by path")


def test_file_scoped_delete_file_is_read_by_its_positions_alone(tmp_path) -> None:
    """Scoped by `referenced_data_file` or by equal `file_path` bounds (as Iceberg Java
    writes them), a delete file needs only its `pos` column read."""
    written = position_deletes(tmp_path / "pos.parquet", [("a", 9), ("a", 2), ("a", 5)])
    by_reference = dataclasses.replace(written, referenced_data_file="a")
    by_bounds = dataclasses.replace(written, lower_bounds={2147483546: "a"},
                                    upper_bounds={2147483546: "a"})
    for file in (by_reference, by_bounds):
        found = _read_parquet_positions(IO, file)
        assert {k: v.to_pylist() for k, v in found.items()} == {"a": [2, 5, 9]}
        assert DeleteLoader(IO).positions(file, "a").to_pylist() == [2, 5, 9]


def test_position_delete_file_with_null_positions_is_corrupt(tmp_path) -> None:
    schema = pa.schema([F("file_path", pa.string(), 2147483546),
                        F("pos", pa.int64(), 2147483545)])
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"file_path": ["a", "a"], "pos": [1, None]}, schema=schema), path)
    file = DataFile(FileContent.POSITION_DELETES, str(path), "PARQUET", 0, (), 2,
                    path.stat().st_size)
    with pytest.raises(CorruptDeleteFileError, match=r"nulls\.parquet.*null"):
        DeleteLoader(IO).positions(file, "a")


def test_unreadable_position_delete_file_names_the_file(tmp_path) -> None:
    bogus = tmp_path / "broken.parquet"
    bogus.write_bytes(b"not parquet at all")
    file = DataFile(FileContent.POSITION_DELETES, str(bogus), "PARQUET", 0, (), 1, 18)
    with pytest.raises(CorruptDeleteFileError, match=r"broken\.parquet"):
        DeleteLoader(IO).positions(file, "a")


def test_portable_layout_is_what_bitmap64_reads() -> None:
    positions = [0, 3, 70_000, (1 << 32) + 1, (5 << 32) + 123_456]
    assert list(BitMap64.deserialize(portable_roaring64(positions))) == positions


def test_deletion_vector_with_positions_beyond_32_bits(tmp_path) -> None:
    positions = [1, 2, 65_536, (1 << 32) + 7]
    dv = write_puffin(tmp_path / "dv.puffin", dv_blob(positions), "data.parquet", 4)
    assert read_deletion_vector(IO, dv).to_pylist() == positions
    loader = DeleteLoader(IO)
    assert loader.positions(dv, "data.parquet").to_pylist() == positions
    assert loader.positions(dv, "other.parquet").to_pylist() == []


@pytest.mark.parametrize(("damage", "message"), [
    (lambda b: b[:4] + b"\x00" + b[5:], "magic"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC"),
    (lambda b: b"\x00\x00\x00\x01" + b[4:], "length prefix"),
])
def test_corrupt_deletion_vectors_are_refused(tmp_path, damage, message) -> None:
    blob = damage(dv_blob([1, 2, 3]))
    dv = write_puffin(tmp_path / "dv.puffin", blob, "data.parquet", 3)
    with pytest.raises(CorruptDeleteFileError, match=message) as error:
        read_deletion_vector(IO, dv)
    assert "dv.puffin" in str(error.value)


def test_truncated_and_miscounted_deletion_vectors_are_refused(tmp_path) -> None:
    blob = dv_blob([1, 2, 3])
    (tmp_path / "short.puffin").write_bytes(b"PFA1" + blob[:10])
    short = DataFile(FileContent.POSITION_DELETES, str(tmp_path / "short.puffin"), "PUFFIN", 0,
                     (), 3, 14, referenced_data_file="d", content_offset=4,
                     content_size_in_bytes=len(blob))
    with pytest.raises(CorruptDeleteFileError, match="truncated"):
        read_deletion_vector(IO, short)
    wrong_count = write_puffin(tmp_path / "dv.puffin", blob, "d", 5)
    with pytest.raises(CorruptDeleteFileError, match="manifest says 5"):
        read_deletion_vector(IO, wrong_count)


def test_real_deletion_vectors_match_their_puffin_footer(corpus) -> None:
    scenario = corpus.scenarios["v3_deletion_vectors"]
    checked = 0
    for snapshot in scenario.snapshots:
        if snapshot.expired:
            continue
        for task in plan_tasks(scenario.metadata_location, snapshot.snapshot_id):
            for ref in task.deletes:
                if not ref.file.is_deletion_vector:
                    continue
                blob = next(b for b in puffin_blobs(ref.file.file_path)
                            if b["offset"] == ref.file.content_offset)
                positions = read_deletion_vector(IO, ref.file).to_pylist()
                assert len(positions) == int(blob["properties"]["cardinality"])
                assert positions == sorted(set(positions))
                assert positions[-1] < task.data_file.record_count
                checked += 1
    assert checked >= 4


def _batch(ids: list, names: list) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "name": pa.array(names)})


def _deleted(files: list[DataFile], key_types: dict, batch: pa.RecordBatch) -> list[bool]:
    """Which rows of `batch`, of an older data file, the equality delete files delete, as
    a scan applies them (`equality_lookup`)."""
    older = DataFile(FileContent.DATA, "d.parquet", "PARQUET", 0, (), batch.num_rows, 1)
    refs = tuple(DeleteFileRef(file, 2) for file in files)
    paths = {1: ("id",), 2: ("name",)}
    lookup = equality_lookup(EqualityDeleteSet(refs), DeleteLoader(IO), key_types,
                             {fid: paths[fid] for fid in key_types})
    found = lookup.deleted(batch, older, 1)
    return [False] * batch.num_rows if found is None else found.to_pylist()


def test_equality_keys_match_nulls_to_nulls(tmp_path) -> None:
    schema = pa.schema([F("name", pa.string(), 2)])
    file = equality_deletes(tmp_path / "eq.parquet",
                            pa.table({"name": [None, "x"]}, schema=schema), (2,))
    batch = _batch([1, 2, 3, 4], ["x", None, "y", "x"])
    assert _deleted([file], {2: pa.string()}, batch) == [True, True, False, True]


def test_multi_column_keys_are_null_safe_and_whole(tmp_path) -> None:
    schema = pa.schema([F("id", pa.int32(), 1), F("name", pa.string(), 2)])
    keys = pa.table({"id": [1, 2, None, 1], "name": ["a", None, "c", "a"]}, schema=schema)
    file = equality_deletes(tmp_path / "eq.parquet", keys, (1, 2))
    loader = DeleteLoader(IO)
    assert loader.equality_keys(file).num_rows == 4  # as written: every use dedupes
    batch = _batch([1, 1, 2, 2, None, None, 3], ["a", "b", None, "a", "c", None, "a"])
    assert _deleted([file], {1: pa.int64(), 2: pa.string()}, batch) == [
        True, False, True, False, True, False, False]


def test_files_with_different_equality_ids_are_separate_key_sets(tmp_path) -> None:
    by_id = equality_deletes(tmp_path / "1.parquet",
                             pa.table({"id": [5]}, schema=pa.schema([F("id", pa.int64(), 1)])),
                             (1,))
    by_name = equality_deletes(
        tmp_path / "2.parquet",
        pa.table({"name": ["z"]}, schema=pa.schema([F("name", pa.string(), 2)])), (2,))
    batch = _batch([5, 6, 7], ["a", "z", "b"])
    assert _deleted([by_id, by_name], {1: pa.int64(), 2: pa.string()}, batch) == [
        True, True, False]


def test_equality_file_without_the_key_column_is_corrupt(tmp_path) -> None:
    file = equality_deletes(tmp_path / "eq.parquet",
                            pa.table({"id": [5]}, schema=pa.schema([F("id", pa.int64(), 1)])),
                            (3,))
    with pytest.raises(CorruptDeleteFileError, match="field id 3"):
        DeleteLoader(IO).equality_keys(file)
