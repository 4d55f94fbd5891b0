"""The Iceberg Java corpus written natively at s3:// locations, read back from SeaweedFS.

build.ensure_s3_corpus() has Iceberg Java write every scenario with its warehouse at
s3://lake (no relocation: every path in every file is Iceberg Java's own), recording what
Iceberg Java reads at each snapshot. Here its files are uploaded to SeaweedFS byte for byte
and every live snapshot of every scenario is read through S3: by meltwater (the library
and `meltwater scan s3://...`) and by pyiceberg (StaticTable, a SQL catalog), each compared
with Iceberg Java's read. Meltwater must read all; pyiceberg 0.12's gaps are listed in
PYICEBERG_CANNOT_READ and checked to still be gaps, so the list cannot go stale.

Two SeaweedFS servers, because its table bucket refuses Puffin files (see corpus.s3_store):
the session's `seaweed`, whose bucket `lake` is the REST catalog's table bucket, holds every
scenario but those with deletion vectors (v3_deletion_vectors, small_pages), registered in
the REST catalog; `seaweed_plain_lake`, whose `lake` is a plain bucket, holds all
thirteen, registered in a SQLite SqlCatalog.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from http_counter import CountingProxy
from writer_env import cache_root

import meltwater.stream
from corpus import WRITERS_2026
from corpus.compare import assert_same_rows
from corpus.loader import Corpus, Scenario
from corpus.pyiceberg_corpus import PYICEBERG_SCENARIOS
from corpus.s3_store import stored_objects
from meltwater.planner.table.table_loading import load_table

ALL = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
       "position_deletes_with_rows", "maintenance", "evolution", "format_v1",
       "v3_deletion_vectors", "random_mix", "file_formats", "column_evolution", "small_pages",
       *WRITERS_2026]

# What pyiceberg 0.12 refuses to read, by scenario: the ValueError it raises at the snapshots
# that need it. Every other snapshot of these scenarios, and every snapshot of the rest, it
# must read as Iceberg Java did.
PYICEBERG_CANNOT_READ = {
    "equality_deletes": "does not yet support equality deletes",
    "equality_global": "does not yet support equality deletes",
    "small_pages": "does not yet support equality deletes",
    "staged_upserts": "does not yet support equality deletes",
    "staged_upserts_v2": "does not yet support equality deletes",
    "mixed_row_deltas": "does not yet support equality deletes",
    "mixed_row_deltas_v3": "does not yet support equality deletes",
    "file_formats": "(Unsupported file format|Delete file format not supported): "
                    "FileFormat.AVRO",
}

# The scenarios SeaweedFS's table bucket refuses: their deletion vectors are Puffin files.
TABLE_BUCKET_REFUSES = {name: r"\.puffin.*ACCESS_DENIED" for name in (
    "v3_deletion_vectors", "small_pages", "staged_upserts", "mixed_row_deltas_v3")}

LOCATION_LIKE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*:/|/)")


def _live(scenario: Scenario) -> list:
    return [snap for snap in scenario.snapshots if not snap.expired]


@pytest.fixture
def plain_env(seaweed_plain_lake, monkeypatch) -> dict[str, str]:
    """AWS_* for the plain-bucket server, so meltwater's s3:// reads go there."""
    env = seaweed_plain_lake.s3_env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def test_local_bucket_file_system_answers_with_s3_paths_only(s3_corpus, tmp_path):
    """The FileSystem the S3 corpus was written with keeps s3://lake/K at ROOT/lake/K and
    answers every status, listing and glob with s3:// paths (corpus/s3check/)."""
    from local_bucket import hadoop_classpath, local_bucket_fs_jar
    from writer_env import ensure_writer_env

    classpath = f"{hadoop_classpath(ensure_writer_env())}:{local_bucket_fs_jar(s3_corpus.root)}"
    check = Path(__file__).parent / "corpus" / "s3check" / "LocalBucketFileSystemCheck.java"
    result = subprocess.run(["java", "-cp", classpath, str(check), str(tmp_path / "buckets")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_s3_corpus_is_the_local_corpus_history_written_at_s3_locations(s3_corpus, corpus):
    """Same scenarios, same snapshots (labels, operations, row counts, delete files), but
    every table at s3://lake/db/<scenario>. (pyiceberg's tables are in the local corpus
    only: the S3 corpus is Iceberg Java's scenarios written at s3:// locations.)"""
    local_java = set(corpus.scenarios) - set(PYICEBERG_SCENARIOS)
    assert sorted(s3_corpus.scenarios) == sorted(local_java) == sorted(ALL)
    for name, ours in s3_corpus.scenarios.items():
        local = corpus.scenarios[name]
        assert ours.location == f"s3://lake/db/{name}"
        assert re.fullmatch(rf"s3://lake/db/{name}/metadata/v\d+\.metadata\.json",
                            ours.metadata_location)
        assert ours.format_version == local.format_version
        assert ours.delete_files == local.delete_files, name

        def history(scenario: Scenario) -> list[tuple]:
            return [(s.label, s.operation, s.row_count, s.expired, s.added_delete_files)
                    for s in scenario.snapshots]

        assert history(ours) == history(local), name


@pytest.mark.parametrize("name", ALL)
@pytest.mark.usefixtures("plain_env")
def test_every_live_snapshot_reads_as_iceberg_java_read_it(java_tables_in_sql, name):
    """meltwater from the table's s3:// location; pyiceberg from the metadata file
    (StaticTable) and through the SQL catalog."""
    from pyiceberg.table import StaticTable

    tables = java_tables_in_sql
    scenario = tables.corpus.scenarios[name]
    ours = load_table(scenario.location)  # version-hint.text, read from S3
    assert ours.metadata_location == scenario.metadata_location
    by_sql = tables.catalog.load_table(("db", name))
    assert by_sql.metadata_location == scenario.metadata_location
    by_location = StaticTable.from_metadata(scenario.metadata_location,
                                            properties=tables.server.file_io_properties())
    refused = 0
    for snap in _live(scenario):
        truth = snap.rows()
        what = f"{name} at {snap.snapshot_id} ({snap.label})"
        rows = meltwater.stream.scan(ours, snapshot_id=snap.snapshot_id).read_all()
        assert_same_rows(rows, truth, f"meltwater: {what}")
        for table in (by_location, by_sql):
            try:
                read = table.scan(snapshot_id=snap.snapshot_id).to_arrow()
            except ValueError as error:
                if name not in PYICEBERG_CANNOT_READ:
                    raise
                # which snapshots pyiceberg refuses varies: counted, not pytest.raises
                assert re.search(PYICEBERG_CANNOT_READ[name], str(error)), what  # noqa: PT017
                refused += 1
                continue
            assert_same_rows(read, truth, f"pyiceberg: {what}")
    assert (refused > 0) == (name in PYICEBERG_CANNOT_READ)


def test_data_files_are_opened_with_their_manifest_sizes(java_tables_in_sql,
                                                        seaweed_plain_lake):
    """A scan asks S3 for no data file's size (a HEAD each time Arrow opens it without one):
    the manifests record it, as Iceberg Java opens data files with the manifest's length.
    Counted at the socket, through a proxy in front of the S3 endpoint."""
    from meltwater.planner.table.fileio import PyArrowFileIO

    scenario = java_tables_in_sql.corpus.scenarios["cow_partitioned"]
    with CountingProxy(seaweed_plain_lake.s3_endpoint, keep_host=True) as proxy:
        io = PyArrowFileIO({**seaweed_plain_lake.file_io_properties(),
                            "s3.endpoint": proxy.url})
        table = load_table(scenario.metadata_location, io)
        rows = meltwater.stream.scan(table).read_all()
        data_gets = proxy.count("GET", ".parquet")
        data_heads = proxy.count("HEAD", ".parquet")
    current = scenario.snapshot(scenario.record["current_snapshot_id"])
    assert_same_rows(rows, current.rows(), "meltwater through the counting proxy")
    assert data_gets > 0 and data_heads == 0, (data_gets, data_heads)


def test_a_manifest_size_that_does_not_match_the_object_reads_the_object_as_it_is(
        seaweed_plain_lake):
    """On S3 the footer is looked for at the manifest's size: a size off by any amount fails
    that read, the task goes to the per-task reader (which asks S3 for the size) and the
    rows are the object's, never a misread."""
    from meltwater.planner.scans.tasks import FileScanTask
    from meltwater.planner.spec.files import DataFile, FileContent
    from meltwater.planner.spec.types import NestedField, PrimitiveType, Schema
    from meltwater.planner.table.fileio import PyArrowFileIO
    from meltwater.stream.engine.scans import bulk_groups
    from meltwater.stream.engine.scans.scan import read_tasks

    field = pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"})
    buffer = BytesIO()
    pq.write_table(pa.table({"id": list(range(5))}, schema=pa.schema([field])), buffer)
    data = buffer.getvalue()
    key = "size-checks/ids.parquet"  # a bucket of its own: `lake` holds the corpus only
    store = seaweed_plain_lake.s3_filesystem(allow_bucket_creation=True)
    store.create_dir("size-checks")
    try:
        with store.open_output_stream(key) as out:
            out.write(data)
        io = PyArrowFileIO(seaweed_plain_lake.file_io_properties())
        schema = Schema((NestedField(1, "id", PrimitiveType("long")),))
        tasks = [FileScanTask(DataFile(FileContent.DATA, f"s3://{key}", "PARQUET", 0, (), 5,
                                       len(data) + off), 1) for off in (0, -9, -1, 1, 4096)]
        groups, rest = bulk_groups.partition(tasks, schema, io)
        assert [t for g in groups for t in g.tasks] == tasks[:1] and rest == tasks[1:]
        batches = list(read_tasks(tasks, schema, schema, io, bulk=True))
    finally:
        store.delete_dir_contents("size-checks")
    read = sorted(v for b in batches for v in b.column(0).to_pylist())
    assert read == sorted(list(range(5)) * 5)


def _cli_scan(env: dict[str, str], out: Path, *args: str) -> pa.Table:
    exe = Path(sys.executable).parent / "meltwater"
    result = subprocess.run([str(exe), "scan", *args, "--format", "parquet", "--output",
                             str(out)], capture_output=True, text=True,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    return pq.read_table(out)


@pytest.mark.parametrize("name", ALL)
def test_cli_scans_the_s3_location(java_tables_in_sql, plain_env, tmp_path, name):
    """`meltwater scan s3://lake/db/<name>`: the current snapshot, and the oldest live one."""
    scenario = java_tables_in_sql.corpus.scenarios[name]
    current = scenario.snapshot(scenario.record["current_snapshot_id"])
    assert_same_rows(_cli_scan(plain_env, tmp_path / "now.parquet", scenario.location),
                     current.rows(), f"meltwater scan {scenario.location}")
    oldest = _live(scenario)[0]
    assert_same_rows(_cli_scan(plain_env, tmp_path / "old.parquet", scenario.location,
                               "--snapshot", str(oldest.snapshot_id)),
                     oldest.rows(), f"meltwater scan --snapshot {oldest.snapshot_id}")


@pytest.mark.parametrize("name", ALL)
def test_rest_catalog_serves_what_its_table_bucket_takes(java_tables_in_rest, monkeypatch,
                                                         name):
    """Registered as db.<name> in SeaweedFS's REST catalog, its loadTable names the
    metadata file Iceberg Java wrote, from which meltwater reads every live snapshot."""
    tables = java_tables_in_rest
    assert set(tables.refused) == set(TABLE_BUCKET_REFUSES)
    if name in TABLE_BUCKET_REFUSES:
        assert re.search(TABLE_BUCKET_REFUSES[name], tables.refused[name])
        return
    scenario = tables.corpus.scenarios[name]
    # SeaweedFS keeps only the location of a registered table: `metadata` comes back empty
    location = tables.catalog.load_table(("db", name)).metadata_location
    assert location == scenario.metadata_location
    for key, value in tables.server.s3_env().items():
        monkeypatch.setenv(key, value)
    ours = load_table(location)
    for snap in _live(scenario):
        rows = meltwater.stream.scan(ours, snapshot_id=snap.snapshot_id).read_all()
        assert_same_rows(rows, snap.rows(), f"{name} at {snap.snapshot_id} ({snap.label})")


# -- no local path anywhere -------------------------------------------------------------------

def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _puffin_footer(data: bytes) -> dict[str, Any]:
    """A Puffin file's footer payload: ... payload, payload size, flags, magic."""
    assert data[:4] == data[-4:] == b"PFA1"
    size = int.from_bytes(data[-12:-8], "little")
    assert data[-8] & 1 == 0, "compressed Puffin footer"
    return json.loads(data[-12 - size:-12])


def strings_in(key: str, data: bytes) -> Iterator[str]:
    """Every string value a table file holds, decoded by its format: JSON metadata, Avro
    manifest lists and manifests, Parquet/ORC/Avro data and delete files, Puffin footers."""
    import fastavro
    import pyarrow.orc as orc

    if key.endswith(".json"):
        yield from _strings(json.loads(data))
    elif key.endswith("version-hint.text"):
        assert data.strip().isdigit()
    elif key.endswith(".avro"):
        reader = fastavro.reader(BytesIO(data))
        for record in reader:
            yield from _strings(record)
    elif key.endswith(".parquet"):
        yield from _strings(pq.read_table(BytesIO(data)).to_pylist())
    elif key.endswith(".orc"):
        yield from _strings(orc.read_table(BytesIO(data)).to_pylist())
    elif key.endswith(".puffin"):
        yield from _strings(_puffin_footer(data))
    else:
        raise AssertionError(f"a file of a kind this check cannot read: {key}")


def test_uploaded_objects_are_the_corpus_byte_for_byte_and_name_no_local_path(
        java_tables_in_sql):
    """Every object in the bucket is a corpus file under the same key with the same bytes;
    every location inside any of them is under its own table's s3:// location, and no file
    holds the corpus's local directory or a file:/ URI anywhere in its bytes."""
    tables = java_tables_in_sql
    corpus: Corpus = tables.corpus
    local = stored_objects(corpus)
    fs = tables.server.s3_filesystem()
    infos = fs.get_file_info(pafs.FileSelector("lake", recursive=True))
    keys = {info.path for info in infos if info.type == pafs.FileType.File}
    assert keys == set(local)
    assert tables.files == len(local)
    owners = {f"{s.location.removeprefix('s3://')}/": s.location for s in
              corpus.scenarios.values()}
    here = str(cache_root()).encode()
    checked = 0
    for key in sorted(keys):
        with fs.open_input_stream(key) as stream:
            data = stream.read()
        assert data == local[key].read_bytes(), key
        assert here not in data and b"file:/" not in data, key
        table = next(loc for prefix, loc in owners.items() if key.startswith(prefix))
        for text in strings_in(key, data):
            if LOCATION_LIKE.match(text):
                assert text == table or text.startswith(f"{table}/"), (key, text)
                checked += 1
    assert checked > len(keys)  # every metadata file, list and manifest names several
