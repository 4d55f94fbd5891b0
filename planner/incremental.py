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

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from meltwater.planner.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    ChangeTask,
    CommitChanges,
    DeletedDataFileTask,
    DeletedRowsTask,
)
from meltwater.planner.delete_index import DeleteFileIndex, referenced_data_file
from meltwater.planner.errors import ExpiredSnapshotsError, InvalidRangeError, NoSuchSnapshotError
from meltwater.planner.expressions import TRUE, Expression
from meltwater.planner.files import DataFile, EntryStatus, FileContent, ManifestEntry, ManifestFile
from meltwater.planner.filter_evaluators import FilterEvaluators
from meltwater.planner.manifest_group import CHANGED, ManifestGroup, PlanStats, listed_manifests
from meltwater.planner.manifests import MANIFEST_CACHE, ManifestCache, ManifestReader
from meltwater.planner.metadata import Snapshot, Table, TableMetadata
from meltwater.planner.partition_set import PartitionSet
from meltwater.planner.tasks import DeleteFileRef

log = logging.getLogger(__name__)

NO_CHANGE_OPERATIONS = frozenset({"replace"})


@dataclass(frozen=True)
class ChangeRange:
    """Commits after `from_snapshot_id` up to and including `to`, oldest first."""

    from_snapshot_id: int | None
    to_snapshot_id: int | None
    commits: tuple[Snapshot, ...]
    expired_skipped: tuple[int, ...] = ()


class BoundNames(NamedTuple):
    """What the caller calls each range bound, so a refusal names the option the user set
    (`--from-timestamp` on the command line, `start-timestamp` in Spark)."""

    from_sequence: str = "from_sequence"
    from_timestamp: str = "from_timestamp_ms"
    to_sequence: str = "to_sequence"
    to_timestamp: str = "to_timestamp_ms"
    to_snapshot: str = "to_snapshot_id"
    to_ref: str = "to_ref"


API_BOUND_NAMES = BoundNames()  # the keyword arguments of `resolve_range` / `changes`


def _check_to_sequence(metadata: TableMetadata, sequence: int, names: BoundNames) -> None:
    """A sequence number beyond the head names a commit that does not exist yet; clamping
    it to the head would answer for a range the caller did not ask for."""
    current = metadata.current_snapshot
    head = current.sequence_number if current is not None else 0
    if sequence > head:
        raise InvalidRangeError(f"{names.to_sequence} {sequence} is beyond the table's head "
                           f"(sequence number {head}, snapshot "
                           f"{current.snapshot_id if current else None})")


def _check_start_before_end(to: Snapshot, names: BoundNames, *, from_sequence: int | None,
                            from_timestamp_ms: int | None, to_sequence: int | None,
                            to_timestamp_ms: int | None, to_snapshot_id: int | None,
                            to_ref: str | None) -> None:
    """Refuse a start later than an explicit end (Iceberg's Spark changelog scans refuse a
    start-timestamp after the end-timestamp): the range would be empty by mistake. A
    start after the head with no end given stays a valid, empty range (nothing since)."""
    by_snapshot = (f"{names.to_snapshot} {to_snapshot_id}" if to_snapshot_id is not None
                   else f"{names.to_ref} {to_ref!r}" if to_ref is not None else None)
    _check_bound(names.from_timestamp, from_timestamp_ms, names.to_timestamp, to_timestamp_ms,
                 by_snapshot, to.timestamp_ms, "committed at {} ms")
    _check_bound(names.from_sequence, from_sequence, names.to_sequence, to_sequence,
                 by_snapshot, to.sequence_number, "sequence number {}")


def _check_bound(start_name: str, start: int | None, end_name: str, end: int | None,
                 by_snapshot: str | None, snapshot_value: int, described: str) -> None:
    """One kind of bound (timestamp or sequence number): the start against the explicit
    end of the same kind, else against the end snapshot's value when an end snapshot or
    ref was named."""
    if start is None:
        return
    if end is not None:
        limit, what = end, f"{end_name} {end}"
    elif by_snapshot is not None:
        limit, what = snapshot_value, f"{by_snapshot} ({described.format(snapshot_value)})"
    else:
        return
    if start > limit:
        raise InvalidRangeError(f"{start_name} {start} is later than {what}: the range's start "
                           "must not be after its end")


def _snapshot_by_sequence(lineage: list[Snapshot], sequence_number: int) -> Snapshot | None:
    """The newest snapshot of a lineage (newest first) at or before a sequence number."""
    return next((s for s in lineage if s.sequence_number <= sequence_number), None)


def _snapshot_by_time(lineage: list[Snapshot], timestamp_ms: int) -> Snapshot | None:
    return next((s for s in lineage if s.timestamp_ms <= timestamp_ms), None)


def _resolve_to(metadata: TableMetadata, snapshot_id: int | None, sequence: int | None,
                timestamp_ms: int | None, ref: str | None,
                names: BoundNames) -> Snapshot | None:
    given = [v for v in (snapshot_id, sequence, timestamp_ms, ref) if v is not None]
    if len(given) > 1:
        raise InvalidRangeError("give the range's end once: snapshot id, sequence number, "
                           "timestamp or ref")
    if snapshot_id is not None:
        return metadata.snapshot(snapshot_id)
    if ref is not None:
        return metadata.snapshot_for_ref(ref)
    current = metadata.current_snapshot
    if current is None:
        return None
    lineage = metadata.ancestors(current.snapshot_id)
    if sequence is not None:
        _check_to_sequence(metadata, sequence, names)
        found = _snapshot_by_sequence(lineage, sequence)
        if found is None:
            raise NoSuchSnapshotError(f"no snapshot at or before sequence number {sequence}")
        return found
    if timestamp_ms is not None:
        found = _snapshot_by_time(lineage, timestamp_ms)
        if found is None:
            raise NoSuchSnapshotError(f"no snapshot at or before {timestamp_ms} ms")
        return found
    return current


def resolve_range(table: Table, *, from_snapshot_id: int | None = None,
                  from_sequence: int | None = None, from_timestamp_ms: int | None = None,
                  from_ref: str | None = None, to_snapshot_id: int | None = None,
                  to_sequence: int | None = None, to_timestamp_ms: int | None = None,
                  to_ref: str | None = None, skip_expired: bool = False,
                  names: BoundNames = API_BOUND_NAMES) -> ChangeRange:
    """The commits of (from, to], walking `to`'s parent chain back to `from`.

    `from` is exclusive: by snapshot id, by sequence number (changes committed with a
    greater one), by time (changes committed after it) or by ref. Missing `from` means the
    whole history; missing `to` the current snapshot. A start later than an explicit end,
    or a `to_sequence` beyond the head, is refused (`InvalidRangeError`, naming the bounds as
    `names` says the caller calls them): every entry point (CLI, API, Spark) comes here.
    """
    metadata = table.metadata
    if to_sequence is not None and metadata.current_snapshot is None:
        _check_to_sequence(metadata, to_sequence, names)
    to = _resolve_to(metadata, to_snapshot_id, to_sequence, to_timestamp_ms, to_ref, names)
    if to is None:
        return ChangeRange(None, None, ())
    _check_start_before_end(to, names, from_sequence=from_sequence,
                            from_timestamp_ms=from_timestamp_ms, to_sequence=to_sequence,
                            to_timestamp_ms=to_timestamp_ms, to_snapshot_id=to_snapshot_id,
                            to_ref=to_ref)
    lineage = metadata.ancestors(to.snapshot_id)
    given = [v for v in (from_snapshot_id, from_sequence, from_timestamp_ms, from_ref)
             if v is not None]
    if len(given) > 1:
        raise InvalidRangeError("give the range's start once: snapshot id, sequence number, "
                           "timestamp or ref")
    start: int | None = from_snapshot_id
    if from_ref is not None:
        start = metadata.snapshot_for_ref(from_ref).snapshot_id
    elif from_sequence is not None:
        found = _snapshot_by_sequence(lineage, from_sequence)
        start = found.snapshot_id if found is not None else None
    elif from_timestamp_ms is not None:
        found = _snapshot_by_time(lineage, from_timestamp_ms)
        start = found.snapshot_id if found is not None else None
    commits: list[Snapshot] = []
    expired: list[int] = []
    for snapshot in lineage:
        if snapshot.snapshot_id == start:
            break
        commits.append(snapshot)
    else:
        oldest = lineage[-1]
        if oldest.parent_id is not None and oldest.parent_id != start:
            # the chain stops at an expired parent before reaching `from`
            if start is not None and start not in metadata.snapshots and not skip_expired:
                raise ExpiredSnapshotsError(
                    f"snapshots between {start} and {to.snapshot_id} have expired (the "
                    f"oldest retained ancestor {oldest.snapshot_id} has parent "
                    f"{oldest.parent_id}, which is gone); start from {oldest.snapshot_id}")
            if start is not None and start in metadata.snapshots:
                raise InvalidRangeError(f"snapshot {start} is not an ancestor of "
                                   f"{to.snapshot_id}")
            if not skip_expired:
                raise ExpiredSnapshotsError(
                    f"the history before snapshot {oldest.snapshot_id} has expired (its "
                    f"parent {oldest.parent_id} is gone); start from {oldest.snapshot_id} "
                    "or opt in to skipping expired snapshots")
            expired.append(oldest.parent_id)
            log.warning("skipping expired snapshots before %s (parent %s is gone)",
                        oldest.snapshot_id, oldest.parent_id)
        elif start is not None and oldest.parent_id is None:
            raise InvalidRangeError(f"snapshot {start} is not an ancestor of {to.snapshot_id}")
    commits.reverse()
    return ChangeRange(start, to.snapshot_id, tuple(commits), tuple(expired))


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
            tasks = [AddedRowsTask(commit, e.file, e.sequence_number)
                     for e in self._data(written(data_manifests),
                                         statuses=frozenset({EntryStatus.ADDED}),
                                         entry_filter=by_commit)]
            self.stats.add(tasks=len(tasks))
            return CommitChanges(commit, tuple(tasks))
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
