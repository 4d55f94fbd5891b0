"""The Iceberg Java corpus through a REST catalog on S3, named `lake.db.<scenario>`: every
live snapshot's scan and every consecutive change range, through the CLI and through
`format("meltwater")`, against what Iceberg Java read (the same oracle as the local corpus:
a scan equals Java's read; a range's changes, replayed on Java's read at its start, give
Java's read at its end).

The catalog is configured as pyiceberg users configure it (`PYICEBERG_CATALOG__LAKE__*`)
for the CLI, and only as the source's `catalog.*` options for Spark; no `AWS_*` variable
is set, so the endpoint and keys reach the readers through the catalog's properties.
SeaweedFS's table bucket refuses Puffin files, so `v3_deletion_vectors`, `small_pages`,
`staged_upserts` and `mixed_row_deltas_v3` (deletion vectors all) cannot be in its REST
catalog (`java_tables_in_rest.refused`);
they are read through a SQL catalog on a plain bucket in tests/test_s3_corpus.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus.compare import assert_replays, assert_same_rows, live_ranges
from meltwater.planner.table.table_loading import load_table

MELTWATER = str(Path(sys.executable).parent / "meltwater")
IN_REST = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
           "position_deletes_with_rows", "maintenance", "evolution", "format_v1",
           "random_mix", "file_formats", "column_evolution", "staged_upserts_v2",
           "mixed_row_deltas", "write_audit_publish"]


def _env(properties: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYICEBERG_"))}
    env.update({"PYICEBERG_CATALOG__LAKE__" + k.upper().replace(".", "__").replace("-", "_"): v
                for k, v in properties.items()})
    return env


def _cli(env: dict[str, str], tmp_path: Path, *args: str) -> pa.Table:
    out = tmp_path / f"{time.monotonic_ns()}.parquet"
    done = subprocess.run([MELTWATER, *args, "--format", "parquet", "--output", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (args, done.stderr)
    return pq.read_table(out)


def test_the_rest_catalog_holds_every_scenario_its_bucket_takes(java_tables_in_rest):
    assert sorted(java_tables_in_rest.names) == sorted(IN_REST)
    assert set(java_tables_in_rest.refused) == {"v3_deletion_vectors", "small_pages",
                                                "staged_upserts", "mixed_row_deltas_v3"}


@pytest.mark.parametrize("name", IN_REST)
def test_cli_by_identifier_reads_every_snapshot_and_range_as_iceberg_java(
        java_tables_in_rest, tmp_path, name):
    tables = java_tables_in_rest
    scenario = tables.corpus.scenarios[name]
    env = _env(tables.server.catalog_properties())
    identifier = f"lake.db.{name}"
    metadata = load_table(scenario.metadata_location,
                          _file_io(tables.server)).metadata  # for schemas by field id
    scanned = ranges = 0
    for snap in scenario.snapshots:
        if snap.expired:
            continue
        got = _cli(env, tmp_path, "scan", identifier, "--snapshot", str(snap.snapshot_id))
        assert_same_rows(got, snap.rows(), f"{identifier} at {snap.snapshot_id}")
        scanned += 1
    for start, end in live_ranges(scenario, metadata):
        start_args = [] if start is None else ["--from-snapshot", str(start)]
        changes = _cli(env, tmp_path, "changes", identifier, *start_args,
                       "--to-snapshot", str(end))
        assert_replays(scenario, metadata, start, end, changes)
        ranges += 1
    assert scanned == sum(not s.expired for s in scenario.snapshots) and ranges >= 3


def _file_io(server):
    from meltwater.planner.table.fileio import PyArrowFileIO

    return PyArrowFileIO(server.file_io_properties())


@pytest.mark.parametrize("name", IN_REST)
def test_spark_source_by_identifier_reads_every_snapshot_and_range_as_iceberg_java(
        java_tables_in_rest, spark, name):
    tables = java_tables_in_rest
    scenario = tables.corpus.scenarios[name]
    options = {f"catalog.{k}": v for k, v in tables.server.catalog_properties().items()}
    identifier = f"lake.db.{name}"
    metadata = load_table(scenario.metadata_location, _file_io(tables.server)).metadata

    def read(**extra: str) -> pa.Table:
        reader = spark.read.format("meltwater").options(**options).options(**extra)
        return reader.load(identifier).toArrow()

    for snap in scenario.snapshots:
        if snap.expired:
            continue
        assert_same_rows(read(**{"snapshot-id": str(snap.snapshot_id)}), snap.rows(),
                         f"spark {identifier} at {snap.snapshot_id}")
    for start, end in live_ranges(scenario, metadata):
        bounds = {"end-snapshot-id": str(end)}
        bounds.update({"read-changes": "true"} if start is None
                      else {"start-snapshot-id": str(start)})
        assert_replays(scenario, metadata, start, end, read(**bounds))
