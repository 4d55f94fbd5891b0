"""Planning reads manifests on threads only when the reads wait on a network."""

from __future__ import annotations

import threading

from meltwater.planner.scans.scan import TableScan
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.planner.table.manifests import ManifestCache
from meltwater.planner.table.table_loading import load_table


class RemoteLookingIO(PyArrowFileIO):
    """Local files, but a FileIO that says they are not local; records reading threads."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def is_local(self, _location: str) -> bool:
        return False

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        self.threads.add(threading.current_thread().name)
        return super().read_bytes(location, offset, length)


def _plan(table, filter_text: str = "id > 3"):
    scan = TableScan(table, row_filter=filter_text, workers=4, cache=ManifestCache())
    return [(t.data_file.file_path, t.deletes, t.residual) for t in scan.plan_files()]


def test_remote_manifests_are_read_on_threads_with_the_same_plan(corpus):
    for name in ("random_mix", "mor_partitioned", "v3_deletion_vectors"):
        location = corpus.scenarios[name].location
        local = load_table(location)
        remote_io = RemoteLookingIO()
        remote = load_table(location, remote_io)
        assert _plan(remote) == _plan(local), name
        assert len(remote.metadata.snapshots) and any(
            t != threading.main_thread().name for t in remote_io.threads), name
    assert PyArrowFileIO().is_local(location) and PyArrowFileIO().is_local("file://" + location)
