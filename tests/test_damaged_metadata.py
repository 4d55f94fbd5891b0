"""Damaged or unusual metadata of Iceberg Java tables: read as Java reads it, or refused.

Each table here is a copy of a corpus table's `metadata/` directory (manifests and data
stay where the metadata points, in the corpus), edited the way a crashed writer or a
broken tool leaves it. What must never happen is a wrong answer with exit status 0: an
older version, an empty or different table, rows of nulls, a walk that never ends.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import fastavro
import pytest

import meltwater.stream
from meltwater.planner.changes.change_range import resolve_range
from meltwater.planner.errors import CorruptMetadataError, InvalidRangeError
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.spark.options import change_read

MELTWATER = Path(sys.executable).parent / "meltwater"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MELTWATER), *args], capture_output=True, text=True, timeout=60)


def _refused(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The one stderr line of a refusal (exit status 2), checked to name `needles`."""
    assert result.returncode == 2, (result.returncode, result.stdout[:500], result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


def _versions(metadata_dir: Path) -> list[Path]:
    return sorted(metadata_dir.glob("v*.metadata.json"),
                  key=lambda p: int(p.name[1:].split(".")[0]))


def _copy(scenario, tmp_path: Path) -> Path:
    """A table directory with copies of the scenario's metadata files."""
    table = tmp_path / scenario.name
    shutil.copytree(Path(scenario.location) / "metadata", table / "metadata")
    return table


def _edit_current(table: Path, edit) -> Path:
    """Rewrite the table's current metadata file (the newest version) through `edit`."""
    path = _versions(table / "metadata")[-1]
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))
    return path


# -- 1. a stale version hint ------------------------------------------------------------------


def test_a_stale_version_hint_reads_the_newest_committed_version(corpus, tmp_path):
    """A writer renamed v<N+1>.metadata.json in (the commit) and stopped before rewriting
    the hint: Java's HadoopTableOperations walks forward from the hint, and so do we."""
    scenario = corpus.scenarios["mor_partitioned"]
    table = _copy(scenario, tmp_path)
    versions = _versions(table / "metadata")
    assert len(versions) > 2
    (table / "metadata" / "version-hint.text").write_text("1")
    loaded = load_table(str(table))
    assert Path(loaded.metadata_location).name == versions[-1].name
    assert loaded.metadata.current_snapshot_id == scenario.record["current_snapshot_id"]
    # an unreadable hint: the newest listed, as Java falls back to listing
    (table / "metadata" / "version-hint.text").write_text("garbage")
    assert Path(load_table(str(table)).metadata_location).name == versions[-1].name


def test_a_hint_naming_a_missing_version_is_refused(corpus, tmp_path):
    scenario = corpus.scenarios["mor_partitioned"]
    table = _copy(scenario, tmp_path)
    (table / "metadata" / "version-hint.text").write_text("9999")
    with pytest.raises(CorruptMetadataError, match=r"version-hint\.text names version 9999, but "
                                              r"v9999\.metadata\.json is missing"):
        load_table(str(table))
    _refused(_cli("snapshots", str(table)), "version 9999")


# -- 2. refs that disagree with the snapshots -------------------------------------------------


def _main_of(obj: dict[str, Any]) -> int:
    return obj["refs"]["main"]["snapshot-id"]


DAMAGED_REFS = {
    "no current-snapshot-id": (lambda o: o.pop("current-snapshot-id"),
                               "current-snapshot-id is not set, but branch 'main'"),
    "current -1": (lambda o: o.update({"current-snapshot-id": -1}),
                   "current-snapshot-id is not set, but branch 'main'"),
    "main unknown": (lambda o: o["refs"]["main"].update({"snapshot-id": 42}),
                     "branch 'main' points at snapshot 42, which the table does not list"),
    "main disagrees": (lambda o: o["refs"]["main"].update(
        {"snapshot-id": o["snapshots"][0]["snapshot-id"]}), "does not match branch 'main'"),
    "tag unknown": (lambda o: o["refs"].update({"t": {"snapshot-id": 42, "type": "tag"}}),
                    "tag 't' points at snapshot 42, which the table does not list"),
    "current unknown without refs": (
        lambda o: (o.pop("refs"), o.update({"current-snapshot-id": 42})),
        "points at snapshot 42, which the table does not list"),
}


@pytest.mark.parametrize("damage", list(DAMAGED_REFS))
def test_refs_java_refuses_are_refused(corpus, tmp_path, damage):
    scenario = corpus.scenarios["mor_partitioned"]
    table = _copy(scenario, tmp_path)
    edit, message = DAMAGED_REFS[damage]
    path = _edit_current(table, edit)
    with pytest.raises(CorruptMetadataError, match=message) as error:
        load_table(str(table))
    assert path.name in str(error.value)
    line = _refused(_cli("changes", str(table), "--format", "jsonl"), path.name)
    assert message in line


# -- 3. a delete manifest labelled as data ----------------------------------------------------


def _relabel_deletes_as_data(table: Path, tmp_path: Path) -> tuple[int, int]:
    """In the newest metadata, the manifest list of a snapshot that added delete files
    re-written with its delete manifests labelled `content=0` (data). Returns the snapshot
    id and its parent's."""
    current = _versions(table / "metadata")[-1]
    obj = json.loads(current.read_text())
    for snapshot in obj["snapshots"]:
        with open(snapshot["manifest-list"], "rb") as f:
            reader = fastavro.reader(f)
            schema, records, meta = reader.writer_schema, list(reader), dict(reader.metadata)
        own = [r for r in records if r["content"] == 1
               and r["added_snapshot_id"] == snapshot["snapshot-id"]]
        if own and snapshot.get("parent-snapshot-id") is not None:
            break
    else:
        raise AssertionError("no snapshot of the scenario added delete files")
    for record in records:
        record["content"] = 0
    relabelled = tmp_path / "relabelled-manifest-list.avro"
    with open(relabelled, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), records,
                        metadata={k: v for k, v in meta.items() if not k.startswith("avro.")})
    snapshot["manifest-list"] = str(relabelled)
    current.write_text(json.dumps(obj))
    return snapshot["snapshot-id"], snapshot["parent-snapshot-id"]


def test_a_delete_manifest_labelled_data_is_refused(corpus, tmp_path):
    """Read as data, a position delete file's rows would come out as rows of nulls."""
    table = _copy(corpus.scenarios["mor_partitioned"], tmp_path)
    snapshot_id, parent_id = _relabel_deletes_as_data(table, tmp_path)
    message = "listed as a data manifest, but holds position deletes file"
    with pytest.raises(CorruptMetadataError, match=message):
        meltwater.stream.scan(str(table), snapshot_id=snapshot_id).read_all()
    _refused(_cli("scan", str(table), "--snapshot", str(snapshot_id), "--format", "jsonl"),
             message)
    _refused(_cli("changes", str(table), "--from-snapshot", str(parent_id),
                  "--to-snapshot", str(snapshot_id), "--format", "jsonl"), message)


# -- 4. a parent-id cycle ---------------------------------------------------------------------


def _make_cycle(obj: dict[str, Any]) -> None:
    """The oldest snapshot's parent becomes the current one: current -> ... -> oldest ->
    current, the loop a hand-edited or buggy rewrite leaves."""
    current = obj["current-snapshot-id"]
    chain, by_id = [], {s["snapshot-id"]: s for s in obj["snapshots"]}
    sid = current
    while sid is not None and sid in by_id:
        chain.append(sid)
        sid = by_id[sid].get("parent-snapshot-id")
    by_id[chain[-1]]["parent-snapshot-id"] = current


def test_a_parent_id_cycle_is_refused_not_walked_forever(corpus, tmp_path):
    scenario = corpus.scenarios["mor_partitioned"]
    table = _copy(scenario, tmp_path)
    path = _edit_current(table, _make_cycle)
    with pytest.raises(CorruptMetadataError, match="loops back on itself"):
        load_table(str(table))
    for args in (["changes", str(table), "--format", "jsonl"],
                 ["watch", str(table), "--after", "1", "--poll"]):
        _refused(_cli(*args), path.name, "loops back on itself")


# -- 5. a range whose start is after its end --------------------------------------------------


def test_a_start_after_the_end_is_refused_naming_the_bounds(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    table = load_table(scenario.location)
    head = table.metadata.current_snapshot
    first = table.metadata.ancestors(head.snapshot_id)[-1]
    late, early = str(head.timestamp_ms), str(first.timestamp_ms)
    line = _refused(_cli("changes", scenario.location, "--from-timestamp", late,
                         "--to-timestamp", early),
                    f"--from-timestamp {late}", f"--to-timestamp {early}")
    assert "--as-of" not in line
    _refused(_cli("changes", scenario.location, "--from-sequence",
                  str(head.sequence_number), "--to-sequence", str(first.sequence_number)),
             f"--from-sequence {head.sequence_number}",
             f"--to-sequence {first.sequence_number}")
    _refused(_cli("changes", scenario.location, "--from-timestamp", late,
                  "--to-snapshot", str(first.snapshot_id)),
             "--from-timestamp", f"--to-snapshot {first.snapshot_id}")
    _refused(_cli("changes", scenario.location, "--to-sequence",
                  str(head.sequence_number + 5)),
             f"--to-sequence {head.sequence_number + 5} is beyond the table's head")
    # a malformed time names the option it came from
    _refused(_cli("changes", scenario.location, "--from-timestamp", "yesterday"),
             "--from-timestamp 'yesterday'")
    # the Python API and the Spark options come to the same decision, in their words
    with pytest.raises(InvalidRangeError, match=f"from_timestamp_ms {late} is later than "
                                           f"to_timestamp_ms {early}"):
        meltwater.stream.changes(scenario.location, from_timestamp_ms=int(late),
                                 to_timestamp_ms=int(early))
    with pytest.raises(InvalidRangeError, match=f"to_sequence {head.sequence_number + 1} is "
                                           "beyond the table's head"):
        meltwater.stream.changes(scenario.location, to_sequence=head.sequence_number + 1)
    read = change_read({"start-timestamp": late, "endingTimestamp": early})
    with pytest.raises(InvalidRangeError, match=f"start-timestamp {late} is later than "
                                                f"endingTimestamp {early}"):
        meltwater.stream.change_feed(scenario.location, read.range, read.rows)
    # a start after the head with no end given is a valid, empty range (nothing since)
    since = meltwater.stream.range_request(from_timestamp_ms=head.timestamp_ms + 1)
    assert resolve_range(table, since).commits == ()
    up_to_head = meltwater.stream.range_request(to_sequence=head.sequence_number)
    assert resolve_range(table, up_to_head).to_snapshot_id == head.snapshot_id


# -- 3. a data file with neither field ids nor the table's names ------------------------------


def test_a_data_file_without_field_ids_or_matching_names_is_refused(corpus, tmp_path):
    """Without field ids a file is matched by column name; a file none of whose columns
    is the table's would read as rows of nulls. It is refused, naming the file."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.parquet as pq

    from meltwater.planner.scans.tasks import FileScanTask
    from meltwater.planner.table.manifests import ManifestReader
    from meltwater.stream.engine.scans.reader import read_task
    from meltwater.stream.errors import UnreadableFileError

    table = load_table(corpus.scenarios["cow_partitioned"].location)
    metadata = table.metadata
    reader = ManifestReader(metadata, table.io)
    manifest = next(m for m in reader.manifest_list(metadata.current_snapshot)
                    if m.content == 0)
    entry = next(e for e in reader.entries(manifest) if e.status != 2)
    original = pq.read_table(entry.file.file_path)
    plain = pa.table(original.columns, names=original.column_names)  # no field ids
    assert all(not f.metadata for f in plain.schema)

    def rows_of(table_: pa.Table, name: str) -> pa.Table:
        path = tmp_path / name
        pq.write_table(table_, path)
        file = dataclasses.replace(entry.file, file_path=str(path),
                                   file_size_in_bytes=path.stat().st_size)
        return pa.Table.from_batches(list(read_task(FileScanTask(file, 0), metadata.schema,
                                                    table.io)))

    expected = pa.Table.from_batches(list(read_task(FileScanTask(entry.file, 0),
                                                    metadata.schema, table.io)))
    assert rows_of(plain, "by-name.parquet").equals(expected)  # matched by name
    renamed = plain.rename_columns([f"c{i}" for i in range(plain.num_columns)])
    with pytest.raises(UnreadableFileError, match=r"foreign\.parquet: the file has no field ids "
                                             r"and none of its columns \(c0"):
        rows_of(renamed, "foreign.parquet")


# -- 6. a current-schema-id no schema has -----------------------------------------------------


def test_an_unknown_current_schema_id_is_refused_as_java_refuses_it(corpus, tmp_path):
    """Java's TableMetadataParser fails such a file ("Cannot find schema with
    current-schema-id=..."): no schema to read the table in."""
    table = _copy(corpus.scenarios["mor_partitioned"], tmp_path)
    path = _edit_current(table, lambda o: o.update({"current-schema-id": 77}))
    message = "current-schema-id 77 is not among the table's schemas (ids 0)"
    with pytest.raises(CorruptMetadataError, match=re.escape(message)):
        load_table(str(table))
    for command in ("snapshots", "scan", "plan", "changes"):
        _refused(_cli(command, str(table)), path.name, message)


# -- 7. a deletion vector naming no data file -------------------------------------------------


def _without_dv_references(table: Path, tmp_path: Path) -> None:
    """The current snapshot's delete manifests rewritten with every `referenced_data_file`
    null, as a broken writer could leave a v3 table."""
    current = _versions(table / "metadata")[-1]
    obj = json.loads(current.read_text())
    snapshot = next(s for s in obj["snapshots"]
                    if s["snapshot-id"] == obj["current-snapshot-id"])

    def rewrite(path: str, name: str, edit) -> Path:
        with open(path, "rb") as f:
            reader = fastavro.reader(f)
            schema, records, meta = reader.writer_schema, list(reader), dict(reader.metadata)
        for record in records:
            edit(record)
        out = tmp_path / name
        with open(out, "wb") as f:
            fastavro.writer(f, fastavro.parse_schema(schema), records,
                            metadata={k: v for k, v in meta.items() if not k.startswith("avro.")})
        return out

    def strip(entry):
        entry["data_file"]["referenced_data_file"] = None

    def relink(manifest):
        if manifest["content"] == 1:
            name = Path(manifest["manifest_path"]).name
            out = rewrite(manifest["manifest_path"], f"stripped-{name}", strip)
            manifest["manifest_path"], manifest["manifest_length"] = str(out), out.stat().st_size

    snapshot["manifest-list"] = str(rewrite(snapshot["manifest-list"], "list.avro", relink))
    current.write_text(json.dumps(obj))


def test_a_deletion_vector_without_referenced_data_file_is_refused(corpus, tmp_path):
    """The spec requires `referenced_data_file` of a DV: without it the rows it deletes
    cannot be told from the rows it does not (Java would index it under no file and read
    them all back). Refused in one line naming the Puffin file."""
    table = _copy(corpus.scenarios["v3_deletion_vectors"], tmp_path)
    _without_dv_references(table, tmp_path)
    message = "has no referenced_data_file, which the Iceberg spec requires of a deletion vector"
    with pytest.raises(CorruptMetadataError, match=message):
        meltwater.stream.scan(str(table)).read_all()
    out = tmp_path / "changes.jsonl"  # changes of the commits before it stream out first
    for args in (["scan", "--format", "jsonl"], ["plan", "--format", "json"],
                 ["changes", "--format", "jsonl", "--output", str(out)]):
        line = _refused(_cli(args[0], str(table), *args[1:]), message)
        assert re.search(r"deletion vector \S+\.puffin \(offset \d+\)", line), line
    assert not out.exists()
