"""Which commits a new metadata file reports after a cursor, on Iceberg Java's metadata.

Rollbacks and branch switches are the tables' own metadata with the main branch moved, as
Iceberg's `rollbackTo` / `setCurrentSnapshot` commit them.
"""

from __future__ import annotations

import dataclasses

from meltwater.planner.table.metadata import TableMetadata
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.watch.snapshot_events import Cursor, SnapshotEvent, commits_after


def _main(metadata: TableMetadata, snapshot_id: int) -> TableMetadata:
    """The table with main set to another snapshot."""
    return dataclasses.replace(metadata, current_snapshot_id=snapshot_id)


def _ids(commits) -> list[int]:
    return [s.snapshot_id for s in commits.snapshots]


def test_commits_after_an_ancestor_in_commit_order(corpus):
    scenario = corpus.scenarios["random_mix"]
    metadata = load_table(scenario.location).metadata
    ids = [s.snapshot_id for s in scenario.snapshots]
    commits = commits_after(metadata, Cursor(ids[3]))
    assert _ids(commits) == ids[4:] and not commits.gap and not commits.reset
    assert _ids(commits_after(metadata, Cursor(ids[-1]))) == []
    assert _ids(commits_after(metadata, Cursor(None))) == ids  # before the first snapshot
    assert _ids(commits_after(_main(metadata, ids[5]), Cursor(ids[2]))) == ids[3:6]


def test_expired_cursor_reports_what_came_after_with_a_gap(corpus):
    scenario = corpus.scenarios["maintenance"]
    metadata = load_table(scenario.location).metadata
    expired = [s for s in scenario.snapshots if s.expired]
    retained = [s.snapshot_id for s in scenario.snapshots if not s.expired]
    # a resumed watcher knows only the id: everything retained is newer than an expired one
    commits = commits_after(metadata, Cursor(expired[3].snapshot_id))
    assert _ids(commits) == retained and commits.gap and not commits.reset
    # the last expired one is the first retained one's parent: nothing is missing
    last = expired[-1]
    commits = commits_after(metadata, Cursor(last.snapshot_id, last.sequence_number,
                                             last.timestamp_ms))
    assert _ids(commits) == retained and not commits.gap
    # a known sequence number orders an expired cursor among the retained snapshots
    third = metadata.snapshot(retained[2])
    gone = dataclasses.replace(metadata, snapshots={
        k: v for k, v in metadata.snapshots.items() if k != retained[2]})
    commits = commits_after(gone, Cursor.at(third))
    assert _ids(commits) == retained[3:] and not commits.gap
    with_history_gone = commits_after(metadata, Cursor(None))
    assert _ids(with_history_gone) == retained and with_history_gone.gap


def test_rollback_and_branch_switch_are_resets(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    metadata = load_table(scenario.location).metadata
    main = metadata.current_snapshot_id
    lineage = [s.snapshot_id for s in reversed(metadata.ancestors(main))]
    # rollback to an ancestor: that snapshot, reported again, as a reset
    commits = commits_after(_main(metadata, lineage[3]), Cursor(main))
    assert _ids(commits) == [lineage[3]] and commits.reset
    # main set to the audit branch's head: its commits after the shared ancestor
    audit = metadata.refs["audit"].snapshot_id
    branch = [s.snapshot_id for s in reversed(metadata.ancestors(audit))]
    shared = metadata.refs["before_branch"].snapshot_id
    commits = commits_after(_main(metadata, audit), Cursor(main))
    assert _ids(commits) == branch[branch.index(shared) + 1:] and commits.reset


def test_event_fields_from_the_snapshot_summary(corpus):
    scenario = corpus.scenarios["random_mix"]
    metadata = load_table(scenario.location).metadata
    snapshot = metadata.current_snapshot
    event = SnapshotEvent.of(snapshot, "/t/metadata/v18.metadata.json")
    summary = snapshot.summary
    assert (event.snapshot_id, event.parent_id, event.sequence_number, event.operation) == (
        snapshot.snapshot_id, snapshot.parent_id, snapshot.sequence_number, "overwrite")
    assert event.deleted_records == int(summary["deleted-records"])
    assert event.total_records == int(summary["total-records"])
    assert event.added_records == (int(summary["added-records"])
                                   if "added-records" in summary else None)
    assert event.committed_at.endswith("Z") and event.to_json()["reset"] is False
