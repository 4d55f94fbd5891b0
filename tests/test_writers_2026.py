"""The tables 2026's writers leave (issue 34), read as Iceberg Java reads them.

Every reader equals Iceberg Java on these scenarios wherever the corpus-wide tests run
(`corpus.WRITERS_2026` is in their lists: every commit replayed, scans, Spark batch, rate
limited streams, mirrors). What is particular to them is checked here:

- a same-branch conversion (equality delete files replaced by the DVs or position deletes
  they resolve to, in one commit) changes no row: its change set is empty, in the Python
  API, the CLI and a stream following main through it;
- a conversion onto main (staged data files with the deletes by position of the rows they
  replaced) pairs each replaced key as an update;
- a RowDelta that deletes its own rows by position and older rows by key pairs each key
  once, whatever the number of times the commit wrote it;
- write-audit-publish: a range to a branch (`--to-ref`), and a stream following a branch
  (option `branch`), equal Iceberg Java's read of the branch; main's fast-forward,
  cherry-pick and rollback are followed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

import meltwater.stream
from corpus.compare import assert_replays
from meltwater.planner.changes.micro_batch import UNLIMITED, Budget
from meltwater.planner.errors import NoSuchSnapshotError
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.errors import OptionError
from meltwater.stream.spark.options import stream_read
from watch_tests.stream_feed import Feed, rows_of

CONVERTED = ("staged_upserts", "staged_upserts_v2")
MIXED = ("mixed_row_deltas", "mixed_row_deltas_v3")


def _labelled(scenario, prefix: str):
    """The one snapshot whose label starts with `prefix`."""
    found = [s for s in scenario.snapshots if s.label.startswith(prefix)]
    assert len(found) == 1, [s.label for s in scenario.snapshots]
    return found[0]


def _commit_changes(scenario, prefix: str):
    """The change rows, updates paired, of the commit whose label starts with `prefix`."""
    commit = _labelled(scenario, prefix)
    return meltwater.stream.changes(load_table(scenario.location),
                                    from_snapshot_id=commit.parent_id,
                                    to_snapshot_id=commit.snapshot_id,
                                    compute_updates=True).read_all()


def _pairs(changes) -> Counter:
    """(change type, id, v) of the change rows."""
    return Counter((r["_change_type"], r["id"], r["v"]) for r in changes.to_pylist())


@pytest.mark.parametrize("name", CONVERTED)
def test_a_same_branch_conversion_changes_nothing(corpus, name):
    scenario = corpus.scenarios[name]
    conversion = _labelled(scenario, "same-branch conversion")
    assert conversion.added_delete_files["dv" if name == "staged_upserts" else "position"] == 1
    table = load_table(scenario.location)
    for options in ({}, {"compute_updates": True}, {"keep_carryover": True}):
        changes = meltwater.stream.changes(table, from_snapshot_id=conversion.parent_id,
                                           to_snapshot_id=conversion.snapshot_id,
                                           **options).read_all()
        assert changes.num_rows == 0, (options, changes.to_pylist())
    cli = subprocess.run(
        [sys.executable, "-m", "meltwater.cli.main", "changes", scenario.location,
         "--from-snapshot", str(conversion.parent_id),
         "--to-snapshot", str(conversion.snapshot_id), "--format", "jsonl"],
        capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and cli.stdout == "", cli.stdout + cli.stderr


@pytest.mark.parametrize("name", CONVERTED)
def test_a_stream_through_conversions_emits_nothing_for_a_same_branch_one(corpus, name):
    """A stream of main, in micro-batches of one file and unlimited: no row of it comes
    from the conversion's commit, and rows come from the commits around it."""
    scenario = corpus.scenarios[name]
    conversion = _labelled(scenario, "same-branch conversion")
    for budget in (Budget(max_files=1), UNLIMITED):
        rows, _ = Feed(scenario.location, {"compute-updates": "true"}).rows(budget)
        commits = Counter(dict(row)["_commit_snapshot_id"] for row in rows.elements())
        assert conversion.snapshot_id not in commits, commits
        assert conversion.parent_id in commits and len(commits) >= 5, commits


def test_a_conversion_onto_main_pairs_each_replaced_key_as_an_update(corpus):
    for name in CONVERTED:
        scenario = corpus.scenarios[name]
        assert _pairs(_commit_changes(scenario, "converted onto main: ")) == Counter({
            ("UPDATE_BEFORE", 3, "v0-3"): 1, ("UPDATE_AFTER", 3, "s1-3"): 1,
            ("UPDATE_BEFORE", 4, "v0-4"): 1, ("UPDATE_AFTER", 4, "s2-4"): 1,
            ("UPDATE_BEFORE", 5, "v0-5"): 1, ("UPDATE_AFTER", 5, "s2-5"): 1,
            ("INSERT", 21, "s1-21"): 1, ("INSERT", 22, "s2-22"): 1}), name


@pytest.mark.parametrize("name", MIXED)
def test_a_key_deleted_by_position_and_by_key_in_one_commit_pairs_once(corpus, name):
    scenario = corpus.scenarios[name]
    assert _pairs(_commit_changes(scenario, "one commit: id 3 written three times")) == Counter({
        ("UPDATE_BEFORE", 3, "v0-3"): 1, ("UPDATE_AFTER", 3, "c-3"): 1,
        ("UPDATE_BEFORE", 7, "v0-7"): 1, ("UPDATE_AFTER", 7, "a-7"): 1,
        ("INSERT", 11, "b-11"): 1})
    assert _pairs(_commit_changes(scenario, "again over id 3")) == Counter({
        ("UPDATE_BEFORE", 3, "c-3"): 1, ("UPDATE_AFTER", 3, "d-3"): 1,
        ("UPDATE_BEFORE", 1, "v0-1"): 1, ("UPDATE_AFTER", 1, "b-1"): 1,
        ("INSERT", 12, "b-12"): 1})


def test_a_range_to_a_branch_equals_iceberg_javas_read_of_it(corpus):
    scenario = corpus.scenarios["write_audit_publish"]
    table = load_table(scenario.location)
    metadata = table.metadata
    first = scenario.snapshots[0].snapshot_id
    audit = metadata.snapshot_for_ref("audit").snapshot_id
    changes = meltwater.stream.changes(table, from_snapshot_id=first,
                                       to_ref="audit").read_all()
    assert_replays(scenario, metadata, first, audit, changes)
    cli = subprocess.run(
        [sys.executable, "-m", "meltwater.cli.main", "changes", scenario.location,
         "--from-snapshot", str(first), "--to-ref", "audit", "--format", "jsonl"],
        capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert sorted(json.loads(line)["id"] for line in cli.stdout.splitlines()) == sorted(
        changes.column("id").to_pylist())


def test_a_stream_follows_a_branch_and_main_through_publish_and_rollback(corpus):
    """Option `branch`: the stream of `audit` is audit's lineage; main's stream follows the
    fast-forward, the cherry-pick and the rollback as Iceberg Java's reads of main say
    (the rolled-back delete is not in main's history, so not in its stream)."""
    scenario = corpus.scenarios["write_audit_publish"]
    metadata = load_table(scenario.location).metadata
    for branch, head in (("audit", metadata.snapshot_for_ref("audit")),
                         (None, metadata.current_snapshot)):
        options = {"branch": branch} if branch else {}
        got, _ = Feed(scenario.location, options).rows(UNLIMITED)
        want = rows_of([scenario.snapshot(head.snapshot_id).rows()])
        net = Counter()
        for row, count in got.items():
            kind = dict(row)["_change_type"]
            plain = tuple(kv for kv in row if not kv[0].startswith("_"))
            net[plain] += -count if kind in ("DELETE", "UPDATE_BEFORE") else count
        assert +net == want and not -net, branch


def test_a_stream_of_a_tag_or_a_missing_branch_is_refused_in_one_line(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    with pytest.raises(OptionError, match="a tag names one snapshot"):
        stream_read({"path": scenario.location, "tag": "before_branch"})
    with pytest.raises(OptionError, match="starts by snapshot id"):
        stream_read({"path": scenario.location, "branch": "audit",
                     "stream-from-timestamp": "0"})
    metadata = load_table(scenario.location).metadata
    with pytest.raises(NoSuchSnapshotError, match="is a tag"):
        metadata.branch_head("before_branch")
    with pytest.raises(NoSuchSnapshotError, match="no branch or tag 'nope'"):
        metadata.branch_head("nope")
