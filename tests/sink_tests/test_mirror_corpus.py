"""A mirror fed meltwater's change feed equals what Iceberg Java reads, at every snapshot.

For every corpus scenario and both databases: one batch per commit of the main branch,
read as the service's mirror stream reads it (departing rows as key images), comparing the
mirror table with Iceberg Java's read after each; and the whole history in one batch, rows
read whole. A scenario whose oldest snapshots expired starts from Iceberg Java's read of the
oldest retained one, applied as INSERTs (what `starting-snapshot-as-inserts` does).

The mirror follows the schema of the commit each batch reaches (renames, drops, re-added
names and widenings by field id), so after each batch it is compared with Iceberg Java's
read at that snapshot in that snapshot's own schema, column for column.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pytest
from mirror_read import mirror_columns, read_mirror

import meltwater.stream
from corpus.compare import row_multiset
from meltwater.planner.table.table_loading import load_table
from meltwater.sinks import Mirror

# scenario -> explicit key column (None: the table's identifier fields); every scenario's
# truth has unique, non-null ids at every snapshot (checked below).
SCENARIOS = {
    "mor_partitioned": "id", "cow_partitioned": "id", "equality_deletes": None,
    "equality_global": "id", "position_deletes_with_rows": "id", "maintenance": "id",
    "evolution": "id", "format_v1": "id", "v3_deletion_vectors": "id", "random_mix": "id",
    "file_formats": "id", "column_evolution": None, "staged_upserts": "id",
    "staged_upserts_v2": "id", "mixed_row_deltas": "id", "mixed_row_deltas_v3": "id",
    "write_audit_publish": "id", "pyiceberg_history": "id",
}


@functools.cache
def _changes(location: str, start: int | None, end: int, key: str | None = None
             ) -> pa.Table:
    """The changes of (start, end]; with `key`, as a mirror's stream reads them (updates
    paired by the key, departing rows as key images: `mirror_source_options`)."""
    images = {} if key is None else {"identifier_columns": [key], "before_images": "key"}
    return meltwater.stream.changes(location, from_snapshot_id=start, to_snapshot_id=end,
                                    **images).read_all()


def _key(name: str, metadata) -> str:
    """The scenario's mirror key: its explicit one, else its one identifier field."""
    if SCENARIOS[name]:
        return SCENARIOS[name]
    (fid,) = metadata.schema.identifier_field_ids
    return metadata.schema.column_name(fid)


def truth_at(scenario, metadata, snapshot_id: int) -> tuple[pa.Table, object]:
    """Iceberg Java's read at a snapshot and the schema it is in (the snapshot's own)."""
    return (scenario.snapshot(snapshot_id).rows(),
            metadata.schema_for(metadata.snapshot(snapshot_id)))


def _as_inserts(rows: pa.Table, snapshot_id: int) -> pa.Table:
    n = rows.num_rows
    return (rows.append_column("_change_type", pa.array(["INSERT"] * n))
            .append_column("_change_ordinal", pa.array([0] * n, pa.int32()))
            .append_column("_commit_snapshot_id", pa.array([snapshot_id] * n, pa.int64())))


def _main_branch(metadata) -> list[int]:
    return [s.snapshot_id for s in reversed(metadata.ancestors(metadata.current_snapshot_id))]


def _assert_mirror_is_truth(url, scenario, metadata, snapshot_id, what) -> None:
    expected, schema = truth_at(scenario, metadata, snapshot_id)
    key = expected.column_names[0]
    assert expected.column(key).null_count == 0
    assert len(set(expected.column(key).to_pylist())) == expected.num_rows, "ids not unique"
    assert [n for n, _ in mirror_columns(url, scenario.name)] == \
        [f.name for f in schema.fields], f"{what}: the mirror's columns"
    mirrored = read_mirror(url, scenario.name, schema)
    got, want = row_multiset(mirrored), row_multiset(expected.select(mirrored.column_names))
    if got != want:
        raise AssertionError(f"{what}: mirror has {mirrored.num_rows} rows, Iceberg Java "
                             f"{expected.num_rows}; unexpected {list(got - want)[:3]}; "
                             f"missing {list(want - got)[:3]}")


def _start(mirror, scenario, metadata, main) -> tuple[int | None, int]:
    """Seed the mirror if history before main[0] expired; the range start and next batch id."""
    if metadata.snapshot(main[0]).parent_id is None:
        return None, 0
    seed, _ = truth_at(scenario, metadata, main[0])
    mirror.apply(0, _as_inserts(seed, main[0]), snapshot_id=main[0])
    return main[0], 1


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_one_batch_per_commit_matches_iceberg_java_at_every_snapshot(corpus, database, name):
    scenario = corpus.scenarios[name]
    metadata = load_table(scenario.location).metadata
    main = _main_branch(metadata)
    with Mirror(database, table=name, source=scenario.location,
                key_columns=[SCENARIOS[name]] if SCENARIOS[name] else None) as mirror:
        start, batch_id = _start(mirror, scenario, metadata, main)
        commits = main if start is None else main[1:]
        for snapshot_id in commits:
            batch = _changes(scenario.location, start, snapshot_id, _key(name, metadata))
            result = mirror.apply(batch_id, batch, snapshot_id=snapshot_id)
            assert not result.skipped and result.rows == batch.num_rows
            assert mirror.reached().batch_id == batch_id
            assert mirror.reached().snapshot_id == snapshot_id
            _assert_mirror_is_truth(database, scenario, metadata, snapshot_id,
                                    f"{name} after batch {batch_id} (snapshot {snapshot_id})")
            start, batch_id = snapshot_id, batch_id + 1
        assert batch_id >= 4  # maintenance keeps 4 snapshots, the others more


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_whole_history_in_one_batch_matches_iceberg_java(corpus, database, name):
    scenario = corpus.scenarios[name]
    metadata = load_table(scenario.location).metadata
    main = _main_branch(metadata)
    with Mirror(database, table=name, source=scenario.location,
                key_columns=[SCENARIOS[name]] if SCENARIOS[name] else None) as mirror:
        start, batch_id = _start(mirror, scenario, metadata, main)
        batch = _changes(scenario.location, start, main[-1])
        result = mirror.apply(batch_id, batch)
        # the position is the newest commit with changes (the last commits may have none)
        newest = batch.sort_by("_change_ordinal").column("_commit_snapshot_id")[-1].as_py()
        assert result.position.snapshot_id == newest
        _assert_mirror_is_truth(database, scenario, metadata, main[-1], f"{name} in one batch")
