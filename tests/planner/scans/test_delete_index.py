"""The spec's delete-matching rules, case by case, and against what Iceberg Java applied."""

from __future__ import annotations

from meltwater.planner.scans.delete_index import DeleteFileIndex
from meltwater.planner.scans.tasks import DeleteFileRef
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.partitioning import PartitionField, PartitionSpec
from meltwater.planner.spec.reserved_field_ids import DELETE_FILE_PATH_ID
from meltwater.planner.spec.types import INT, STRING

UNPARTITIONED = PartitionSpec(0, ())
BY_PART = PartitionSpec(1, (PartitionField(2, 1000, "identity", "part"),))
SPECS = {0: UNPARTITIONED, 1: BY_PART}
TYPES = {1: INT, 2: STRING}


def data(path: str, part: str = "a", spec: int = 1, **metrics) -> DataFile:
    return DataFile(FileContent.DATA, path, "PARQUET", spec, (part,) if spec else (), 10, 100,
                    **metrics)


def pos(path: str, part: str = "a", spec: int = 1, **kw) -> DataFile:
    return DataFile(FileContent.POSITION_DELETES, path, "PARQUET", spec,
                    (part,) if spec else (), 1, 10, **kw)


def eq(path: str, part: str | None = "a", ids=(1,), **metrics) -> DataFile:
    spec = 1 if part is not None else 0
    return DataFile(FileContent.EQUALITY_DELETES, path, "PARQUET", spec,
                    (part,) if part is not None else (), 1, 10, equality_ids=tuple(ids),
                    **metrics)


def paths(refs) -> list[str]:
    return sorted(r.file.file_path for r in refs)


def applying(idx: DeleteFileIndex, data_seq: int, data_file: DataFile):
    """The delete files a scan task of the data file applies: its position deletes and DVs,
    and those of the equality deletes every task shares that reach it."""
    equality = idx.equality_set()
    shared = equality.applying_to(data_seq, data_file) if equality is not None else ()
    return idx.positional_for(data_seq, data_file) + shared


def index(*refs: tuple[DataFile, int]) -> DeleteFileIndex:
    return DeleteFileIndex(SPECS, (DeleteFileRef(f, s) for f, s in refs))


def test_position_deletes_apply_to_older_and_same_commit_data_in_their_partition():
    idx = index((pos("p5"), 5), (pos("p5b", part="b"), 5))
    assert paths(applying(idx, 4, data("d"))) == ["p5"]
    assert paths(applying(idx, 5, data("d"))) == ["p5"], "same commit applies"
    assert paths(applying(idx, 6, data("d"))) == []
    assert paths(applying(idx, 4, data("d", part="b"))) == ["p5b"]


def test_equality_deletes_apply_only_to_strictly_older_data():
    idx = index((eq("e5"), 5))
    assert paths(applying(idx, 4, data("d"))) == ["e5"]
    assert paths(applying(idx, 5, data("d"))) == [], "never to its own commit's data"
    assert paths(applying(idx, 4, data("d", part="b"))) == []


def test_unpartitioned_equality_deletes_are_global():
    idx = index((eq("g", part=None), 7))
    assert paths(applying(idx, 3, data("d", part="z"))) == ["g"]
    assert paths(applying(idx, 3, data("d0", spec=0))) == ["g"]
    assert paths(applying(idx, 7, data("d", part="z"))) == []


def test_partition_spec_must_match_not_only_the_values():
    other_spec = PartitionSpec(2, (PartitionField(2, 1001, "identity", "part2"),))
    idx = DeleteFileIndex({**SPECS, 2: other_spec}, [DeleteFileRef(pos("p"), 5)])
    same_values_other_spec = DataFile(FileContent.DATA, "d", "PARQUET", 2, ("a",), 1, 1)
    assert applying(idx, 1, same_values_other_spec) == ()


def test_file_scoped_position_deletes_apply_to_their_file_only():
    scoped = pos("p", lower_bounds={DELETE_FILE_PATH_ID: "d1"},
                 upper_bounds={DELETE_FILE_PATH_ID: "d1"})
    referenced = pos("r", referenced_data_file="d2")
    idx = index((scoped, 5), (referenced, 5))
    assert paths(applying(idx, 1, data("d1"))) == ["p"]
    assert paths(applying(idx, 1, data("d2"))) == ["r"]
    assert paths(applying(idx, 1, data("d3"))) == []


def test_partition_scoped_position_deletes_are_pruned_by_path_bounds():
    ranged = pos("p", lower_bounds={DELETE_FILE_PATH_ID: "d2"},
                 upper_bounds={DELETE_FILE_PATH_ID: "d5"})
    idx = index((ranged, 5))
    assert paths(applying(idx, 1, data("d3"))) == ["p"]
    assert paths(applying(idx, 1, data("d1"))) == []
    assert paths(applying(idx, 1, data("d9"))) == []


def test_deletion_vectors_supersede_position_delete_files():
    dv_old = DataFile(FileContent.POSITION_DELETES, "old.puffin", "PUFFIN", 1, ("a",), 1, 10,
                      referenced_data_file="d", content_offset=4, content_size_in_bytes=40)
    dv_new = DataFile(FileContent.POSITION_DELETES, "new.puffin", "PUFFIN", 1, ("a",), 2, 10,
                      referenced_data_file="d", content_offset=4, content_size_in_bytes=40)
    idx = index((pos("p3"), 3), (dv_old, 4), (dv_new, 6), (eq("e7"), 7))
    assert paths(applying(idx, 1, data("d"))) == ["e7", "new.puffin"]
    assert paths(applying(idx, 1, data("other"))) == ["e7", "p3"]


def test_a_nan_partition_finds_its_deletes():
    """Iceberg Java's partition maps compare NaN equal to NaN (Float.compare), so a delete
    file of partition x=NaN applies to that partition's data files, though the two NaNs were
    decoded from different manifests and `nan != nan` in Python."""
    by_float = PartitionSpec(2, (PartitionField(3, 1001, "identity", "x"),))
    specs = {2: by_float}

    def file(content: FileContent, path: str) -> DataFile:
        return DataFile(content, path, "PARQUET", 2, (float("nan"),), 1, 10,
                        equality_ids=(3,) if content == FileContent.EQUALITY_DELETES else None)


    idx = DeleteFileIndex(specs,
                          [DeleteFileRef(file(FileContent.POSITION_DELETES, "p"), 5),
                           DeleteFileRef(file(FileContent.EQUALITY_DELETES, "e"), 5)])
    assert paths(applying(idx, 4, file(FileContent.DATA, "d"))) == ["e", "p"]
