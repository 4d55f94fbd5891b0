"""The key index on its own: runs find exactly the positions holding each key; the index
reports files it does not cover (never added, another file at the same path, a damaged
or missing segment, a catalog of another table or unreadable) instead of answering for
them; a writer killed between writing a segment and its catalog leaves an index that is
used correctly; and the bound in bytes evicts the least recently used runs."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.stream.engine.keys import index_store, key_blocks, key_index
from meltwater.stream.engine.keys.index_store import IndexStore
from meltwater.stream.engine.keys.key_index import KeyIndex
from meltwater.stream.engine.keys.key_runs import find, indexable, sorted_run

IDENTITY = {"table": "t-1", "field_id": 1, "key_type": "int64"}


def _file(path: str, rows: int, size: int = 1000) -> DataFile:
    return DataFile(content=FileContent.DATA, file_path=path, file_format="PARQUET",
                    spec_id=0, partition=(), record_count=rows, file_size_in_bytes=size)


def _expected(keys: list[int | None], needles: list[int]) -> list[tuple[int, int]]:
    wanted = set(needles)
    return [(pos, key) for pos, key in enumerate(keys) if key in wanted]


def _found(run: pa.RecordBatch, needles: list[int]) -> list[tuple[int, int]]:
    positions, keys = find(run, pa.array(sorted(set(needles)), run.schema.field(0).type))
    return list(zip(positions.to_pylist(), keys.to_pylist(), strict=True))


@pytest.mark.parametrize("seed", range(5))
def test_a_run_finds_every_position_holding_a_key_and_no_other(seed):
    rng = random.Random(seed)
    keys = [None if rng.random() < 0.05 else rng.randrange(50) for _ in range(400)]
    run = sorted_run(pa.array(keys, pa.int64()))
    assert run.num_rows == sum(k is not None for k in keys)  # null keys left out
    needles = rng.sample(range(60), 12)
    assert _found(run, needles) == _expected(keys, needles)


def test_a_run_of_keys_already_in_order_is_them_with_their_positions():
    run = sorted_run(pa.array([1, 2, 2, 5], pa.int64()))
    assert run.column(0).to_pylist() == [1, 2, 2, 5]
    assert run.column(1).to_pylist() == [0, 1, 2, 3]
    assert _found(run, [2]) == [(1, 2), (2, 2)]


def test_runs_of_strings_and_timestamps():
    words = ["b", "a", "c", "a", "zz", ""]
    assert _found(sorted_run(pa.array(words)), []) == []
    positions, keys = find(sorted_run(pa.array(words)), pa.array(["", "a", "q"]))
    assert positions.to_pylist() == [1, 3, 5] and keys.to_pylist() == ["a", "a", ""]
    stamps = pa.array([3, 1, 2], pa.timestamp("us"))
    positions, _ = find(sorted_run(stamps), pa.array([2], pa.timestamp("us")))
    assert positions.to_pylist() == [2]
    assert not indexable(pa.float64()) and indexable(pa.int32()) and indexable(pa.string())


def _index(directory: Path, **kwargs) -> KeyIndex:
    return KeyIndex(IndexStore(directory, dict(IDENTITY)), **kwargs)


def _add(index: KeyIndex, files: dict[str, list[int]]) -> list[DataFile]:
    data = [_file(path, len(keys)) for path, keys in files.items()]
    index.add({f.file_path: (f, sorted_run(pa.array(keys, pa.int64())))
               for f, keys in zip(data, files.values(), strict=True)})
    return data


def _lookup(index: KeyIndex, files: list[DataFile], needles: list[int]):
    hits = index.lookup(files, pa.array(sorted(needles), pa.int64()))
    found = {path: list(zip(p.to_pylist(), k.to_pylist(), strict=True))
             for path, (p, k) in hits.found.items()}
    return found, [f.file_path for f in hits.missing]


def test_lookups_answer_for_the_files_added_and_report_the_rest(tmp_path):
    index = _index(tmp_path)
    a, b = _add(index, {"a.parquet": [5, 1, 5, 9], "b.parquet": [2, 9]})
    c = _file("c.parquet", 3)
    found, missing = _lookup(index, [a, b, c], [5, 9])
    assert found == {"a.parquet": [(0, 5), (2, 5), (3, 9)], "b.parquet": [(1, 9)]}
    assert missing == ["c.parquet"]
    # another process (a second command) reads the same answers from disk
    found_again, _ = _lookup(_index(tmp_path), [a, b], [5, 9])
    assert found_again == found
    # a file of another size or row count at a known path is not the file indexed
    assert _lookup(index, [_file("a.parquet", 4, size=999)], [5])[1] == ["a.parquet"]
    assert _lookup(index, [_file("a.parquet", 5)], [5])[1] == ["a.parquet"]


def test_added_runs_accumulate_and_sparse_segments_are_rewritten(tmp_path):
    index = _index(tmp_path)
    a, = _add(index, {"a.parquet": list(range(100))})
    b, = _add(index, {"b.parquet": [7, 7]})
    catalog = index.store.catalog()
    assert catalog.files["a.parquet"].segment != catalog.files["b.parquet"].segment
    found, missing = _lookup(index, [a, b], [7])
    assert found == {"a.parquet": [(7, 7)], "b.parquet": [(0, 7), (1, 7)]} and not missing
    assert sorted(p.name for p in tmp_path.glob("seg-*")) == sorted(catalog.segments)


def _descriptors_under(directory: Path) -> int:
    """How many of this process's open descriptors name a file under `directory`."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used, closed by now
            continue
        held += target.startswith(str(directory))
    return held


def test_segments_stay_few_however_many_commits_add_them(tmp_path):
    """Every commit adds a segment; a long-lived reader (a Spark worker) holds two
    descriptors for each it has searched. Their number must not grow with the history."""
    writer, reader = _index(tmp_path), _index(tmp_path)
    data: list[DataFile] = []
    most_segments = most_held = 0
    for commit in range(60):
        data += _add(writer, {f"f{commit}.parquet": [commit, commit + 1000]})
        found, missing = _lookup(reader, data, [commit, 1000])
        assert not missing
        assert (0, commit) in found[f"f{commit}.parquet"]
        assert (1, 1000) in found["f0.parquet"]
        assert sum(map(len, found.values())) == 2
        most_segments = max(most_segments, len(writer.store.catalog().segments))
        most_held = max(most_held, _descriptors_under(tmp_path))
    assert most_segments <= key_index.MAX_SEGMENTS
    assert most_held <= 2 * 2 * key_index.MAX_SEGMENTS  # two indexes, two a segment
    assert sorted(p.name for p in tmp_path.glob("seg-*")) \
        == sorted(writer.store.catalog().segments)
    # every run moved is still found, by a new reader from disk too
    everything = [*range(60), *range(1000, 1060)]
    found, missing = _lookup(_index(tmp_path), data, everything)
    assert not missing
    assert found == {f"f{c}.parquet": [(0, c), (1, c + 1000)] for c in range(60)}


def test_small_commits_never_rewrite_large_segments(tmp_path):
    """Merges go by size, as a size-tiered LSM tree's: a commit of a few keys does not copy
    the runs of large segments, however many there are."""
    index = _index(tmp_path)
    big = [f for n in range(key_index.MAX_SEGMENTS)
           for f in _add(index, {f"big{n}.parquet": list(range(n * 1000, n * 1000 + 1000))})]
    placed = {f.file_path: index.store.catalog().files[f.file_path].segment for f in big}
    small = [f for n in range(20) for f in _add(index, {f"small{n}.parquet": [-n - 1]})]
    catalog = index.store.catalog()
    assert {f.file_path: catalog.files[f.file_path].segment for f in big} == placed
    # the 20 small runs merge among themselves, into segments of sizes about doubling
    assert len(catalog.segments) <= key_index.MAX_SEGMENTS + 5
    found, missing = _lookup(index, big + small, [-20, -1, 0, 15999])
    assert not missing
    assert {path: hits for path, hits in found.items() if hits} == {
        "small19.parquet": [(0, -20)], "small0.parquet": [(0, -1)],
        "big0.parquet": [(0, 0)], "big15.parquet": [(999, 15999)]}


def test_a_damaged_segment_is_detected_and_its_files_are_re_indexed(tmp_path):
    index = _index(tmp_path)
    a, = _add(index, {"a.parquet": [3, 1, 2]})
    segment = tmp_path / index.store.catalog().files["a.parquet"].segment
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit in the middle: sizes still agree
    segment.write_bytes(bytes(data))
    fresh = _index(tmp_path)  # a new process: nothing verified yet
    found, missing = _lookup(fresh, [a], [2])
    assert found == {} and missing == ["a.parquet"] and fresh.damaged == 1
    _add(fresh, {"a.parquet": [3, 1, 2]})  # the reader re-indexes what was missing
    assert _lookup(_index(tmp_path), [a], [2]) == ({"a.parquet": [(2, 2)]}, [])
    segment.unlink(missing_ok=True)  # the damaged segment went with its last run
    assert len(list(tmp_path.glob("seg-*"))) == 1


def test_a_truncated_or_missing_segment_is_missing_not_wrong(tmp_path):
    a, = _add(_index(tmp_path), {"a.parquet": [4, 4]})
    segment = next(tmp_path.glob("seg-*"))
    segment.write_bytes(segment.read_bytes()[:-8])
    assert _lookup(_index(tmp_path), [a], [4]) == ({}, ["a.parquet"])
    segment.unlink()
    assert _lookup(_index(tmp_path), [a], [4]) == ({}, ["a.parquet"])


@pytest.mark.parametrize("catalog", [
    "{not json",
    json.dumps({"format": 99}),
    "identity of another table",
    "segment not listed",
])
def test_an_unusable_or_foreign_catalog_is_an_empty_index(tmp_path, catalog, caplog):
    a, = _add(_index(tmp_path), {"a.parquet": [1]})
    path = tmp_path / index_store.CATALOG
    data = json.loads(path.read_text())
    if catalog == "identity of another table":
        data["identity"]["table"] = "t-2"
        text = json.dumps(data)
    elif catalog == "segment not listed":
        data["segments"] = {}
        text = json.dumps(data)
    else:
        text = catalog
    path.write_text(text)
    assert _lookup(_index(tmp_path), [a], [1]) == ({}, ["a.parquet"])
    assert "catalog unusable" in caplog.text
    fresh = _index(tmp_path)
    _add(fresh, {"a.parquet": [1]})  # rebuilt from what the reader read again
    assert _lookup(_index(tmp_path), [a], [1]) == ({"a.parquet": [(0, 1)]}, [])


def test_the_bound_evicts_the_least_recently_used_runs(tmp_path):
    index = _index(tmp_path)
    a, = _add(index, {"a.parquet": list(range(1000))})
    size = index.store.catalog().nbytes
    index.max_bytes = int(size * 2.5)  # room for two runs of this size, not three
    b, = _add(index, {"b.parquet": list(range(1000))})
    assert set(index.store.catalog().files) == {"a.parquet", "b.parquet"}
    index.add({}, used=["a.parquet"])  # a used again: b is now the least recent
    c, = _add(index, {"c.parquet": list(range(1000))})
    assert set(index.store.catalog().files) == {"a.parquet", "c.parquet"}
    assert index.store.catalog().nbytes <= index.max_bytes
    assert _lookup(index, [a, b, c], [3])[1] == ["b.parquet"]


def test_files_no_reader_reaches_leave_the_index_after_a_while(tmp_path, monkeypatch):
    """A compaction replaces every file; the old ones are never asked about again and must
    not stay named (the catalog every update rewrites grew with the table's history). A
    file lookups keep finding stays, however many updates go by; it is marked used by the
    next update of the process that found it, not by the lookup (which writes nothing)."""
    monkeypatch.setattr(key_index, "STALE_GENERATIONS", 4)
    index = _index(tmp_path)
    kept, dropped = _add(index, {"kept.parquet": [1, 2], "dropped.parquet": [3]})
    for commit in range(10):
        assert _lookup(index, [kept], [2])[0] == {"kept.parquet": [(1, 2)]}
        _add(index, {f"new{commit}.parquet": [100 + commit]})
    names = set(index.store.catalog().files)
    assert "kept.parquet" in names and "dropped.parquet" not in names
    assert names == {"kept.parquet", *(f"new{c}.parquet" for c in range(6, 10))}
    assert _lookup(_index(tmp_path), [kept, dropped], [1, 3]) \
        == ({"kept.parquet": [(0, 1)]}, ["dropped.parquet"])
    # the runs that left are gone from disk too, once their segments were rewritten
    assert len(index.store.catalog().segments) <= 6


def test_a_writer_killed_before_its_catalog_leaves_the_old_index_usable(tmp_path):
    """kill -9 between the new segment's rename and the catalog's: the next reader sees
    the old catalog (the new file's run missing, read again), and the next writer removes
    the orphaned segment."""
    a, = _add(_index(tmp_path), {"a.parquet": [1, 2]})
    script = textwrap.dedent(f"""
        import os, signal
        import pyarrow as pa
        from meltwater.planner.spec.files import DataFile, FileContent
        from meltwater.stream.engine.keys import index_store
        from meltwater.stream.engine.keys.index_store import IndexStore
        from meltwater.stream.engine.keys.key_index import KeyIndex
        from meltwater.stream.engine.keys.key_runs import sorted_run

        replace = os.replace
        def dying(source, target):
            if str(target).endswith(index_store.CATALOG):
                os.kill(os.getpid(), signal.SIGKILL)
            replace(source, target)
        index_store.os.replace = dying
        index = KeyIndex(IndexStore(__import__("pathlib").Path({str(tmp_path)!r}),
                                    {IDENTITY!r}))
        b = DataFile(content=FileContent.DATA, file_path="b.parquet", file_format="PARQUET",
                     spec_id=0, partition=(), record_count=2, file_size_in_bytes=1000)
        index.add({{"b.parquet": (b, sorted_run(pa.array([2, 3], pa.int64())))}})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert len(list(tmp_path.glob("seg-*"))) == 2  # the new segment, named by no catalog
    b = _file("b.parquet", 2)
    assert _lookup(_index(tmp_path), [a, b], [2]) == ({"a.parquet": [(1, 2)]}, ["b.parquet"])
    _add(_index(tmp_path), {"b.parquet": [2, 3]})
    assert _lookup(_index(tmp_path), [a, b], [2]) == (
        {"a.parquet": [(1, 2)], "b.parquet": [(0, 2)]}, [])
    named = set(_index(tmp_path).store.catalog().segments)
    assert {p.name for p in tmp_path.glob("seg-*")} == named
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert os.environ.get("MELTWATER_KEY_INDEX_DIR")  # the suite keeps indexes apart


@pytest.mark.parametrize("seed", range(4))
def test_lookups_through_blocks_find_what_whole_runs_find(tmp_path, monkeypatch, seed):
    """Blocks of 4 rows, keys repeated across their edges: a reader that checks and searches
    only the candidate blocks (`key_blocks`) finds exactly what a search of the whole run
    finds, strings as integers."""
    monkeypatch.setattr(key_blocks, "BLOCK_ROWS", 4)
    rng = random.Random(seed)
    for kind, make in ((pa.int64(), lambda: rng.randrange(30)),
                       (pa.string(), lambda: f"k{rng.randrange(30):02d}")):
        directory = tmp_path / f"{seed}-{kind}"
        keys = [make() for _ in range(rng.randrange(1, 90))]
        file = _file("a.parquet", len(keys))
        store = IndexStore(directory, {**IDENTITY, "key_type": str(kind)})
        KeyIndex(store).add({"a.parquet": (file, sorted_run(pa.array(keys, kind)))})
        reader = KeyIndex(IndexStore(directory, {**IDENTITY, "key_type": str(kind)}))
        for _ in range(6):
            needles = sorted({make() for _ in range(rng.randrange(1, 8))})
            hits = reader.lookup([file], pa.array(needles, kind))
            positions, found = hits.found["a.parquet"]
            assert list(zip(positions.to_pylist(), found.to_pylist(), strict=True)) == \
                _expected(keys, needles)
        assert reader.damaged == 0


def _flip_in_column(segment: Path, column: int, row: int, width: int) -> None:
    """Flip one bit of one value of the first run's column, found through Arrow's own
    reading of the file (where the value's bytes are)."""
    data = pa.py_buffer(segment.read_bytes())
    run = pa.ipc.open_file(pa.BufferReader(data)).get_batch(0)
    at = run.column(column).buffers()[1].address - data.address + row * width
    raw = bytearray(data.to_pybytes())
    raw[at] ^= 0x01
    segment.write_bytes(bytes(raw))


@pytest.mark.parametrize(("column", "width"), [(0, 8), (1, 4)], ids=["key", "position"])
def test_a_damaged_block_is_found_when_searched_and_never_answers(tmp_path, column, width):
    """A flipped bit in the keys or positions of one block: a lookup that searches that
    block reports the file missing (never a wrong position), one that does not search it
    answers from the blocks it checked, and the damaged run is not copied on."""
    keys = list(range(0, 10 * key_blocks.BLOCK_ROWS))
    a, _ = _add(_index(tmp_path), {"a.parquet": keys,
                                   "c.parquet": list(range(30 * key_blocks.BLOCK_ROWS))})
    segment = tmp_path / _index(tmp_path).store.catalog().files["a.parquet"].segment
    damaged_row = 3 * key_blocks.BLOCK_ROWS + 7
    _flip_in_column(segment, column, damaged_row, width)
    fresh = _index(tmp_path)
    far = keys[8 * key_blocks.BLOCK_ROWS]
    assert _lookup(fresh, [a], [far]) == ({"a.parquet": [(far, far)]}, [])
    assert _lookup(fresh, [a], [far, keys[damaged_row]]) == ({}, ["a.parquet"])
    assert fresh.damaged == 1
    # c evicted, a's segment is sparse: a writer carrying a's run into its new segment
    # checks it whole first, finds the damage, and drops the run (to be read again)
    writer = _index(tmp_path)
    writer.add({}, used=["a.parquet"])
    writer.max_bytes = writer.store.catalog().nbytes // 2
    _add(writer, {"b.parquet": [1]})
    assert set(writer.store.catalog().files) == {"b.parquet"} and writer.damaged == 1


def test_a_damaged_blocks_file_is_an_absent_segment(tmp_path):
    a, = _add(_index(tmp_path), {"a.parquet": [1, 2, 3]})
    blocks = next(tmp_path.glob(f"{index_store.BLOCKS_PREFIX}*"))
    data = bytearray(blocks.read_bytes())
    data[len(data) // 3] ^= 0x10
    blocks.write_bytes(bytes(data))
    fresh = _index(tmp_path)
    assert _lookup(fresh, [a], [2]) == ({}, ["a.parquet"]) and fresh.damaged == 1
    blocks.unlink()
    assert _lookup(_index(tmp_path), [a], [2]) == ({}, ["a.parquet"])


def test_candidate_blocks_are_every_block_a_needle_can_be_in():
    """Fences [10, 20, 20, 20, 30] (blocks whose first keys they are): a needle below
    them all is in none; 20, which starts three blocks, can also end the block before."""
    fences = pa.array([10, 20, 20, 20, 30], pa.int64())
    assert key_blocks.candidate_blocks(fences, pa.array([5], pa.int64())) == []
    assert key_blocks.candidate_blocks(fences, pa.array([10], pa.int64())) == [0]
    assert key_blocks.candidate_blocks(fences, pa.array([15], pa.int64())) == [0]
    assert key_blocks.candidate_blocks(fences, pa.array([20], pa.int64())) == [0, 1, 2, 3]
    assert key_blocks.candidate_blocks(fences, pa.array([25, 99], pa.int64())) == [3, 4]
    assert key_blocks.candidate_blocks(fences, pa.array([5, 30], pa.int64())) == [3, 4]


@pytest.mark.parametrize("kind", [pa.int64(), pa.string(), pa.binary(), pa.date32()])
def test_block_sums_taken_in_memory_are_those_of_the_file_written(tmp_path, kind):
    """A run's CRC-32s are summed from the batch in memory; a reader sums what it reads
    from the file. They agree for runs of every kind of key, from sorted keys and from
    keys already in order that are a slice of a bigger array (offsets not from 0)."""
    values = {pa.int64(): list(range(1500)), pa.string(): [f"k{i:05d}" for i in range(1500)],
              pa.binary(): [b"%05d" % i for i in range(1500)], pa.date32(): list(range(1500))}
    whole = pa.array(values[kind], kind)
    runs = {"sorted.parquet": sorted_run(whole.take(pa.array(list(range(1499, -1, -1))))),
            "slice.parquet": sorted_run(whole.slice(300, 1100))}
    index = _index(tmp_path / "index")
    files = {path: _file(path, run.num_rows) for path, run in runs.items()}
    index.add({path: (files[path], run) for path, run in runs.items()})
    reader = _index(tmp_path / "index")
    needles = pa.array([values[kind][i] for i in (0, 300, 511, 512, 1399, 1499)], kind)
    hits = reader.lookup(list(files.values()), needles)
    assert reader.damaged == 0 and not hits.missing
    assert hits.found["sorted.parquet"][0].to_pylist() == [0, 100, 987, 988, 1199, 1499]
    assert hits.found["slice.parquet"][0].to_pylist() == [0, 211, 212, 1099]


def test_a_run_being_searched_outlives_its_segment_being_rewritten(tmp_path):
    """A reading thread holds a run (`covering`) while the process's writer carries it into
    a new segment and removes the old one: its search still reads the old file, whole and
    right (its descriptor stays open while the run is held)."""
    index = _index(tmp_path)
    keys = list(range(3 * key_blocks.BLOCK_ROWS))
    a, _ = _add(index, {"a.parquet": keys, "c.parquet": list(range(20_000))})
    coverage = index.covering([a])
    old = index.store.catalog().files["a.parquet"].segment
    index.add({}, used=["a.parquet"])
    index.max_bytes = index.store.catalog().nbytes // 2  # c leaves; a is carried on
    _add(index, {"b.parquet": [1]})
    assert index.store.catalog().files["a.parquet"].segment != old
    assert not (tmp_path / old).exists()
    positions, found = index.find(coverage, a, pa.array([7, 1000], pa.int64()))
    assert positions.to_pylist() == [7, 1000] and found.to_pylist() == [7, 1000]
    assert index.damaged == 0
