"""The corpus itself: complete histories, ground truth for every snapshot, promised coverage.

Later issues judge meltwater against this corpus, so these tests make sure it holds what it
claims: every listed kind of commit and delete file really occurs, the truth is what a second
reader (pyiceberg, where it supports the feature) also reads, and Iceberg's own changelog scan
really refuses the tables meltwater exists for.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from corpus import WRITERS_2026
from corpus.compare import assert_same_rows
from corpus.pyiceberg_corpus import PYICEBERG_SCENARIOS

ROW_FIELD_ID = 2147483544  # the spec's id of the `row` column in position delete files
SCENARIOS = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
             "position_deletes_with_rows", "maintenance", "evolution", "format_v1",
             "v3_deletion_vectors", "random_mix", "file_formats", "column_evolution",
             "small_pages", *WRITERS_2026, *PYICEBERG_SCENARIOS]


def test_every_scenario_was_generated(corpus):
    assert sorted(corpus.scenarios) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_history_is_complete_with_truth_per_snapshot(corpus, name):
    scenario = corpus.scenarios[name]
    snapshots = scenario.snapshots
    assert len(snapshots) >= 5, f"{name} has a short history"
    by_id = {s.snapshot_id: s for s in snapshots}
    roots = [s for s in snapshots if s.parent_id is None]
    assert len(roots) == 1, f"{name}: one history root expected, found {len(roots)}"
    for snap in snapshots:
        truth = snap.rows()
        assert truth.num_rows == snap.row_count
        if snap.parent_id is None:
            continue
        parent = by_id[snap.parent_id]
        if scenario.format_version == 1:
            assert snap.sequence_number == 0
        else:
            assert snap.sequence_number > parent.sequence_number
    assert Path(scenario.metadata_location.removeprefix("file://")).exists()  # pyiceberg: URIs


def test_merge_on_read_scenarios_carry_position_deletes(corpus):
    for name in ("mor_partitioned", "maintenance", "evolution", "random_mix"):
        assert corpus.scenarios[name].delete_files["position"] > 0, name
    ops = {s.operation for s in corpus.scenarios["mor_partitioned"].snapshots}
    assert {"append", "overwrite", "delete"} <= ops


def test_copy_on_write_scenarios_rewrite_files_and_drop_partitions(corpus):
    for name in ("cow_partitioned", "format_v1"):
        scenario = corpus.scenarios[name]
        assert scenario.delete_files == {"position": 0, "equality": 0, "dv": 0}
        assert any(s.operation == "overwrite" and s.removed_data_files > 0
                   for s in scenario.snapshots), name
        metadata_deletes = [s for s in scenario.snapshots
                            if s.operation == "delete" and s.added_data_files == 0
                            and s.removed_data_files > 0]
        assert metadata_deletes, f"{name} lacks a metadata-only delete"
    assert corpus.scenarios["format_v1"].format_version == 1


def test_equality_delete_scenarios(corpus):
    eq = corpus.scenarios["equality_deletes"]
    assert eq.delete_files["equality"] >= 7
    assert eq.record["identifier_fields"] == ["id"]
    final = {r["id"]: r for r in eq.snapshots[-1].rows().to_pylist()}
    assert 2 not in final and 3 not in final and 14 not in final
    assert final[4]["name"] == "new4", "the upsert's new row must survive its own delete"
    assert 40 in final, "an equality delete must not apply to data of its own commit"
    assert 50 not in final and 52 not in final, "a null key deletes rows with null"
    assert 6 in final and 7 not in final, "multi-column keys match on every column"
    glob = corpus.scenarios["equality_global"]
    final = {r["id"] for r in glob.snapshots[-1].rows().to_pylist()}
    assert 25 not in final and 33 not in final, "a global delete reaches partitioned files"
    assert 22 not in final and 23 in final, "a partition-scoped delete stays in its partition"
    assert 3 in final, "a row re-inserted after its delete is live"


def _delete_files_with_rows(location: str) -> list[Path]:
    found = []
    for path in Path(location, "data").rglob("*.parquet"):
        schema = pq.read_schema(path)
        if "row" in schema.names:
            field = schema.field("row")
            if int((field.metadata or {}).get(b"PARQUET:field_id", b"0")) == ROW_FIELD_ID:
                found.append(path)
    return found


def test_position_deletes_carry_deleted_rows(corpus):
    scenario = corpus.scenarios["position_deletes_with_rows"]
    assert len(_delete_files_with_rows(scenario.location)) >= 6
    assert _delete_files_with_rows(corpus.scenarios["mor_partitioned"].location) == []
    final = {r["id"] for r in scenario.snapshots[-1].rows().to_pylist()}
    assert not final & {2, 3, 5, 21, 14, 15, 17, 18, 9, 19, 30}


def test_maintenance_rewrites_and_expires(corpus):
    scenario = corpus.scenarios["maintenance"]
    labels = [s.label for s in scenario.snapshots]
    for step in ("rewrite_position_delete_files", "rewrite_data_files", "rewrite_manifests"):
        assert any(label == step for label in labels), step
    assert sum(s.operation == "replace" for s in scenario.snapshots) >= 2
    assert any(s.expired for s in scenario.snapshots)
    assert not scenario.snapshots[-1].expired


def test_evolution_changes_schema_and_spec(corpus):
    scenario = corpus.scenarios["evolution"]
    assert len({s.schema_id for s in scenario.snapshots}) >= 4
    final = scenario.snapshots[-1].rows()
    assert final.column_names == ["id", "full_name", "score", "note", "extra"]
    assert str(final.schema.field("score").type) == "int64"
    first = scenario.snapshots[0].rows()
    assert first.column_names == ["id", "name", "score"]


def test_v3_scenario_has_deletion_vectors(corpus):
    scenario = corpus.scenarios["v3_deletion_vectors"]
    assert scenario.format_version == 3
    assert scenario.delete_files["dv"] >= 4
    assert scenario.delete_files["position"] >= 1, "v2 position deletes precede the DVs"


def test_random_mix_covers_the_rich_schema(corpus):
    scenario = corpus.scenarios["random_mix"]
    assert len(scenario.snapshots) >= 15
    schema = scenario.snapshots[-1].rows().schema
    types = {str(f.type).split("<")[0].split("[")[0].split("(")[0] for f in schema}
    for expected in ("int64", "int32", "string", "double", "float", "decimal128", "date32",
                     "timestamp", "bool", "binary", "struct", "list", "map"):
        assert expected in types, expected
    assert {s.operation for s in scenario.snapshots} >= {"append", "overwrite", "delete"}


@pytest.mark.parametrize("name", ["mor_partitioned", "equality_deletes", "equality_global",
                                  "position_deletes_with_rows", "evolution",
                                  "v3_deletion_vectors", *WRITERS_2026])
def test_iceberg_changelog_scan_refuses_delete_files(corpus, name):
    verdict = corpus.scenarios[name].record["iceberg_changelog"]
    assert verdict.startswith("refused: Delete files are currently not supported"), verdict


def test_the_2026_shapes_are_what_their_scenarios_say(corpus):
    """Staged upserts: equality deletes on a staging branch, converted onto main with DVs
    (v3) or position deletes (v2), and a same-branch conversion that removes equality
    delete files; mixed RowDeltas: one commit adding data, deletes by position and by key;
    write-audit-publish: commits on a branch, main fast-forwarded, a cherry-pick, a
    rollback (a snapshot main no longer reaches)."""
    for name, kind in (("staged_upserts", "dv"), ("staged_upserts_v2", "position")):
        scenario = corpus.scenarios[name]
        staged = [s for s in scenario.snapshots if "on staging" in s.label]
        assert len(staged) == 3 and all(s.added_delete_files["equality"] == 1 for s in staged)
        same = next(s for s in scenario.snapshots if s.label.startswith("same-branch"))
        assert same.added_delete_files[kind] >= 1 and same.added_data_files == 0
        assert int(same.summary.get("removed-equality-delete-files", 0)) == 1, same.summary
        assert set(scenario.record["refs"]) == {"main", "staging"}
    for name, kind in (("mixed_row_deltas", "position"), ("mixed_row_deltas_v3", "dv")):
        mixed = [s for s in corpus.scenarios[name].snapshots
                 if s.added_delete_files["equality"] and s.added_delete_files[kind]]
        assert len(mixed) == 4 and sum(s.added_data_files > 0 for s in mixed) == 3
    scenario = corpus.scenarios["write_audit_publish"]
    assert scenario.record["refs"]["audit"]["type"] == "branch"
    main = set()
    current = scenario.record["current_snapshot_id"]
    by_id = {s.snapshot_id: s for s in scenario.snapshots}
    while current is not None:
        main.add(current)
        current = by_id[current].parent_id
    off_main = [s.label for s in scenario.snapshots if s.snapshot_id not in main]
    assert "MOR delete on main, then rolled back" in off_main
    assert "append ids 16..18 on audit" in off_main  # cherry-picked: main has a copy
    assert any(s.label == "audit's append cherry-picked onto main" for s in scenario.snapshots)


def test_iceberg_changelog_scan_refuses_the_rich_schema(corpus):
    """Its carry-over removal sorts rows, and a map column cannot be sorted."""
    verdict = corpus.scenarios["random_mix"].record["iceberg_changelog"]
    assert verdict.startswith("refused:"), verdict


def test_iceberg_changelog_scan_reads_copy_on_write(corpus):
    assert corpus.scenarios["cow_partitioned"].record["iceberg_changelog"].startswith("ok")


@pytest.mark.parametrize("name", SCENARIOS)
def test_truth_agrees_with_pyiceberg_where_it_can_read(corpus, name):
    """pyiceberg 0.12 reads position deletes and DVs but refuses equality deletes and Avro
    data files; those snapshots are counted as refused, never as agreeing."""
    from pyiceberg.table import StaticTable

    scenario = corpus.scenarios[name]
    table = StaticTable.from_metadata(scenario.metadata_location)
    compared = refused = 0
    for snap in scenario.snapshots:
        if snap.expired:
            continue
        try:
            rows = table.scan(snapshot_id=snap.snapshot_id).to_arrow()
        except Exception as error:
            known_limit = ((scenario.delete_files["equality"] and "equality deletes" in str(error))
                           or (name == "file_formats" and "format" in str(error)))
            if known_limit:
                refused += 1
                continue
            raise
        assert_same_rows(rows, snap.rows(), f"{name} at snapshot {snap.snapshot_id}")
        compared += 1
    assert compared >= 1
    if not scenario.delete_files["equality"] and name != "file_formats":
        assert refused == 0


def test_file_formats_scenario_has_orc_and_avro_files(corpus):
    location = Path(corpus.scenarios["file_formats"].location, "data")
    suffixes = {p.suffix for p in location.rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert {".orc", ".avro", ".parquet"} <= suffixes, suffixes
