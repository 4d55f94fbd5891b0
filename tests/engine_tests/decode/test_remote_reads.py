"""Footers and position delete files are read several at a time from object stores
(`meltwater.stream.engine.decode.remote_reads`), one after another from local disk."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from engine_tests.helpers import F, position_deletes, task, write_parquet
from meltwater.planner.spec.types import NestedField, PrimitiveType, Schema
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.decode.remote_reads import (
    REMOTE_READS,
    each_in_order,
    read_each,
    waits_on_network,
)
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.scans import bulk_groups

ID_NAME = Schema((NestedField(1, "id", PrimitiveType("long")),
                  NestedField(2, "name", PrimitiveType("string"))))
POOL = "meltwater-remote-read"


class _SeemsRemote(PyArrowFileIO):
    """Local files, taken for an object store's (unless `remote` is False); records the
    thread of every resolve."""

    def __init__(self, remote: bool = True) -> None:
        super().__init__()
        self.remote = remote
        self.threads: list[str] = []

    def is_local(self, location: str) -> bool:
        return not self.remote and bool(location)

    def resolve(self, location: str):
        self.threads.append(threading.current_thread().name)
        return super().resolve(location)


def test_read_each_keeps_the_order_and_runs_the_reads_at_once() -> None:
    # every read waits until REMOTE_READS of them are waiting: it passes only concurrently
    barrier = threading.Barrier(REMOTE_READS, timeout=30)

    def read(item: int) -> int:
        barrier.wait()
        return item * 10

    items = list(range(REMOTE_READS * 3))
    assert read_each(items, read, concurrently=True) == [i * 10 for i in items]
    assert read_each([1, 2], lambda _: threading.current_thread().name,
                     concurrently=False) == [threading.current_thread().name] * 2


def test_read_each_raises_what_a_read_raised() -> None:
    def read(item: int) -> int:
        if item == 3:
            raise OSError("store gone")
        return item

    with pytest.raises(OSError, match="store gone"):
        read_each(list(range(6)), read, concurrently=True)


def test_only_locations_off_this_machine_wait_on_the_network(tmp_path) -> None:
    assert not waits_on_network(PyArrowFileIO(), str(tmp_path / "x.parquet"))
    assert waits_on_network(_SeemsRemote(), str(tmp_path / "x.parquet"))
    assert not waits_on_network(object(), "s3://bucket/x.parquet")  # cannot tell


def _files(tmp_path, count: int):
    schema = pa.schema([F("id", pa.int64(), 1), F("name", pa.string(), 2)])
    return [write_parquet(tmp_path / f"d{i}.parquet",
                          pa.table({"id": [i, i + 100], "name": ["a", "b"]}, schema=schema))
            for i in range(count)]


def test_footers_of_remote_files_are_read_on_the_pool_and_group_alike(tmp_path) -> None:
    tasks = [task(f) for f in _files(tmp_path, 5)]
    local_groups, local_rest = bulk_groups.partition(tasks, ID_NAME, PyArrowFileIO())
    remote = _SeemsRemote()
    groups, rest = bulk_groups.partition(tasks, ID_NAME, remote)
    assert rest == local_rest == []
    assert ([t for g in groups for t in g.tasks] == [t for g in local_groups for t in g.tasks]
            == tasks)
    assert len(remote.threads) == 5 and all(n.startswith(POOL) for n in remote.threads)
    local = _SeemsRemote(remote=False)
    bulk_groups.partition(tasks, ID_NAME, local)
    assert local.threads == [threading.current_thread().name] * 5


def test_remote_position_delete_files_are_read_ahead_on_the_pool(tmp_path) -> None:
    files = _files(tmp_path, 4)
    deletes = [position_deletes(tmp_path / f"pos{i}.parquet", [(f.file_path, 1)])
               for i, f in enumerate(files)]
    remote = _SeemsRemote()
    loader = DeleteLoader(remote)
    loader.read_positions(deletes)
    assert loader.reads == 4
    assert remote.threads and all(n.startswith(POOL) for n in remote.threads)
    for data, pos in zip(files, deletes, strict=True):
        assert loader.positions(pos, data.file_path).to_pylist() == [1]
    assert loader.reads == 4  # all from the cache


def test_decoding_threads_follow_the_environment(monkeypatch):
    """A Spark executor of one core on a shared machine decodes with one thread when told
    (`spark.executorEnv.MELTWATER_DECODING_THREADS`); anything but a positive count is
    ignored."""
    from meltwater.stream.engine.decode.remote_reads import decoding_threads

    monkeypatch.setenv("MELTWATER_DECODING_THREADS", "1")
    assert decoding_threads() == 1
    seen: list[str] = []
    assert list(each_in_order([1, 2, 3], lambda i: seen.append(threading.current_thread().name)
                              or i)) == [1, 2, 3]
    assert set(seen) == {threading.main_thread().name}  # read where taken, no pool
    for ignored in ("0", "-3", "many", ""):
        monkeypatch.setenv("MELTWATER_DECODING_THREADS", ignored)
        assert decoding_threads() == max(2, os.cpu_count() or 2)
