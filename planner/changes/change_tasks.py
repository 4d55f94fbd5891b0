"""Change tasks: what changed in one commit, in Iceberg's own vocabulary.

Incremental planning turns the commits of a range into these tasks; the engine
(`meltwater.stream.engine.changes.reconstruction`) turns each into change rows. Each task
carries every delete file the engine needs, so reading never consults table metadata.
Position deletes and DVs are listed per data file; equality deletes, which reach every older
data file of their scope, are shared by the commit's tasks (`EqualityChange`), never listed
per file:

- `AddedRowsTask`: a data file the commit added. Its rows are INSERTs, except rows removed
  by position deletes or DVs of the same commit (`deletes`), which apply to same-sequence
  data; equality deletes of the same commit never apply to it (`equality` is only for a
  snapshot's contents read as INSERTs).
- `DeletedDataFileTask`: a data file the commit removed (copy-on-write rewrite, overwrite,
  metadata delete). Its rows that were live before the commit, the file minus
  `existing_deletes` and the equality deletes live before (`equality`), are DELETEs.
- `DeletedRowsTask`: an older data file whose position deletes or DVs changed in the
  commit. A row is DELETEd when it was live under `deletes_before` (and the equality
  deletes before) and is not under `deletes_after` (and those after); should a commit ever
  undelete, it is INSERTed in the opposite case. `added_deletes` are the commit's new
  position delete files among `deletes_after`, for the payload fast path: position
  deletes carrying the deleted `row` can be emitted without reading the data file.
- `EqualityDeletedRowsTask`: one per commit that added or removed equality deletes: the
  rows of older live data files (`candidates`, those without a `DeletedRowsTask`) whose
  key the commit's equality deletes hold and whose liveness they changed. The engine finds
  them by their key columns alone and reads only those rows (`meltwater.stream.engine.
  equality_changes`), so the commit costs its keys, not the table.

Iceberg Java's javadoc example for DeletedRowsScanTask: snapshot S1 holds data files F1, F2,
F3; S2 adds a position delete D1 of rows of F2; S3 adds an equality delete D2 of rows of
F1, F2 and F3. The changes of S3 are one EqualityDeletedRowsTask with candidates F1, F2 and
F3, added D2, and D1 among the position deletes live before: rows D1 had removed are not
DELETEd again (tests/planner/changes/test_incremental.py checks this shape on Iceberg Java tables).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meltwater.planner.scans.delete_index import DeleteFileIndex
from meltwater.planner.scans.tasks import DataFileRef, DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import DataFile


@dataclass(frozen=True)
class ChangeCommit:
    """The commit a change belongs to, and its place in the range."""

    ordinal: int  # 0-based position of the commit in the range, oldest first
    snapshot_id: int
    sequence_number: int
    timestamp_ms: int
    operation: str


@dataclass(frozen=True)
class EqualityChange:
    """The equality deletes of one commit: those live before and after it, and those it
    added and removed (often none), shared by every task of the commit that reads rows
    they may delete. `global_keys` are the keys of the added and removed ones written
    under an unpartitioned spec, which apply in every partition."""

    before: EqualityDeleteSet | None
    after: EqualityDeleteSet | None
    added: tuple[DeleteFileRef, ...] = ()
    removed: tuple[DeleteFileRef, ...] = ()
    global_keys: frozenset[tuple[str, int | None]] = frozenset()

    def changed_for(self, data: DataFileRef) -> tuple[DeleteFileRef, ...]:
        """The added and removed deletes that may apply to rows of a data file: newer than
        it, and global or of its partition."""
        return tuple(ref for ref in self.added + self.removed
                     if ref.sequence_number > data.sequence_number
                     and (ref.key in self.global_keys
                          or ref.file.partition_key == data.file.partition_key))


@dataclass(frozen=True)
class AddedRowsTask:
    """A data file the commit added: its rows are INSERTs, less those its same-commit `deletes`
    remove (and, for a snapshot read as INSERTs, its equality deletes)."""

    commit: ChangeCommit
    data_file: DataFile
    sequence_number: int
    deletes: tuple[DeleteFileRef, ...] = ()
    equality: EqualityDeleteSet | None = None



@dataclass(frozen=True)
class DeletedDataFileTask:
    """A data file the commit removed: its rows live before the commit (the file minus
    `existing_deletes` and the equality deletes of `equality`) are DELETEs."""

    commit: ChangeCommit
    data_file: DataFile
    sequence_number: int
    existing_deletes: tuple[DeleteFileRef, ...] = ()
    equality: EqualityDeleteSet | None = None



@dataclass(frozen=True)
class DeletedRowsTask:
    """An older data file whose position deletes changed: rows live under `deletes_before`
    and not under `deletes_after` are DELETEs, the equality deletes of `equality` before
    and after the commit counting on each side."""

    commit: ChangeCommit
    data_file: DataFile
    sequence_number: int
    deletes_before: tuple[DeleteFileRef, ...]
    deletes_after: tuple[DeleteFileRef, ...]
    added_deletes: tuple[DeleteFileRef, ...] = ()
    equality: EqualityChange | None = None


    @property
    def may_undelete(self) -> bool:
        """Whether a delete that applied before the commit no longer does, so the task
        could yield INSERTs: normal commits never do this, but a DV replaced by one with
        fewer positions would."""
        after = {ref.key for ref in self.deletes_after}
        if any(ref.key not in after for ref in self.deletes_before):
            return True
        if self.equality is None or not self.equality.removed:
            return False
        removed = {ref.key for ref in self.equality.removed}
        data = DataFileRef(self.data_file, self.sequence_number)
        return any(ref.key in removed for ref in self.equality.changed_for(data))


@dataclass(frozen=True)
class EqualityDeletedRowsTask:
    """The rows of older data files whose liveness the commit's equality deletes changed:
    those live before whose key an added delete holds are DELETEs (and, should a commit
    remove an equality delete, those it alone had deleted INSERTs).

    `candidates` are the live data files the deletes may reach (older than a changed
    delete, of its scope) that have no `DeletedRowsTask` of their own; `positional` are
    the position deletes and DVs live before the commit (the same after it for every
    candidate), of which `positional_for` finds a candidate's."""

    commit: ChangeCommit
    candidates: tuple[DataFileRef, ...]
    equality: EqualityChange
    positional: tuple[DeleteFileRef, ...] = ()
    _index: list[DeleteFileIndex] = field(default_factory=list, init=False, repr=False,
                                          compare=False, hash=False)

    def positional_for(self, ref: DataFileRef) -> tuple[DeleteFileRef, ...]:
        """The position deletes and DVs that apply to a candidate."""
        if not self.positional:
            return ()
        if not self._index:  # built once, on first use
            self._index.append(DeleteFileIndex({}, self.positional))
        return self._index[0].positional_for(ref.sequence_number, ref.file)


    @property
    def may_undelete(self) -> bool:
        """Whether the commit removed an equality delete, which could bring rows back."""
        return bool(self.equality.removed)


ChangeTask = AddedRowsTask | DeletedDataFileTask | DeletedRowsTask | EqualityDeletedRowsTask


@dataclass(frozen=True)
class CommitChanges:
    """All change tasks of one commit: carry-over removal and update pairing need them
    together, so a commit is the unit the engine reconstructs (a stream splits a huge
    commit only between units no row crosses, `meltwater.planner.changes.commit_units`)."""

    commit: ChangeCommit
    tasks: tuple[ChangeTask, ...]
    # the net changes of a range as one set of tasks: the range's commits, each task's
    # `commit` the one that added or removed its file, a deleted row's the one whose
    # delete removed it (`IncrementalPlanner.plan_net`)
    spanned: tuple[ChangeCommit, ...] = ()
