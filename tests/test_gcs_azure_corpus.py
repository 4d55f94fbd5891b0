"""Iceberg Java tables on Google Cloud Storage and Azure, read from emulators on loopback.

corpus.build.ensure_store_corpus has Iceberg Java write a few scenarios (STORE_SCENARIOS:
position, equality and deletion-vector deletes, ORC and Avro files) with the warehouse at
gs://lake and at abfs://lake@meltwater.dfs.core.windows.net, so every path in every file is
Iceberg Java's own. Here their files are uploaded byte for byte to fake-gcs-server and to
Azurite (object_store_fixtures.py), registered in a SQLite catalog, and read three ways,
each against what Iceberg Java read (a scan equals Java's read at the snapshot; a range's
changes, replayed on Java's read at its start, give Java's read at its end):

- the library, given the location and Iceberg Java's property names (`gcs.no-auth`,
  `adls.connection-string.<host>`, `adls.auth.shared-key.*`): every live snapshot, every
  consecutive range;
- the CLI, by identifier in the catalog, configured as pyiceberg users configure it
  (`PYICEBERG_CATALOG__...`, pyiceberg's names: a token for GCS, `adls.account-key` and
  the Blob authority for Azure);
- `format("meltwater")` given the location and `io.*` options: the reads run in Spark's
  Python workers, which no environment variable points at the emulator, so the properties
  reached them inside the partitions.

Before: `gcs.no-auth` was ignored (Google's default credentials were looked for), a token
without an expiry was refused by pyarrow, and no Azure property under Iceberg Java's names
was read; without `adls.account-name` an abfs:// location was a TypeError.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from object_store_fixtures import catalog_env

import meltwater.stream
from corpus.build import STORE_SCENARIOS, STORE_WAREHOUSES
from corpus.compare import assert_replays, assert_same_rows, live_ranges
from corpus.s3_store import stored_objects
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.planner.table.table_loading import load_table

MELTWATER = str(Path(sys.executable).parent / "meltwater")
# What points a client at a store, or gives it credentials: set by no test here.
_CLIENT_VARIABLES = ("AWS_", "AZURE_", "GOOGLE_", "GCE_", "STORAGE_EMULATOR_HOST",
                     "CLOUD_STORAGE_", "PYICEBERG_")


def test_tables_are_iceberg_javas_at_the_store_and_uploaded_whole(java_tables_on_store, corpus):
    """The same history as the local corpus's scenarios, every table under the store's
    warehouse, every file uploaded."""
    tables = java_tables_on_store
    warehouse = STORE_WAREHOUSES[tables.scheme]
    assert sorted(tables.corpus.scenarios) == sorted(STORE_SCENARIOS)
    for name, ours in tables.corpus.scenarios.items():
        assert ours.location == f"{warehouse}/db/{name}"
        assert ours.metadata_location.startswith(f"{ours.location}/metadata/v")
        local = corpus.scenarios[name]
        assert [(s.label, s.operation, s.row_count) for s in ours.snapshots] == \
            [(s.label, s.operation, s.row_count) for s in local.snapshots]
    assert tables.files == len(stored_objects(tables.corpus))


def test_library_reads_every_snapshot_and_range_as_iceberg_java(java_tables_on_store):
    tables = java_tables_on_store
    io = PyArrowFileIO(tables.io_properties)
    for name, scenario in tables.corpus.scenarios.items():
        table = load_table(scenario.location, io)  # version-hint.text, from the store
        assert table.metadata_location == scenario.metadata_location
        scanned = ranges = 0
        for snap in scenario.snapshots:
            if not snap.expired:
                rows = meltwater.stream.scan(table, snapshot_id=snap.snapshot_id).read_all()
                assert_same_rows(rows, snap.rows(), f"{scenario.location} at {snap.snapshot_id}")
                scanned += 1
        for start, end in live_ranges(scenario, table.metadata):
            changes = meltwater.stream.changes(table, from_snapshot_id=start,
                                               to_snapshot_id=end).read_all()
            assert_replays(scenario, table.metadata, start, end, changes)
            ranges += 1
        assert scanned >= 3 and ranges >= 3, name


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLIENT_VARIABLES)}
    return {**env, **extra}


def _cli(env: dict[str, str], out: Path, *args: str) -> pa.Table:
    done = subprocess.run([MELTWATER, *args, "--format", "parquet", "--output", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (args, done.stderr)
    return pq.read_table(out)


def _whole_history(metadata) -> tuple[int | None, int]:
    """The longest range the current snapshot's retained lineage has: from before its
    oldest ancestor (or from that ancestor, when its parent has expired)."""
    ancestors = metadata.ancestors(metadata.current_snapshot_id)
    oldest = ancestors[-1]
    start = None if oldest.parent_id is None else oldest.snapshot_id
    return start, metadata.current_snapshot_id


def test_cli_by_identifier_reads_as_iceberg_java(java_tables_on_store, tmp_path):
    tables = java_tables_on_store
    env = _clean_env(catalog_env("lake", tables.catalog_properties))
    io = PyArrowFileIO(tables.io_properties)
    for name, scenario in tables.corpus.scenarios.items():
        identifier = f"lake.db.{name}"
        metadata = load_table(scenario.metadata_location, io).metadata
        current = scenario.snapshot(metadata.current_snapshot_id)
        assert_same_rows(_cli(env, tmp_path / f"{name}.parquet", "scan", identifier),
                         current.rows(), f"meltwater scan {identifier}")
        start, end = _whole_history(metadata)
        start_args = [] if start is None else ["--from-snapshot", str(start)]
        changes = _cli(env, tmp_path / f"{name}-changes.parquet", "changes", identifier,
                       *start_args, "--to-snapshot", str(end))
        assert_replays(scenario, metadata, start, end, changes)


def test_spark_source_with_io_options_reads_as_iceberg_java(java_tables_on_store, spark):
    tables = java_tables_on_store
    endpoint = next(re.search(r"127\.0\.0\.1:\d+", v).group() for v in
                    tables.io_properties.values() if "127.0.0.1:" in v)
    assert not any(endpoint in value for value in os.environ.values())  # only the options
    options = {f"io.{k}": v for k, v in tables.io_properties.items()}
    io = PyArrowFileIO(tables.io_properties)
    for scenario in tables.corpus.scenarios.values():
        metadata = load_table(scenario.metadata_location, io).metadata

        def read(**extra: str) -> pa.Table:
            reader = spark.read.format("meltwater").options(**options).options(**extra)
            return reader.load(scenario.location).toArrow()  # noqa: B023 - called at once

        oldest = next(s for s in scenario.snapshots if not s.expired)
        for snap in (oldest, scenario.snapshot(metadata.current_snapshot_id)):
            assert_same_rows(read(**{"snapshot-id": str(snap.snapshot_id)}), snap.rows(),
                             f"spark {scenario.location} at {snap.snapshot_id}")
        start, end = _whole_history(metadata)
        bounds = {"end-snapshot-id": str(end)}
        bounds.update({"read-changes": "true"} if start is None
                      else {"start-snapshot-id": str(start)})
        assert_replays(scenario, metadata, start, end, read(**bounds))
