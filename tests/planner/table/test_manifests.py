"""Manifest lists and manifests read with fastavro, against Iceberg Java's own summaries."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from meltwater.planner.errors import CorruptMetadataError
from meltwater.planner.spec.files import EntryStatus, FileContent, ManifestContent
from meltwater.planner.table.manifests import ManifestCache, ManifestReader
from meltwater.planner.table.table_loading import load_table


def _live(reader, snapshot):
    for manifest in reader.manifest_list(snapshot):
        yield from ((manifest, e) for e in reader.entries(manifest)
                    if e.status != EntryStatus.DELETED)


def test_live_entries_add_up_to_each_snapshots_summary(corpus):
    for scenario in corpus.scenarios.values():
        table = load_table(scenario.location)
        reader = ManifestReader(table.metadata, table.io, ManifestCache())
        for truth in scenario.snapshots:
            if truth.expired:
                continue
            snapshot = table.metadata.snapshot(truth.snapshot_id)
            records = data_files = delete_files = 0
            for _, entry in _live(reader, snapshot):
                if entry.file.content == FileContent.DATA:
                    records += entry.file.record_count
                    data_files += 1
                else:
                    delete_files += 1
            summary = snapshot.summary
            assert records == int(summary["total-records"]), (scenario.name, truth.snapshot_id)
            assert data_files == int(summary["total-data-files"])
            assert delete_files == int(summary.get("total-delete-files", 0))


def test_sequence_numbers_are_inherited_from_the_adding_manifest(corpus):
    scenario = corpus.scenarios["maintenance"]
    table = load_table(scenario.location)
    reader = ManifestReader(table.metadata, table.io, ManifestCache())
    snapshot = table.metadata.current_snapshot
    seen_added = False
    for manifest in reader.manifest_list(snapshot):
        for entry in reader.entries(manifest):
            assert entry.sequence_number <= snapshot.sequence_number
            if entry.status == EntryStatus.ADDED:
                seen_added = True
                assert entry.sequence_number == manifest.sequence_number
                assert entry.snapshot_id == manifest.added_snapshot_id
    assert seen_added
    v1 = load_table(corpus.scenarios["format_v1"].location)
    reader = ManifestReader(v1.metadata, v1.io, ManifestCache())
    entries = [e for _, e in _live(reader, v1.metadata.current_snapshot)]
    assert entries and all(e.sequence_number == 0 for e in entries)


def test_bounds_partitions_and_v3_fields_are_decoded(corpus):
    table = load_table(corpus.scenarios["v3_deletion_vectors"].location)
    reader = ManifestReader(table.metadata, table.io, ManifestCache())
    files = [e.file for _, e in _live(reader, table.metadata.current_snapshot)]
    dvs = [f for f in files if f.is_deletion_vector]
    data = {f.file_path: f for f in files if f.content == FileContent.DATA}
    assert dvs and all(dv.referenced_data_file in data for dv in dvs)
    assert all(dv.content_offset is not None and dv.content_size_in_bytes for dv in dvs)
    lineage = [f.first_row_id for f in data.values() if f.first_row_id is not None]
    assert lineage and len(set(lineage)) == len(lineage), "v3 files inherit distinct row ids"
    for f in data.values():
        assert f.partition in (("x",), ("y",))
        assert isinstance(f.lower_bounds[1], int) and f.lower_bounds[1] <= f.upper_bounds[1]
    rich = load_table(corpus.scenarios["random_mix"].location)
    reader = ManifestReader(rich.metadata, rich.io, ManifestCache())
    for _, entry in _live(reader, rich.metadata.current_snapshot):
        bucket, day = entry.file.partition
        assert 0 <= bucket < 4 and (day is None or isinstance(day, int))


def test_manifest_list_summaries_and_contents(corpus):
    table = load_table(corpus.scenarios["mor_partitioned"].location)
    reader = ManifestReader(table.metadata, table.io, ManifestCache())
    manifests = reader.manifest_list(table.metadata.current_snapshot)
    assert {m.content for m in manifests} == {ManifestContent.DATA, ManifestContent.DELETES}
    for manifest in manifests:
        assert manifest.partitions is not None and len(manifest.partitions) == 2


def test_manifests_are_decoded_once_per_path(corpus):
    table = load_table(corpus.scenarios["random_mix"].location)
    cache = ManifestCache()
    reader = ManifestReader(table.metadata, table.io, cache)
    manifests = reader.manifest_list(table.metadata.current_snapshot)
    for manifest in manifests:
        reader.entries(manifest)
    assert cache.misses == len(manifests) and cache.hits == 0
    again = ManifestReader(load_table(table.location).metadata, table.io, cache)
    for manifest in manifests:
        again.entries(manifest)
    assert cache.misses == len(manifests) and cache.hits == len(manifests)


def test_corrupt_and_missing_manifests_name_the_file(corpus, tmp_path):
    source = Path(corpus.scenarios["format_v1"].location)
    copy = tmp_path / "t"
    shutil.copytree(source, copy)
    table = load_table(str(copy))
    reader = ManifestReader(table.metadata, table.io, ManifestCache())
    snapshot = table.metadata.current_snapshot
    manifest = reader.manifest_list(snapshot)[0]
    # manifests point at the original absolute paths; corrupt a copy and point at it
    broken = tmp_path / "broken.avro"
    broken.write_bytes(Path(manifest.manifest_path).read_bytes()[:100])
    from dataclasses import replace

    with pytest.raises(CorruptMetadataError, match=r"broken\.avro"):
        reader.entries(replace(manifest, manifest_path=str(broken)))
    with pytest.raises(CorruptMetadataError, match=r"missing\.avro: manifest not found"):
        reader.entries(replace(manifest, manifest_path=str(tmp_path / "missing.avro")))


def test_a_v2_manifest_gains_row_ids_in_a_v3_snapshot_despite_the_cache(corpus):
    scenario = corpus.scenarios["v3_deletion_vectors"]
    table = load_table(scenario.location)
    cache = ManifestCache()
    reader = ManifestReader(table.metadata, table.io, cache)
    first = table.metadata.snapshot(scenario.snapshots[0].snapshot_id)
    current = table.metadata.current_snapshot
    old = reader.manifest_list(first)[0]
    carried = next(m for m in reader.manifest_list(current)
                   if m.manifest_path == old.manifest_path)
    assert old.first_row_id is None and carried.first_row_id is not None
    assert all(e.file.first_row_id is None for e in reader.entries(old))
    assert all(e.file.first_row_id is not None for e in reader.entries(carried)
               if e.file.content == FileContent.DATA)


def _rewritten_in_small_blocks(manifest_path: str, target: Path) -> None:
    """The same manifest, rewritten with fastavro into blocks of a few entries each."""
    import fastavro

    with open(manifest_path, "rb") as handle:
        reader = fastavro.reader(handle)
        schema, records = reader.writer_schema, list(reader)
        metadata = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
    with open(target, "wb") as out:
        fastavro.writer(out, schema, records, codec="deflate", sync_interval=300,
                        metadata=metadata)


def test_entries_naming_equals_the_full_read_filtered(corpus, tmp_path):
    from dataclasses import replace

    import fastavro

    table = load_table(corpus.scenarios["random_mix"].location)
    reader = ManifestReader(table.metadata, table.io, ManifestCache())
    manifest = max((m for m in reader.manifest_list(table.metadata.current_snapshot)
                    if m.content == ManifestContent.DATA), key=lambda m: m.manifest_length)
    small = replace(manifest, manifest_path=str(tmp_path / "small-blocks.avro"))
    _rewritten_in_small_blocks(manifest.manifest_path, Path(small.manifest_path))
    with open(small.manifest_path, "rb") as handle:
        assert len(list(fastavro.block_reader(handle))) > 2, "the test needs several blocks"
    every = ManifestReader(table.metadata, table.io, None).entries(small)
    paths = [e.file.file_path for e in every]
    for wanted in ([paths[0]], [paths[-1]], paths[1::3], ["nowhere.parquet"], []):
        expected = tuple(e for e in every if e.file.file_path in wanted)
        cold = ManifestReader(table.metadata, table.io, ManifestCache())
        assert cold.entries_naming(small, wanted) == expected
        assert cold.cache.misses == 0, "a partial read decodes blocks, not the manifest"
        assert cold.entries_naming(small, wanted) == expected
        assert cold.cache.misses == 1, "asked again, the manifest is decoded and cached"
        assert cold.entries_naming(small, wanted) == expected
        assert cold.cache.misses == 1 and cold.cache.hits == 1
        warm = ManifestReader(table.metadata, table.io, ManifestCache())
        warm.entries(small)
        assert warm.entries_naming(small, wanted) == expected


def test_decoded_data_files_set_every_field_and_pickle(corpus):
    import pickle
    from dataclasses import fields

    from meltwater.planner.spec.files import DataFile

    names = {f.name for f in fields(DataFile)}
    for name in ("v3_deletion_vectors", "random_mix", "equality_deletes"):
        table = load_table(corpus.scenarios[name].location)
        reader = ManifestReader(table.metadata, table.io, ManifestCache())
        for _, entry in _live(reader, table.metadata.current_snapshot):
            assert set(vars(entry.file)) == names
            assert pickle.loads(pickle.dumps(entry)) == entry
