"""The commits a change stream planned, kept for the micro-batches in flight.

A micro-batch's commits are planned when Spark asks how far it goes (`latest_offset`),
again when it asks for its parts, and again if the batch is replayed; planning reads
manifests. Planning is a function of a commit's immutable manifests and the table's specs,
so each commit is planned once and its plan kept until Spark commits an offset past it
(`forget`): the plan a replayed batch gets is the plan its first run had.

One planner serves the whole stream, carrying the table's state from each commit to the
next (`meltwater.planner.changes.table_state`), so a stream following a table reads each commit's
own manifests, not every manifest of every commit.
"""

from __future__ import annotations

from dataclasses import dataclass

from meltwater.planner.changes.change_tasks import AddedRowsTask, ChangeCommit, ChangeTask
from meltwater.planner.changes.commit_units import CommitUnits, commit_units
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.scans.scan import TableScan
from meltwater.planner.table.metadata import Snapshot
from meltwater.planner.table.table_loading import Table
from meltwater.stream.engine.changes.change_schema import ChangeOptions
from meltwater.stream.watch.stream_offsets import StreamOffset


@dataclass(frozen=True)
class PlannedCommit:
    """A commit (or scan) a stream planned: its tasks in planner order and its units."""

    ordinal: int
    snapshot: Snapshot
    tasks: tuple[ChangeTask, ...]
    units: CommitUnits


class PlanCache:
    """Planned commits by (snapshot id, scan?): a snapshot's commit, or with `scan` its
    contents as INSERTs (`starting-snapshot-as-inserts`)."""

    def __init__(self) -> None:
        self._planned: dict[tuple[int, bool], PlannedCommit] = {}
        self._planner: IncrementalPlanner | None = None

    def snapshot(self, snapshot_id: int, scan: bool) -> Snapshot | None:
        """The snapshot of a planned commit (its metadata may have expired since)."""
        cached = self._planned.get((snapshot_id, scan))
        return None if cached is None else cached.snapshot

    def plan(self, table: Table, snapshot: Snapshot, *, scan: bool, ordinal: int,
             options: ChangeOptions, appends_only: bool) -> PlannedCommit:
        """The snapshot's change tasks (or scan tasks) and units, planned once: units keyed
        by the identifier fields when the stream pairs updates."""
        key = (snapshot.snapshot_id, scan)
        cached = self._planned.get(key)
        if cached is not None:
            return cached
        commit = ChangeCommit(ordinal, snapshot.snapshot_id, snapshot.sequence_number,
                              snapshot.timestamp_ms, "scan" if scan else snapshot.operation)
        if scan:
            files = sorted(TableScan(table, snapshot_id=snapshot.snapshot_id).plan_files(),
                           key=lambda t: t.data_file.file_path)
            tasks: tuple[ChangeTask, ...] = tuple(
                AddedRowsTask(commit, t.data_file, t.sequence_number, t.deletes, t.equality)
                for t in files)
        else:
            if self._planner is None:
                self._planner = IncrementalPlanner(table)
            else:
                self._planner.use_metadata(table)
            tasks = self._planner.plan_commit(snapshot, ordinal,
                                              appends_only=appends_only).tasks
        identifiers = options.identifier_field_ids if options.pairs_updates else None
        planned = PlannedCommit(ordinal, snapshot, tasks,
                                commit_units(tasks, table.metadata.specs, identifiers or ()))
        self._planned[key] = planned
        return planned

    def forget(self, end: StreamOffset) -> None:
        """Drop planned commits a committed offset is past."""
        for key, planned in list(self._planned.items()):
            ordinal = planned.ordinal
            if ordinal < end.ordinal or (ordinal == end.ordinal and end.complete):
                del self._planned[key]
