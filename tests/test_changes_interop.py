"""Change reconstruction against Apache Iceberg Java's own reads, on every corpus scenario.

The invariant: replaying the changes of (from, to] on what Iceberg Java read at `from`
gives exactly what it read at `to`, where every DELETE (and UPDATE_BEFORE) removes a row
that existed. Iceberg Java itself refuses this job on tables with delete files, so its
time-travel reads are the only oracle, and they are enough.

Older truths are brought into the schema of `to` through table metadata (field ids), not
through meltwater's reader: a renamed column keeps its id, an added one reads as null.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

import meltwater.stream
from corpus import WRITERS_2026
from corpus.compare import (
    META,
    REMOVES,
    _canonical,
    assert_replays,
    live_ranges,
    row_multiset,
    truth_as,
)
from corpus.pyiceberg_corpus import PYICEBERG_SCENARIOS
from meltwater.planner.errors import ExpiredSnapshotsError, InvalidRangeError
from meltwater.planner.table.table_loading import load_table

ALL = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
       "position_deletes_with_rows", "maintenance", "evolution", "format_v1",
       "v3_deletion_vectors", "random_mix", "file_formats", "column_evolution", "small_pages",
       *WRITERS_2026,
       *PYICEBERG_SCENARIOS]
def _check_range(scenario, table, start_id, end_id, **options) -> pa.Table:
    changes = meltwater.stream.changes(table, from_snapshot_id=start_id,
                                       to_snapshot_id=end_id, **options).read_all()
    assert_replays(scenario, table.metadata, start_id, end_id, changes)
    return changes


@pytest.mark.parametrize("name", ALL)
def test_every_commit_replays_to_iceberg_javas_next_snapshot(corpus, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    checked = 0
    for parent, child in live_ranges(scenario, table.metadata):
        changes = _check_range(scenario, table, parent, child)
        _assert_no_carryover(changes, f"{name} at {child}")
        checked += 1
    assert checked >= 3


def _assert_no_carryover(changes: pa.Table, what: str) -> None:
    table_columns = [c for c in changes.column_names if c not in META]
    by_commit: dict[int, tuple[Counter, Counter]] = {}
    for row in changes.to_pylist():
        removed, added = by_commit.setdefault(row["_change_ordinal"], (Counter(), Counter()))
        key = tuple(_canonical(row[c]) for c in table_columns)
        (removed if row["_change_type"] in REMOVES else added)[key] += 1
    for removed, added in by_commit.values():
        assert not (removed & added), f"{what}: carry-over rows remain: {removed & added}"


@pytest.mark.parametrize("name", ALL)
def test_whole_history_and_middle_ranges_replay(corpus, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    metadata = table.metadata
    main = [s.snapshot_id for s in reversed(metadata.ancestors(metadata.current_snapshot_id))]
    first_parent = metadata.snapshot(main[0]).parent_id
    if first_parent is None:
        _check_range(scenario, table, None, main[-1])
    if len(main) >= 4:
        _check_range(scenario, table, main[1], main[-2])


def test_net_changes_equal_the_multiset_difference(corpus):
    for name in ("mor_partitioned", "equality_deletes", "random_mix", "cow_partitioned"):
        scenario = corpus.scenarios[name]
        table = load_table(scenario.location)
        metadata = table.metadata
        main = [s.snapshot_id
                for s in reversed(metadata.ancestors(metadata.current_snapshot_id))]
        start, end = main[1], main[-1]
        schema = metadata.schema_for(metadata.snapshot(end))
        net = meltwater.stream.changes(table, from_snapshot_id=start, to_snapshot_id=end,
                                       net=True, compute_updates=False).read_all()
        before = row_multiset(truth_as(scenario, metadata, start, schema))
        after = row_multiset(truth_as(scenario, metadata, end, schema))
        columns = [c for c in net.column_names if c not in META]
        removed, added = Counter(), Counter()
        for row in net.to_pylist():
            key = tuple(_canonical(row[c]) for c in columns)
            (removed if row["_change_type"] in REMOVES else added)[key] += 1
        assert removed == before - after, name
        assert added == after - before, name


def test_update_pairs_follow_identifier_fields(corpus):
    scenario = corpus.scenarios["equality_deletes"]
    table = load_table(scenario.location)
    changes = meltwater.stream.changes(table).read_all().to_pylist()
    befores = [r for r in changes if r["_change_type"] == "UPDATE_BEFORE"]
    afters = [r for r in changes if r["_change_type"] == "UPDATE_AFTER"]
    assert len(befores) == len(afters) >= 2
    for before, after in zip(befores, afters, strict=True):
        assert before["id"] == after["id"]
        assert before["_commit_snapshot_id"] == after["_commit_snapshot_id"]
    upsert = [r for r in befores if r["id"] == 4]
    assert upsert and upsert[0]["name"] == "n4"
    assert next(r for r in afters if r["id"] == 4)["name"] == "new4"
    no_op = [r for r in changes if r["id"] in (99, 77)]
    assert no_op == [], "deletes of keys that never existed are not changes"


def test_explicit_identifier_columns_and_delta_names(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    rows = meltwater.stream.changes(scenario.location, identifier_columns=["id"],
                                    change_type_names="delta").read_all().to_pylist()
    kinds = {r["_change_type"] for r in rows}
    assert {"update_preimage", "update_postimage", "insert", "delete"} <= kinds


def test_appends_only_reads_only_appended_rows(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    rows = meltwater.stream.changes(scenario.location, appends_only=True).read_all()
    assert set(rows.column("_change_type").to_pylist()) == {"INSERT"}
    appended = sum(int(s.summary.get("added-records", 0)) for s in scenario.snapshots
                   if s.operation == "append" and s.label.startswith("append ids"))
    assert rows.num_rows == appended


def test_filters_and_columns_apply_to_change_rows(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    everything = meltwater.stream.changes(scenario.location).read_all().to_pylist()
    filtered = meltwater.stream.changes(scenario.location, filter="category = 'b'",
                                        columns=["id", "amount"]).read_all()
    assert filtered.column_names == ["id", "amount", *META[:5]]
    expected = sorted((r["id"], r["_change_type"], r["_change_ordinal"]) for r in everything
                      if r["category"] == "b")
    got = sorted(zip(filtered.column("id").to_pylist(),
                     filtered.column("_change_type").to_pylist(),
                     filtered.column("_change_ordinal").to_pylist(), strict=True))
    assert got == expected and got


def test_ranges_that_are_not_a_lineage_are_refused(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    table = load_table(scenario.location)
    branch_head = scenario.record["refs"]["audit"]["snapshot_id"]
    main_head = scenario.record["current_snapshot_id"]
    with pytest.raises(InvalidRangeError, match=f"{branch_head} is not an ancestor of {main_head}"):
        meltwater.stream.changes(table, from_snapshot_id=branch_head,
                                 to_snapshot_id=main_head)


def test_expired_history_is_an_error_or_skipped_on_request(corpus, caplog):
    scenario = corpus.scenarios["maintenance"]
    table = load_table(scenario.location)
    expired = [s.snapshot_id for s in scenario.snapshots if s.expired]
    with pytest.raises(ExpiredSnapshotsError, match="expired"):
        meltwater.stream.changes(table, from_snapshot_id=expired[0])
    with pytest.raises(ExpiredSnapshotsError, match="start from"):
        meltwater.stream.changes(table)
    rows = meltwater.stream.changes(table, skip_expired=True).read_all()
    # skipped: the history up to the oldest retained commit's parent, which has expired;
    # the retained commits, replayed on what Iceberg Java read at that parent, give what
    # it reads at the head, and nothing comes from an expired commit
    metadata = table.metadata
    head = metadata.current_snapshot_id
    gone = metadata.ancestors(head)[-1].parent_id
    assert gone in expired
    assert_replays(scenario, metadata, gone, head, rows)
    assert set(rows.column("_commit_snapshot_id").to_pylist()) <= {
        s.snapshot_id for s in metadata.ancestors(head)}
    assert any(f"parent {gone} is gone" in message for message in caplog.messages)


def _cli(*args: str):
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).parent / "meltwater"
    return subprocess.run([str(exe), *args], capture_output=True, text=True)


def test_cli_changes_jsonl_and_debezium(corpus):
    import json

    scenario = corpus.scenarios["equality_deletes"]
    snaps = [s for s in scenario.snapshots if not s.expired]
    upsert = next(s for s in snaps if s.label.startswith("upsert"))
    result = _cli("changes", scenario.location, "--from-snapshot", str(upsert.parent_id),
                  "--to-snapshot", str(upsert.snapshot_id), "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((r["id"], r["_change_type"]) for r in rows) == [
        (4, "UPDATE_AFTER"), (4, "UPDATE_BEFORE"), (30, "INSERT")]
    debezium = _cli("changes", scenario.location, "--from-snapshot", str(upsert.parent_id),
                    "--to-snapshot", str(upsert.snapshot_id), "--format", "debezium-jsonl")
    assert debezium.returncode == 0, debezium.stderr
    events = [json.loads(line) for line in debezium.stdout.splitlines()]
    ops = sorted(e["op"] for e in events)
    assert ops == ["c", "u"]
    update = next(e for e in events if e["op"] == "u")
    assert update["before"]["name"] == "n4" and update["after"]["name"] == "new4"
    assert update["source"]["snapshot_id"] == upsert.snapshot_id


@pytest.mark.parametrize(("args", "message"), [
    (["--from-snapshot", "1"], "snapshot 1"),
    (["--identifier-columns", "nope"], "unknown column 'nope'"),
    (["--filter", "id >"], "filter"),
    (["--to-sequence", "0"], "no snapshot at or before sequence number 0"),
])
def test_cli_changes_bad_input_is_one_line_and_exit_2(corpus, args, message):
    location = corpus.scenarios["equality_deletes"].location
    result = _cli("changes", location, *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_v3_changes_carry_row_lineage_and_pair_updates_by_row_id(corpus):
    scenario = corpus.scenarios["v3_deletion_vectors"]
    table = load_table(scenario.location)
    update = next(s for s in scenario.snapshots if s.label == "MOR update as DV")
    rows = meltwater.stream.changes(table, from_snapshot_id=update.parent_id,
                                    to_snapshot_id=update.snapshot_id).read_all()
    assert rows.column_names[-7:-5] == ["_row_id", "_last_updated_sequence_number"]
    befores = [r for r in rows.to_pylist() if r["_change_type"] == "UPDATE_BEFORE"]
    afters = [r for r in rows.to_pylist() if r["_change_type"] == "UPDATE_AFTER"]
    assert befores and len(befores) == len(afters)
    for before, after in zip(befores, afters, strict=True):
        assert before["_row_id"] == after["_row_id"] is not None
        assert before["id"] == after["id"] and after["payload"] == "updated"
        assert after["_last_updated_sequence_number"] == update.sequence_number
        assert before["_last_updated_sequence_number"] < update.sequence_number
