"""Loading tables and reading their metadata, on tables written by Iceberg Java."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from meltwater.planner.errors import (
    CorruptMetadataError,
    NoSuchSnapshotError,
    NoSuchTableError,
    UnsupportedFeatureError,
)
from meltwater.planner.table.table_loading import load_table, resolve_snapshot


def test_loads_every_scenario_from_its_directory_via_version_hint(corpus):
    for scenario in corpus.scenarios.values():
        table = load_table(scenario.location)
        assert table.metadata_location == scenario.metadata_location
        assert table.metadata.format_version == scenario.format_version
        assert table.metadata.current_snapshot_id == scenario.record["current_snapshot_id"]


def test_snapshot_models_match_what_iceberg_java_recorded(corpus):
    for scenario in corpus.scenarios.values():
        metadata = load_table(scenario.location).metadata
        for truth in scenario.snapshots:
            if truth.expired:
                assert truth.snapshot_id not in metadata.snapshots
                continue
            snapshot = metadata.snapshot(truth.snapshot_id)
            assert snapshot.parent_id == truth.parent_id
            assert snapshot.sequence_number == truth.sequence_number
            assert snapshot.operation == truth.operation
            assert snapshot.timestamp_ms == truth.timestamp_ms
            assert snapshot.schema_id == truth.schema_id
        refs = {name: (ref.snapshot_id, ref.type) for name, ref in metadata.refs.items()}
        expected = {name: (r["snapshot_id"], r["type"])
                    for name, r in scenario.record["refs"].items()}
        assert refs == expected


def test_explicit_metadata_file_and_file_uri(corpus):
    scenario = corpus.scenarios["evolution"]
    older = sorted(Path(scenario.location, "metadata").glob("v*.metadata.json"),
                   key=lambda p: int(p.name[1:].split(".")[0]))[2]
    table = load_table(str(older))
    assert table.metadata_location == str(older)
    assert load_table("file://" + scenario.location).metadata.current_snapshot_id == (
        scenario.record["current_snapshot_id"])


def test_newest_metadata_file_without_version_hint(corpus, tmp_path):
    source = Path(corpus.scenarios["format_v1"].location)
    copy = tmp_path / "t"
    shutil.copytree(source / "metadata", copy / "metadata")
    (copy / "metadata" / "version-hint.text").unlink()
    table = load_table(str(copy))
    assert Path(table.metadata_location).name == Path(
        corpus.scenarios["format_v1"].metadata_location).name


def test_newest_metadata_file_is_never_a_writers_temporary_file(corpus, tmp_path):
    """Hadoop tables write `<uuid>.metadata.json` and rename it to `v<N>.metadata.json`:
    without a version hint (deleted while Iceberg rewrites it) the temporary file must not
    win, even when its uuid starts with digits only, nor be read when it is alone."""
    source = Path(corpus.scenarios["format_v1"].location) / "metadata"
    copy = tmp_path / "t"
    (copy / "metadata").mkdir(parents=True)
    newest = sorted(source.glob("v*.metadata.json"),
                    key=lambda p: int(p.name[1:].split(".")[0]))[-1]
    shutil.copy(newest, copy / "metadata" / newest.name)
    (copy / "metadata" / "83920417-1b2c-4d3e-8f40-5a6b7c8d9e0f.metadata.json").write_text(
        newest.read_text()[:100])  # half written
    (copy / "metadata" / "9f0e1d2c-3b4a-4c5d-8e6f-708192a3b4c5.gz.metadata.json").write_text("")
    assert Path(load_table(str(copy)).metadata_location).name == newest.name
    (copy / "metadata" / newest.name).unlink()
    with pytest.raises(NoSuchTableError, match="not an Iceberg table"):
        load_table(str(copy))
    catalog = copy / "metadata" / "00007-1b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9.metadata.json"
    shutil.copy(newest, catalog)  # other catalogs' names: <NNNNN>-<uuid>.metadata.json
    assert load_table(str(copy)).metadata_location == str(catalog)


def test_version_hint_deleted_between_exists_and_read(corpus):
    """Iceberg deletes version-hint.text before renaming the new one in: a reader that saw
    it exist may find it gone, and then lists the metadata files instead of failing."""
    from meltwater.planner.errors import NoSuchFileError
    from meltwater.planner.table.fileio import PyArrowFileIO

    class HintVanishes(PyArrowFileIO):
        def read_bytes(self, location, offset=0, length=None):
            if location.endswith("version-hint.text"):
                raise NoSuchFileError(f"{location}: file not found")
            return super().read_bytes(location, offset, length)

    scenario = corpus.scenarios["format_v1"]
    table = load_table(scenario.location, HintVanishes())
    assert table.metadata_location == scenario.metadata_location


def test_schemas_specs_and_identifier_fields(corpus):
    metadata = load_table(corpus.scenarios["evolution"].location).metadata
    assert [f.name for f in metadata.schema.fields] == ["id", "full_name", "score", "note",
                                                         "extra"]
    assert str(metadata.schema.find_field(3).type) == "long"
    transforms = {f.transform for spec in metadata.specs.values() for f in spec.fields}
    assert {"truncate[2]", "bucket[4]"} <= transforms and len(metadata.specs) >= 4
    assert [f.transform for f in metadata.spec.fields] == ["bucket[4]"]
    eq = load_table(corpus.scenarios["equality_deletes"].location).metadata
    assert eq.schema.identifier_field_ids == (1,)


def test_refs_and_time_travel_resolution(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    table = load_table(scenario.location)
    branch = resolve_snapshot(table, ref="audit")
    assert branch.snapshot_id == scenario.record["refs"]["audit"]["snapshot_id"]
    third = scenario.snapshots[2]
    assert resolve_snapshot(table, as_of_ms=third.timestamp_ms).snapshot_id == third.snapshot_id
    with pytest.raises(NoSuchSnapshotError, match="no branch or tag 'nope'"):
        resolve_snapshot(table, ref="nope")
    with pytest.raises(NoSuchSnapshotError, match="snapshot 42 does not exist"):
        resolve_snapshot(table, snapshot_id=42)
    with pytest.raises(NoSuchSnapshotError, match="no snapshot at or before"):
        resolve_snapshot(table, as_of_ms=1)


def test_bad_tables_fail_with_one_clear_line(tmp_path, corpus):
    with pytest.raises(NoSuchTableError, match="not an Iceberg table"):
        load_table(str(tmp_path))
    bad = tmp_path / "bad"
    (bad / "metadata").mkdir(parents=True)
    (bad / "metadata" / "v1.metadata.json").write_text("{not json")
    with pytest.raises(CorruptMetadataError, match=r"v1\.metadata\.json: not valid JSON"):
        load_table(str(bad))
    source = json.loads(Path(corpus.scenarios["format_v1"].metadata_location).read_text())
    source["format-version"] = 9
    (bad / "metadata" / "v2.metadata.json").write_text(json.dumps(source))
    with pytest.raises(UnsupportedFeatureError, match="unsupported table format version 9"):
        load_table(str(bad))
    del source["location"]
    source["format-version"] = 2
    (bad / "metadata" / "v3.metadata.json").write_text(json.dumps(source))
    with pytest.raises(CorruptMetadataError, match="missing required field 'location'"):
        load_table(str(bad))


def test_a_half_written_catalog_named_newest_file_is_retryable(corpus, tmp_path):
    """A catalog writes `<NNNNN>-<uuid>.metadata.json` in place: read by the table's
    location, a newest such file that does not parse may still be being written, so the
    error is MetadataInFlightError, which the service retries; once whole it is read. The
    same file named by the caller is read as it is: a plain CorruptMetadataError."""
    from meltwater.planner.errors import CorruptMetadataError, MetadataInFlightError

    source = Path(corpus.scenarios["format_v1"].location) / "metadata"
    newest = sorted(source.glob("v*.metadata.json"),
                    key=lambda p: int(p.name[1:].split(".")[0]))[-1]
    metadata = tmp_path / "t" / "metadata"
    metadata.mkdir(parents=True)
    shutil.copy(newest, metadata / "00001-1b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9.metadata.json")
    writing = metadata / "00002-2b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9.metadata.json"
    writing.write_text(newest.read_text()[:150])
    with pytest.raises(MetadataInFlightError, match="may still be being written") as raised:
        load_table(str(tmp_path / "t"))
    assert raised.value.retryable and "00002-" in str(raised.value)
    with pytest.raises(CorruptMetadataError) as named:
        load_table(str(writing))
    assert not isinstance(named.value, MetadataInFlightError)
    writing.write_text(newest.read_text())
    assert load_table(str(tmp_path / "t")).metadata_location == str(writing)
