"""What tells delete files apart, and when a change task may bring rows back."""

from __future__ import annotations

from meltwater.planner.changes.change_tasks import ChangeCommit, DeletedRowsTask
from meltwater.planner.scans.tasks import DeleteFileRef
from meltwater.planner.spec.files import DataFile, FileContent

COMMIT = ChangeCommit(0, 1, 1, 0, "delete")
DATA = DataFile(FileContent.DATA, "d.parquet", "PARQUET", 0, (), 10, 100)


def dv(offset: int, referenced: str = "d.parquet") -> DeleteFileRef:
    """A deletion vector at `offset` in the one Puffin file every DV here shares."""
    return DeleteFileRef(DataFile(FileContent.POSITION_DELETES, "dvs.puffin", "PUFFIN", 0, (), 1,
                                  500, referenced_data_file=referenced, content_offset=offset,
                                  content_size_in_bytes=40), 2)


def test_deletion_vectors_sharing_a_puffin_file_have_different_keys():
    first, second = dv(4), dv(44, "e.parquet")
    assert first.key != second.key
    assert first.key == dv(4).key == first.file.key == ("dvs.puffin", 4)
    plain = DataFile(FileContent.POSITION_DELETES, "p.parquet", "PARQUET", 0, (), 1, 10)
    assert plain.key == ("p.parquet", None)


def test_a_task_may_undelete_only_when_a_delete_stops_applying():
    old, new = dv(4), dv(44)
    assert not DeletedRowsTask(COMMIT, DATA, 1, (old,), (old, new), (new,)).may_undelete
    assert DeletedRowsTask(COMMIT, DATA, 1, (old,), (new,), (new,)).may_undelete
    assert not DeletedRowsTask(COMMIT, DATA, 1, (), (new,), (new,)).may_undelete
