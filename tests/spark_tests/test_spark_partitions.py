"""Every kind of partition the `meltwater` source makes pickles whole: Spark ships each one
from the driver to an executor, which has nothing else to read it by."""

from __future__ import annotations

import pickle

from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    CommitChanges,
    DeletedRowsTask,
)
from meltwater.planner.changes.commit_units import CommitSplit
from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.expressions.tree import Op, Predicate, bind
from meltwater.planner.scans.tasks import DeleteFileRef, FileScanTask
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.types import LONG, STRING, NestedField, Schema
from meltwater.stream.engine.changes.change_schema import ChangeOptions
from meltwater.stream.spark.partitions import ChangePartition, ReadPartition, SnapshotPartition

SCHEMA = Schema((NestedField(1, "id", LONG, True), NestedField(2, "name", STRING)), 0, (1,))
FILTER = bind(Predicate(Op.GT, "id", (3,)), SCHEMA)
DATA = DataFile(FileContent.DATA, "d.parquet", "PARQUET", 0, (), 10, 100,
                lower_bounds={1: 1}, upper_bounds={1: 9}, split_offsets=(4,))
DV = DeleteFileRef(DataFile(FileContent.POSITION_DELETES, "dvs.puffin", "PUFFIN", 0, (), 1,
                            50, referenced_data_file="d.parquet", content_offset=4,
                            content_size_in_bytes=40), 2)
COMMIT = ChangeCommit(0, 7, 2, 1_700_000_000_000, "overwrite")
CHANGES = CommitChanges(COMMIT, (DeletedRowsTask(COMMIT, DATA, 1, (), (DV,), (DV,)),
                                 AddedRowsTask(COMMIT, DATA, 2)))
SPLIT = CommitSplit(CHANGES.tasks, ((0,), (1,)), (0, 0), (0,), False)


def examples() -> list[ReadPartition]:
    """One partition of each kind, every optional part filled in."""
    pairing = ChangeOptions(compute_updates=True, identifier_field_ids=(1,))
    return [
        SnapshotPartition((FileScanTask(DATA, 1, (DV,), FILTER, 4, 50),), SCHEMA, SCHEMA),
        ChangePartition((CommitPart(CHANGES, SCHEMA, 0, 2),), ChangeOptions(), FILTER),
        ChangePartition((CommitPart(CommitChanges(COMMIT, CHANGES.tasks[:1]), SCHEMA, 0, 2,
                                    SPLIT),), pairing),
        ChangePartition((CommitPart(CHANGES, SCHEMA, 0, 2),) * 2, ChangeOptions(net=True)),
    ]


def test_every_partition_kind_pickles_whole():
    partitions = examples()
    kinds = {type(p) for p in partitions}
    assert kinds == set(ReadPartition.__subclasses__()), "add the new kind to examples()"
    for partition in partitions:
        shipped = pickle.loads(pickle.dumps(partition))
        assert shipped == partition and type(shipped) is type(partition)
        assert shipped.open_io() is not None
