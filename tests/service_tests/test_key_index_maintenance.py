"""The key index follows what table maintenance does, on a table Iceberg Java writes live.

The live writer commits upserts (equality deletes by `id` with the new rows), updates and
deletes (position deletes), and in between Iceberg's own maintenance: `rewrite_data_files`
(every row moves to new files), `rewrite_position_delete_files`, `expire_snapshots` and
`rollback_to_snapshot`. Every commit's changes are read through one key index kept across
the whole history, as a service keeps it, and without one: the rows are the same, and
applied to what Iceberg Java read at the parent they give what it read at the commit.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

import meltwater.stream
from live.client import SCHEMA, truth_table
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.keys import key_index as key_index_module

HISTORY = ["append", "append", "append", "upsert", "update", "upsert", "delete", "upsert",
           "compact", "upsert", "upsert", "update", "rewrite-deletes", "upsert", "expire",
           "upsert", "upsert", "rollback", "upsert", "equality", "upsert"]
REMOVES = ("DELETE", "UPDATE_BEFORE")


def _rows(table: pa.Table) -> Counter:
    table = table.select(SCHEMA.names).cast(SCHEMA)
    return Counter(tuple(sorted(r.items())) for r in table.to_pylist())


def test_the_index_follows_compaction_rewrites_expiry_and_rollback(live_writer, tmp_path):
    writer = live_writer(seed=11)
    index_dir = tmp_path / "index"
    truths: dict[int, Counter] = {}
    checked = 0
    for kind in HISTORY:
        before = writer.commits[-1].snapshot_id if writer.commits else None
        retained = len(load_table(writer.location).metadata.snapshots) if before else 0
        commit = writer.commit(kind)
        truths[commit.snapshot_id] = _rows(truth_table(commit))
        table = load_table(writer.location)
        if kind == "expire":  # no new snapshot; older ones gone
            assert commit.snapshot_id == before and len(table.metadata.snapshots) < retained
            continue
        if kind == "rollback":  # no new snapshot: the current one is the old parent
            assert commit.snapshot_id == table.metadata.snapshot(before).parent_id
            continue
        if kind in ("compact", "rewrite-deletes"):
            assert table.metadata.snapshot(commit.snapshot_id).operation == "replace"
        parent = table.metadata.snapshot(commit.snapshot_id).parent_id
        plain = meltwater.stream.changes(table, from_snapshot_id=parent,
                                         to_snapshot_id=commit.snapshot_id).read_all()
        indexed = meltwater.stream.changes(table, from_snapshot_id=parent,
                                           to_snapshot_id=commit.snapshot_id,
                                           key_index_dir=index_dir).read_all()
        assert _rows(indexed) == _rows(plain), f"{kind} at {commit.snapshot_id}"
        kinds = indexed.column("_change_type").to_pylist()
        removed = _rows(indexed.filter(pa.array([k in REMOVES for k in kinds], pa.bool_())))
        added = _rows(indexed.filter(pa.array([k not in REMOVES for k in kinds], pa.bool_())))
        start = truths[parent] if parent is not None else Counter()
        assert removed <= start, f"{kind} at {commit.snapshot_id}: removed rows not there"
        assert start - removed + added == truths[commit.snapshot_id], \
            f"{kind} at {commit.snapshot_id} does not replay to Iceberg Java's read"
        checked += 1
    assert checked >= len(HISTORY) - 3
    indexes = [i for d, i in key_index_module._indexes.items() if index_dir in d.parents]
    assert indexes and sum(i.files_found for i in indexes) > 0, "the index was never used"
