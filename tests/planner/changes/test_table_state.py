"""The table state change planning carries from commit to commit (planner/changes/table_state.py).

The module doc's example: S1 appends F1 and F2; S2 adds a global equality delete E; S3
appends F3 and removes F1. Each commit is applied as its delta, the state before it stays
as it was (tasks planned against it keep their meaning), and reverting a commit's delta
gives its parent's state back.
"""

from __future__ import annotations

from meltwater.planner.changes.table_state import CommitDelta, TableState
from meltwater.planner.scans.tasks import DataFileRef
from meltwater.planner.spec.files import DataFile, EntryStatus, FileContent, ManifestEntry
from meltwater.planner.spec.partitioning import PartitionField, PartitionSpec

UNPARTITIONED = PartitionSpec(0, ())
BY_PART = PartitionSpec(1, (PartitionField(2, 1000, "identity", "part"),))
SPECS = {0: UNPARTITIONED, 1: BY_PART}


def _file(path: str, content=FileContent.DATA, spec: int = 0, partition: tuple = (),
          **extra) -> DataFile:
    return DataFile(content, path, "PARQUET", spec, partition, 10, 100, **extra)


def _entry(file: DataFile, status: EntryStatus, snapshot: int, seq: int) -> ManifestEntry:
    return ManifestEntry(status, snapshot, seq, seq, file)


F1, F2, F3 = _file("f1"), _file("f2"), _file("f3")
E = _file("e", FileContent.EQUALITY_DELETES, equality_ids=(1,))
P2 = _file("p2", FileContent.POSITION_DELETES, referenced_data_file="f2")


def test_commits_carry_the_state_and_leave_the_one_before_as_it_was():
    s1 = TableState.of(1, [_entry(F1, EntryStatus.ADDED, 1, 1),
                           _entry(F2, EntryStatus.ADDED, 1, 1)], SPECS)
    s2 = s1.advanced(2, CommitDelta.of([_entry(E, EntryStatus.ADDED, 2, 2)]))
    s3 = s2.advanced(3, CommitDelta.of([_entry(F3, EntryStatus.ADDED, 3, 3),
                                        _entry(F1, EntryStatus.DELETED, 3, 1),
                                        _entry(P2, EntryStatus.ADDED, 3, 3)]))
    assert sorted(s1.data) == ["f1", "f2"] and s1.equality_set is None
    assert sorted(s2.data) == ["f1", "f2"] and [r.file.file_path for r in
                                                 s2.equality_set.global_refs] == ["e"]
    assert sorted(s3.data) == ["f2", "f3"]
    assert s3.data["f3"].snapshot_id == 3  # which commit added a file: net attribution
    # position deletes per file; the equality delete reaches the older files only
    assert [r.file.file_path for r in s3.positional_for(s3.data["f2"])] == ["p2"]
    assert s2.positional_for(s2.data["f2"]) == ()
    assert sorted(r.file.file_path for r in s3.reached_by(s3.equality["e", None])) == ["f2"]
    # reverting S3's delta on the state after it is the state before it
    back = s3.reverted(2, CommitDelta.of([_entry(F3, EntryStatus.ADDED, 3, 3),
                                          _entry(F1, EntryStatus.DELETED, 3, 1),
                                          _entry(P2, EntryStatus.ADDED, 3, 3)]))
    assert sorted(back.data) == sorted(s2.data) and not back.positional


def test_a_scoped_equality_delete_reaches_its_partition_only():
    a, b = _file("a", spec=1, partition=("x",)), _file("b", spec=1, partition=("y",))
    scoped = _file("e", FileContent.EQUALITY_DELETES, spec=1, partition=("x",),
                   equality_ids=(1,))
    state = TableState.of(2, [_entry(a, EntryStatus.ADDED, 1, 1),
                              _entry(b, EntryStatus.ADDED, 1, 1),
                              _entry(scoped, EntryStatus.ADDED, 2, 2)], SPECS)
    assert [r.file.file_path for r in state.reached_by(state.equality["e", None])] == ["a"]
    assert state.equality_set.scoped_refs[0].file.file_path == "e"
    newer = DataFileRef(_file("n", spec=1, partition=("x",)), 5)
    assert not state.equality_set.applies_to(newer.sequence_number, newer.file)
