"""Incremental planning: the change tasks of every commit in a range (from, to].

A commit's own manifests say what it changed: those it wrote (`added_snapshot_id` is the
commit) hold the entries it ADDED or DELETED (`CommitDelta`). Everything else planning
needs, the live data files its deletes may reach and the deletes that applied to them
before and after it, is the table's state (`meltwater.planner.changes.table_state`): read from the
first commit's manifests once (its state minus its delta is its parent's, so planning never
reads the parent's manifest list, which also works when the parent has expired), then
carried from commit to commit by their deltas. A range of many commits is planned in one
pass: each manifest read once, each delete file indexed once, and a commit's work is its
own files (and, for an equality delete, the data files it may reach).

`replace` commits (compaction, delete-file rewrites) change no rows: they yield no tasks,
and only their deltas are read, to carry the state on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from meltwater.planner.changes.change_range import ChangeRange
from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    ChangeTask,
    CommitChanges,
    DeletedDataFileTask,
    DeletedRowsTask,
    EqualityChange,
    EqualityDeletedRowsTask,
)
from meltwater.planner.changes.table_state import CommitDelta, TableState
from meltwater.planner.expressions.filter_evaluators import FilterEvaluators
from meltwater.planner.expressions.tree import TRUE, AlwaysTrue, Expression
from meltwater.planner.scans.delete_index import referenced_data_file
from meltwater.planner.scans.plan_stats import PlanStats, listed_manifests
from meltwater.planner.scans.tasks import DataFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import EntryStatus, ManifestContent, ManifestFile
from meltwater.planner.table.manifests import MANIFEST_CACHE, ManifestCache, ManifestReader
from meltwater.planner.table.metadata import Snapshot
from meltwater.planner.table.table_loading import Table

NO_CHANGE_OPERATIONS = frozenset({"replace"})


class IncrementalPlanner:
    """Plans the change tasks of commits of one table, carrying its state from each commit
    to the next (see the module doc); one instance per change read or stream.

    The row filter prunes data files only (by partition values and column metrics, as a
    scan prunes them): a delete file changes the rows of every data file its key or
    position reaches, whatever its own columns' values.
    """

    def __init__(self, table: Table, row_filter: Expression = TRUE, *,
                 cache: ManifestCache | None = MANIFEST_CACHE,
                 stats: PlanStats | None = None) -> None:
        self.table = table
        self.metadata = table.metadata
        self.reader = ManifestReader(self.metadata, table.io, cache)
        self.row_filter = row_filter
        self.stats = stats or PlanStats()
        self._filtered = (None if isinstance(row_filter, AlwaysTrue) else
                          FilterEvaluators(self.metadata.schema, row_filter,
                                           self.metadata.specs))
        self._may_match: dict[str, bool] = {}
        self._state: TableState | None = None
        # each data manifest's first row id as the state's files were decoded with it
        self._row_ids: dict[str, int | None] = {}
        # the manifests the last commit advanced over lists: those the next one drops
        # leave the manifest cache (`ManifestReader.forget`)
        self._listed: dict[str, ManifestFile] | None = None
        self._listed_at: int | None = None

    def use_metadata(self, table: Table) -> None:
        """Plan with a newer metadata file of the same table (a stream's reload): the
        carried state stays valid, files being immutable; specs and schemas only grow."""
        if table.metadata is self.metadata:
            return
        self.table, self.metadata = table, table.metadata
        self.reader = ManifestReader(self.metadata, table.io, self.reader.cache)
        if self._state is not None:
            self._state.specs = self.metadata.specs

    # -- the state ----------------------------------------------------------------------

    def _delta(self, snapshot: Snapshot, manifests: list[ManifestFile]) -> CommitDelta:
        """What the commit changed: its own manifests' ADDED and DELETED entries."""
        sid = snapshot.snapshot_id
        written = [m for m in manifests if m.added_snapshot_id == sid]
        entries = [e for m in written for e in self.reader.entries(m)
                   if e.snapshot_id == sid and e.status != EntryStatus.EXISTING]
        self.stats.add(manifests_read=len(written))
        return CommitDelta.of(entries)

    def _state_before(self, snapshot: Snapshot, manifests: list[ManifestFile],
                      delta: CommitDelta) -> TableState:
        """The state at the commit's parent, from the commit's manifests."""
        entries = [e for m in manifests for e in self.reader.entries(m)]
        # the commit's own manifests were read (and counted) for its delta: cached since
        sid = snapshot.snapshot_id
        self.stats.add(manifests_read=sum(m.added_snapshot_id != sid for m in manifests))
        self._row_ids = {m.manifest_path: m.first_row_id for m in manifests}
        after = TableState.of(snapshot.snapshot_id, entries, self.metadata.specs)
        return after.reverted(snapshot.parent_id, delta)

    def _refresh_row_ids(self, state: TableState, manifests: list[ManifestFile]) -> None:
        """Files of a manifest written before a table moved to format v3 inherit row ids
        only in the snapshots after it (`first_row_id` assigned in their manifest lists):
        the state's files of such a manifest are decoded again under the newer list."""
        for manifest in manifests:
            known = self._row_ids.get(manifest.manifest_path, manifest.first_row_id)
            self._row_ids[manifest.manifest_path] = manifest.first_row_id
            if known == manifest.first_row_id:
                continue
            for entry in self.reader.entries(manifest):
                if entry.status != EntryStatus.DELETED \
                        and entry.file.file_path in state.data:
                    state.replace_data(DataFileRef(entry.file, entry.sequence_number))

    def _matches(self, ref: DataFileRef) -> bool:
        """Whether the row filter may keep rows of the data file (partition values and
        column metrics, evaluated once per file)."""
        if self._filtered is None:
            return True
        path = ref.file.file_path
        found = self._may_match.get(path)
        if found is None:
            found = self._may_match[path] = self._filtered.file_may_match(ref.file)
        return found

    # -- planning -----------------------------------------------------------------------

    def plan_commit(self, snapshot: Snapshot, ordinal: int, *,
                    appends_only: bool = False) -> CommitChanges:
        """The change tasks of one commit (`ordinal`: its place in the range); with
        `appends_only`, only the files an append added."""
        commit = ChangeCommit(ordinal, snapshot.snapshot_id, snapshot.sequence_number,
                              snapshot.timestamp_ms, snapshot.operation)
        state, delta = self._advance(snapshot)
        after = self._state
        assert after is not None
        if snapshot.operation in NO_CHANGE_OPERATIONS or (
                appends_only and snapshot.operation != "append"):
            return CommitChanges(commit, ())
        if appends_only:
            tasks: list[ChangeTask] = [
                AddedRowsTask(commit, ref.file, ref.sequence_number)
                for ref in delta.added_data if self._matches(ref)]
            self.stats.add(tasks=len(tasks))
            return CommitChanges(commit, tuple(tasks))
        tasks = self._tasks(commit, state, after, delta)
        self.stats.add(tasks=len(tasks), delete_files_matched=len(delta.added_deletes))
        return CommitChanges(commit, tuple(tasks))

    def _tasks(self, commit: ChangeCommit, before: TableState, after: TableState,
               delta: CommitDelta) -> list[ChangeTask]:
        tasks: list[ChangeTask] = []
        equality = self._equality_change(before, after, delta)
        for ref in delta.removed_data:
            if self._matches(ref):
                tasks.append(DeletedDataFileTask(
                    commit, ref.file, ref.sequence_number, before.positional_for(ref),
                    _applying(before, ref)))
        positional = self._positional_changes(commit, before, after, delta, equality)
        tasks.extend(positional)
        tasks.extend(self._equality_task(commit, before, after, delta, equality, positional))
        for ref in delta.added_data:
            if self._matches(ref):
                tasks.append(AddedRowsTask(commit, ref.file, ref.sequence_number,
                                           after.positional_for(ref), _applying(after, ref)))
        return tasks

    def _equality_change(self, before: TableState, after: TableState,
                         delta: CommitDelta) -> EqualityChange | None:
        """The commit's equality deletes (None: there are none before or after it)."""
        added, removed = delta.equality_added, delta.equality_removed
        if before.equality_set is None and after.equality_set is None:
            return None
        global_keys = frozenset(ref.key for ref in added + removed
                                if after.is_global(ref.file))
        return EqualityChange(before.equality_set, after.equality_set, added, removed,
                              global_keys)

    def _positional_changes(self, commit: ChangeCommit, before: TableState,
                            after: TableState, delta: CommitDelta,
                            equality: EqualityChange | None, *, every_file: bool = False
                            ) -> list[DeletedRowsTask]:
        """A task for each older live data file whose position deletes or DVs changed
        (`every_file`: each file live in both states, for net changes, where deletes of
        files added and removed in between leave no trace in `delta`)."""
        changed = delta.positional_changed
        if not changed and not every_file:
            return []
        added_here = {ref.file.file_path for ref in delta.added_data}
        if every_file:
            changed = tuple(ref for ref in {**before.positional, **after.positional}.values()
                            if (ref.key in before.positional) != (ref.key in after.positional))
        reached: dict[str, DataFileRef] = {}
        for delete in changed:
            target = referenced_data_file(delete.file)
            if target is not None:
                found = after.data.get(target)
                members = [found] if found is not None else []
            else:
                members = list(after.in_partition(delete.file.partition_key))
            for ref in members:
                if ref.file.file_path not in added_here and self._matches(ref):
                    reached[ref.file.file_path] = ref
        tasks = []
        # in path order, not the state's: a restarted stream replans a commit from a state
        # read afresh, and its parts (commit_units) are cut by task index
        for ref in sorted(reached.values(), key=lambda ref: ref.file.file_path):
            was = before.positional_for(ref)
            now = after.positional_for(ref)
            was_keys = {r.key for r in was}
            if was_keys == {r.key for r in now} and not (
                    equality is not None and equality.changed_for(ref)):
                continue
            tasks.append(DeletedRowsTask(
                commit, ref.file, ref.sequence_number, was, now,
                tuple(r for r in now if r.key not in was_keys), equality))
        return tasks

    def _equality_task(self, commit: ChangeCommit, before: TableState, after: TableState,
                       delta: CommitDelta, equality: EqualityChange | None,
                       positional: Sequence[DeletedRowsTask]) -> list[EqualityDeletedRowsTask]:
        """The task finding the rows the changed equality deletes reach (none when no
        equality delete changed or no older file is left to reach), for a commit or a
        range's two ends."""
        if equality is None or not (equality.added or equality.removed):
            return []
        own = {task.data_file.file_path for task in positional}  # read by their own tasks
        candidates = self._candidates(after, delta, own)
        if not candidates:
            return []
        return [EqualityDeletedRowsTask(
            commit, candidates, equality,
            tuple(sorted(before.positional.values(), key=lambda r: r.key)))]

    def _candidates(self, after: TableState, delta: CommitDelta, own: set[str]
                    ) -> tuple[DataFileRef, ...]:
        """The older live data files the commit's equality deletes may reach, but those
        with a task of their own (and those the row filter rules out)."""
        added_here = {ref.file.file_path for ref in delta.added_data}
        found: dict[str, DataFileRef] = {}
        for delete in delta.equality_added + delta.equality_removed:
            for ref in after.reached_by(delete):
                path = ref.file.file_path
                if path not in own and path not in added_here and path not in found \
                        and self._matches(ref):
                    found[path] = ref
        # in one order however the state was reached (advanced commit by commit, or read
        # from a snapshot's manifests by a restarted driver): a replayed micro-batch plans
        # the same tasks
        return tuple(sorted(found.values(),
                            key=lambda ref: (ref.sequence_number, ref.file.file_path)))

    def plan_net(self, change_range: ChangeRange) -> CommitChanges | None:
        """The net changes of a range as one set of tasks comparing the table before its
        first commit with the table after its last (None: an empty range).

        Net changes are the multiset difference of the two tables, so only the files whose
        rows differ between them are read, once, however many commits the range has:
        files added in the range and still live (their live rows), files live before and
        removed (theirs), and files live in both whose deletes differ (`DeletedRowsTask`,
        and one `EqualityDeletedRowsTask` for the equality deletes). Planning reads the
        manifests of the range's two ends, not of every commit between them (those
        whose own manifests removed a file are searched for it, to say which commit did).
        Rows carry the commit that made their change (`CommitChanges.spanned`)."""
        commits = change_range.commits
        if not commits:
            return None
        spanned = tuple(ChangeCommit(i, s.snapshot_id, s.sequence_number, s.timestamp_ms,
                                     s.operation) for i, s in enumerate(commits))
        by_snapshot: dict[int | None, ChangeCommit] = {c.snapshot_id: c for c in spanned}
        last = spanned[-1]
        start, _ = self._advance(commits[0])
        end = self._state_at(commits[-1])
        removed = {p: r for p, r in start.data.items() if p not in end.data}
        removed_by = self._removers(commits, spanned, set(removed))
        tasks: list[ChangeTask] = []
        for path, ref in removed.items():
            if self._matches(ref):
                tasks.append(DeletedDataFileTask(
                    removed_by.get(path, last), ref.file, ref.sequence_number,
                    start.positional_for(ref), _applying(start, ref)))
        delta = CommitDelta(
            tuple(r for p, r in end.data.items() if p not in start.data),
            tuple(removed.values()),
            tuple(r for k, r in {**end.positional, **end.equality}.items()
                  if k not in start.positional and k not in start.equality),
            tuple(r for k, r in {**start.positional, **start.equality}.items()
                  if k not in end.positional and k not in end.equality))
        equality = self._equality_change(start, end, delta)
        positional = self._positional_changes(last, start, end, delta, equality,
                                              every_file=True)
        tasks.extend(positional)
        tasks.extend(self._equality_task(last, start, end, delta, equality, positional))
        for path, ref in end.data.items():
            if path not in start.data and self._matches(ref):
                tasks.append(AddedRowsTask(by_snapshot.get(ref.snapshot_id, last), ref.file,
                                           ref.sequence_number, end.positional_for(ref),
                                           _applying(end, ref)))
        self.stats.add(tasks=len(tasks))
        return CommitChanges(last, tuple(tasks), spanned)

    def _state_at(self, snapshot: Snapshot) -> TableState:
        """The table's state after a commit, from its manifests (and carried on from it)."""
        state = self._state
        if state is not None and state.snapshot_id == snapshot.snapshot_id:
            return state
        data_manifests, delete_manifests = listed_manifests(self.reader, snapshot, self.stats)
        manifests = data_manifests + delete_manifests
        entries = [e for m in manifests for e in self.reader.entries(m)]
        # the commit's own manifests were read (and counted) for its delta: cached since
        sid = snapshot.snapshot_id
        self.stats.add(manifests_read=sum(m.added_snapshot_id != sid for m in manifests))
        self._row_ids = {m.manifest_path: m.first_row_id for m in manifests}
        self._state = TableState.of(snapshot.snapshot_id, entries, self.metadata.specs)
        return self._state

    def _removers(self, commits: Sequence[Snapshot], spanned: Sequence[ChangeCommit],
                  paths: set[str]) -> dict[str, ChangeCommit]:
        """Which commit of the range removed each of `paths`: the one whose own manifests
        list it DELETED (searched for those paths only, until all are found)."""
        found: dict[str, ChangeCommit] = {}
        for snapshot, commit in zip(commits, spanned, strict=True):
            if len(found) == len(paths):
                break
            manifests = [m for m in self.reader.manifest_list(snapshot)
                         if m.added_snapshot_id == snapshot.snapshot_id
                         and m.content == ManifestContent.DATA and m.has_deleted_files()]
            wanted = paths - found.keys()
            for manifest in manifests:
                for entry in self.reader.entries_naming(manifest, wanted):
                    if entry.status == EntryStatus.DELETED \
                            and entry.snapshot_id == snapshot.snapshot_id:
                        found.setdefault(entry.file.file_path, commit)
        return found

    def _advance(self, snapshot: Snapshot) -> tuple[TableState, CommitDelta]:
        """Carry the state over one commit: the state before it and the commit's delta."""
        data_manifests, delete_manifests = listed_manifests(self.reader, snapshot, self.stats)
        manifests = data_manifests + delete_manifests
        delta = self._delta(snapshot, manifests)
        state = self._state
        if state is None or state.snapshot_id != snapshot.parent_id \
                or snapshot.parent_id is None:
            state = self._state_before(snapshot, manifests, delta)
        after = state.advanced(snapshot.snapshot_id, delta)
        self._refresh_row_ids(after, data_manifests)
        self._state = after
        listed = {m.manifest_path: m for m in manifests}
        if self._listed is not None and self._listed_at == snapshot.parent_id:
            self.reader.forget([m for path, m in self._listed.items() if path not in listed])
        self._listed, self._listed_at = listed, snapshot.snapshot_id
        self.stats.add(data_files_considered=len(delta.added_data) + len(delta.removed_data),
                       delete_files_considered=len(delta.added_deletes)
                       + len(delta.removed_deletes))
        return state, delta

    def plan(self, change_range: ChangeRange, *,
             appends_only: bool = False) -> Iterator[CommitChanges]:
        """The changes of each commit in the range, planned lazily, oldest first."""
        for ordinal, snapshot in enumerate(change_range.commits):
            yield self.plan_commit(snapshot, ordinal, appends_only=appends_only)


def _applying(state: TableState, ref: DataFileRef) -> EqualityDeleteSet | None:
    """The state's equality delete set when any of it applies to the data file."""
    equality = state.equality_set
    if equality is None or not equality.applies_to(ref.sequence_number, ref.file):
        return None
    return equality
