"""Change tasks: what changed in one commit, in Iceberg's own vocabulary.

Incremental planning turns the commits of a range into these tasks; the engine
(`meltwater.stream.engine.reconstruction`) turns each into change rows. Each task carries every
delete file the engine needs, so reading never consults table metadata:

- `AddedRowsTask`: a data file the commit added. Its rows are INSERTs, except rows removed
  by position deletes or DVs of the same commit (`deletes`), which apply to same-sequence
  data; equality deletes of the same commit never apply to it.
- `DeletedDataFileTask`: a data file the commit removed (copy-on-write rewrite, overwrite,
  metadata delete). Its rows that were live before the commit, the file minus
  `existing_deletes`, are DELETEs.
- `DeletedRowsTask`: an older data file whose applicable deletes changed in the commit. A
  row is DELETEd when it was live under `deletes_before` and is not under `deletes_after`
  (and, should a commit ever undelete, INSERTed in the opposite case). `added_deletes` are
  the commit's new delete files among `deletes_after`, for the payload fast path: position
  deletes carrying the deleted `row` can be emitted without reading the data file.

Iceberg Java's javadoc example for DeletedRowsScanTask: snapshot S1 holds data files F1, F2,
F3; S2 adds a position delete D1 of rows of F2; S3 adds an equality delete D2 of rows of
F1, F2 and F3. The changes of S3 are a DeletedRowsTask for each of F1, F2 and F3 with
added_deletes=(D2,), and F2's has deletes_before=(D1,): rows D1 had removed are not
DELETEd again (tests/planner/test_incremental.py checks this shape on Iceberg Java tables).
"""

from __future__ import annotations

from dataclasses import dataclass

from meltwater.planner.files import DataFile
from meltwater.planner.tasks import DeleteFileRef


@dataclass(frozen=True)
class ChangeCommit:
    """The commit a change belongs to, and its place in the range."""

    ordinal: int  # 0-based position of the commit in the range, oldest first
    snapshot_id: int
    sequence_number: int
    timestamp_ms: int
    operation: str


@dataclass(frozen=True)
class AddedRowsTask:
    """A data file the commit added: its rows are INSERTs, less those its same-commit `deletes`
    remove."""

    commit: ChangeCommit
    data_file: DataFile
    sequence_number: int
    deletes: tuple[DeleteFileRef, ...] = ()


@dataclass(frozen=True)
class DeletedDataFileTask:
    """A data file the commit removed: its rows live before the commit (the file minus
    `existing_deletes`) are DELETEs."""

    commit: ChangeCommit
    data_file: DataFile
    sequence_number: int
    existing_deletes: tuple[DeleteFileRef, ...] = ()


@dataclass(frozen=True)
class DeletedRowsTask:
    """An older data file whose applicable deletes changed: rows live under `deletes_before` and
    not under `deletes_after` are DELETEs."""

    commit: ChangeCommit
    data_file: DataFile
    sequence_number: int
    deletes_before: tuple[DeleteFileRef, ...]
    deletes_after: tuple[DeleteFileRef, ...]
    added_deletes: tuple[DeleteFileRef, ...] = ()

    @property
    def may_undelete(self) -> bool:
        """Whether a delete that applied before the commit no longer does, so the task
        could yield INSERTs: normal commits never do this, but a DV replaced by one with
        fewer positions would."""
        after = {ref.key for ref in self.deletes_after}
        return any(ref.key not in after for ref in self.deletes_before)


ChangeTask = AddedRowsTask | DeletedDataFileTask | DeletedRowsTask


@dataclass(frozen=True)
class CommitChanges:
    """All change tasks of one commit: carry-over removal and update pairing need them
    together, so a commit is the unit the engine reconstructs (a stream splits a huge
    commit only between units no row crosses, `meltwater.planner.commit_units`)."""

    commit: ChangeCommit
    tasks: tuple[ChangeTask, ...]
