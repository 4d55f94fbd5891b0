"""Incremental planning: the change tasks of every commit in a range (from, to].

A commit's own manifest list is enough to plan its changes. Manifests a commit wrote
(`added_snapshot_id` is the commit) hold the entries it ADDED or DELETED; every other live
entry was already live at its parent. So the parent's state is the commit's state minus
what it added plus what it deleted, and planning never reads the parent's manifest list
(which also works when the parent has expired).

Older manifests are read only for context, pruned by partition summaries against the
partitions the commit's delete files touch: the live data files those deletes may hit, and
the delete files that already applied to them. `ManifestGroup` reads and prunes all of
them (`IncrementalPlanner`). Manifests are cached by path, so a stream advancing one
commit at a time decodes each manifest once. `replace` commits (compaction, delete-file
rewrites) change no rows and are skipped without reading anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from meltwater.planner.change_range import ChangeRange
from meltwater.planner.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    ChangeTask,
    CommitChanges,
    DeletedDataFileTask,
    DeletedRowsTask,
)
from meltwater.planner.delete_index import DeleteFileIndex, referenced_data_file
from meltwater.planner.expressions import TRUE, Expression
from meltwater.planner.files import DataFile, EntryStatus, FileContent, ManifestEntry, ManifestFile
from meltwater.planner.filter_evaluators import FilterEvaluators
from meltwater.planner.manifest_group import CHANGED, ManifestGroup, PlanStats, listed_manifests
from meltwater.planner.manifests import MANIFEST_CACHE, ManifestCache, ManifestReader
from meltwater.planner.metadata import Snapshot, TableMetadata
from meltwater.planner.partition_set import PartitionSet
from meltwater.planner.table_loading import Table
from meltwater.planner.tasks import DeleteFileRef

NO_CHANGE_OPERATIONS = frozenset({"replace"})


class _DeleteReach:
    """What a commit's delete files reach: named data files, partitions, or everything.

    A file-scoped delete (a deletion vector, or a position delete file naming one data
    file) reaches only that file; its partition only narrows the manifests searched for
    it (`listed_in`). When every delete is file-scoped, the manifests need only be
    searched for those paths (`ManifestReader.entries_naming`).
    """

    def __init__(self, metadata: TableMetadata) -> None:
        self.specs = metadata.specs
        self.partitions = PartitionSet(metadata.specs, metadata.schema)
        self.listed_in = PartitionSet(metadata.specs, metadata.schema)
        self.files: set[str] = set()

    def add(self, delete: DataFile) -> None:
        spec = self.specs.get(delete.spec_id)
        target = referenced_data_file(delete)
        if delete.content == FileContent.EQUALITY_DELETES and (spec is None
                                                               or spec.is_unpartitioned):
            self.partitions.add_everything()
            self.listed_in.add_everything()
            return
        if target is not None and delete.content == FileContent.POSITION_DELETES:
            self.files.add(target)
        else:
            self.partitions.add(delete.spec_id, delete.partition)
        self.listed_in.add(delete.spec_id, delete.partition)

    def is_empty(self) -> bool:
        return self.listed_in.is_empty()

    def only_files(self) -> bool:
        """Every delete names its data file: nothing else in any partition is reached."""
        return bool(self.files) and self.partitions.is_empty()

    def reaches(self, file: DataFile) -> bool:
        return file.file_path in self.files or (file.spec_id, file.partition) in self.partitions


class IncrementalPlanner:
    """Plans the change tasks of commits; one instance per table metadata.

    As in Iceberg Java's incremental scans, planning a commit is choosing manifests and
    entries and turning entries into tasks; reading and pruning the manifests (file
    counts, partition summaries, the row filter's partition and metrics evaluation,
    `PlanStats`) is `ManifestGroup`'s. Per commit, four groups:

    - the data manifests the commit wrote, for the data files it added and removed;
    - the delete manifests it wrote, for the delete files it added and removed;
    - every live data file those deletes reach (`_DeleteReach`), for the older files
      whose applicable deletes changed;
    - every live delete file of the partitions of all those data files, for the deletes
      that applied to each before and after the commit.

    The row filter prunes data files only: a delete file changes the rows of every data
    file its key or position reaches, whatever its own columns' values.
    """

    def __init__(self, table: Table, row_filter: Expression = TRUE, *,
                 cache: ManifestCache | None = MANIFEST_CACHE,
                 stats: PlanStats | None = None) -> None:
        self.table = table
        self.metadata = table.metadata
        self.reader = ManifestReader(self.metadata, table.io, cache)
        self.row_filter = row_filter
        self.stats = stats or PlanStats()
        schema, specs = self.metadata.schema, self.metadata.specs
        self._filtered = FilterEvaluators(schema, row_filter, specs)
        self._unfiltered = FilterEvaluators(schema, TRUE, specs)

    def _data(self, manifests: list[ManifestFile], **choices: Any) -> list[ManifestEntry]:
        """The entries `choices` ask for, of data files that may hold rows the filter keeps."""
        group = ManifestGroup(self.reader, self.metadata.schema, manifests,
                              row_filter=self.row_filter, evaluators=self._filtered,
                              stats=self.stats, **choices)
        return [entry for _, entry in group.entries()]

    def _deletes(self, manifests: list[ManifestFile], **choices: Any) -> list[ManifestEntry]:
        group = ManifestGroup(self.reader, self.metadata.schema, (), manifests,
                              evaluators=self._unfiltered, stats=self.stats, **choices)
        return [entry for _, entry in group.entries(deletes=True)]

    def plan_commit(self, snapshot: Snapshot, ordinal: int, *,
                    appends_only: bool = False) -> CommitChanges:
        """The change tasks of one commit (`ordinal`: its place in the range); with
        `appends_only`, only the files an append added."""
        commit = ChangeCommit(ordinal, snapshot.snapshot_id, snapshot.sequence_number,
                              snapshot.timestamp_ms, snapshot.operation)
        if snapshot.operation in NO_CHANGE_OPERATIONS or (
                appends_only and snapshot.operation != "append"):
            return CommitChanges(commit, ())
        data_manifests, delete_manifests = listed_manifests(self.reader, snapshot, self.stats)
        sid = snapshot.snapshot_id

        def written(manifests: list[ManifestFile]) -> list[ManifestFile]:
            """Manifests the commit wrote: only they hold what it added or removed."""
            return [m for m in manifests if m.added_snapshot_id == sid]

        def by_commit(_manifest: ManifestFile, entry: ManifestEntry) -> bool:
            return entry.snapshot_id == sid

        if appends_only:
            appended = [AddedRowsTask(commit, e.file, e.sequence_number)
                        for e in self._data(written(data_manifests),
                                            statuses=frozenset({EntryStatus.ADDED}),
                                            entry_filter=by_commit)]
            self.stats.add(tasks=len(appended))
            return CommitChanges(commit, tuple(appended))
        changed_data = self._data(written(data_manifests), statuses=CHANGED,
                                  entry_filter=by_commit)
        added_data = [e for e in changed_data if e.status == EntryStatus.ADDED]
        removed_data = [e for e in changed_data if e.status == EntryStatus.DELETED]
        changed_deletes = self._deletes(written(delete_manifests), statuses=CHANGED,
                                        entry_filter=by_commit)
        added_deletes = [e for e in changed_deletes if e.status == EntryStatus.ADDED]
        removed_deletes = [e for e in changed_deletes if e.status == EntryStatus.DELETED]

        reach = _DeleteReach(self.metadata)
        for entry in added_deletes + removed_deletes:
            reach.add(entry.file)
        affected: list[ManifestEntry] = []
        if not reach.is_empty():
            def reached(_manifest: ManifestFile, entry: ManifestEntry) -> bool:
                """An older live file (not one the commit added) a delete reaches."""
                return not (entry.status == EntryStatus.ADDED and entry.snapshot_id == sid) \
                    and reach.reaches(entry.file)

            affected = self._data(data_manifests, entry_filter=reached,
                                  partition_filter=reach.listed_in.filter_for,
                                  file_paths=reach.files if reach.only_files() else None)
        # Delete files that may apply to the data files this commit removes or affects.
        context = PartitionSet(self.metadata.specs, self.metadata.schema)
        for entry in removed_data + affected + added_data:
            context.add(entry.file.spec_id, entry.file.partition)
        before, after = self._delete_indexes(sid, delete_manifests, context,
                                             added_deletes, removed_deletes)
        tasks: list[ChangeTask] = []
        for entry in removed_data:
            tasks.append(DeletedDataFileTask(
                commit, entry.file, entry.sequence_number,
                before.for_data_file(entry.sequence_number, entry.file)))
        for entry in affected:
            was = before.for_data_file(entry.sequence_number, entry.file)
            now = after.for_data_file(entry.sequence_number, entry.file)
            was_keys = {r.key for r in was}
            if was_keys == {r.key for r in now}:
                continue
            tasks.append(DeletedRowsTask(
                commit, entry.file, entry.sequence_number, was, now,
                tuple(r for r in now if r.key not in was_keys)))
        for entry in added_data:
            tasks.append(AddedRowsTask(
                commit, entry.file, entry.sequence_number,
                after.for_data_file(entry.sequence_number, entry.file)))
        self.stats.add(tasks=len(tasks), delete_files_matched=len(added_deletes))
        return CommitChanges(commit, tuple(tasks))

    def _delete_indexes(self, sid: int, delete_manifests: list[ManifestFile],
                        context: PartitionSet, added: list[ManifestEntry],
                        removed: list[ManifestEntry]) -> tuple[DeleteFileIndex,
                                                                DeleteFileIndex]:
        """Delete indexes before and after the commit, for the data files of `context`."""
        specs, types = self.metadata.specs, self.metadata.field_types
        before = DeleteFileIndex(specs, types)
        after = DeleteFileIndex(specs, types)
        if context.is_empty() or not delete_manifests:
            return before, after

        def partitions(spec_id: int) -> Expression:
            """Deletes of an unpartitioned spec (global equality deletes) may apply to
            data files of every partition."""
            spec = specs.get(spec_id)
            return TRUE if spec is not None and spec.is_unpartitioned \
                else context.filter_for(spec_id)

        added_keys = {e.file.key for e in added}
        for entry in self._deletes(delete_manifests, partition_filter=partitions):
            ref = DeleteFileRef(entry.file, entry.sequence_number)
            after.add(ref)
            is_new = entry.snapshot_id == sid and entry.status == EntryStatus.ADDED
            if not is_new or entry.file.key not in added_keys:
                before.add(ref)
        for entry in removed:
            before.add(DeleteFileRef(entry.file, entry.sequence_number))
        return before, after

    def plan(self, change_range: ChangeRange, *,
             appends_only: bool = False) -> Iterator[CommitChanges]:
        """The changes of each commit in the range, planned lazily, oldest first."""
        for ordinal, snapshot in enumerate(change_range.commits):
            yield self.plan_commit(snapshot, ordinal, appends_only=appends_only)
