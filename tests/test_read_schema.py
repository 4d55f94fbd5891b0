"""Which schema a read returns after the schema changed without a commit, as Iceberg Java
chooses it (`SnapshotUtil.schemaFor`): the main branch and any branch in the table's
current schema (a column added since the last commit reads as nulls), a snapshot chosen by
id or time and a tag in the schema it was written with; a snapshot naming a schema-id the
table does not have is refused at time travel.

The table is written by pyiceberg (a SQL catalog on SQLite): the corpus written by Iceberg
Java has no schema change after its last commit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from meltwater.planner.errors import CorruptMetadataError
from meltwater.planner.scans.scan import TableScan
from meltwater.planner.table.table_loading import load_table

MELTWATER = Path(sys.executable).parent / "meltwater"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True),
                NestedField(2, "name", StringType(), required=False))


@pytest.fixture
def evolved(tmp_path):
    """A table with one commit in schema 0, a tag `before` and a branch `dev` on it, then
    `extra int` added (schema 1) with no commit since. Returns (metadata path, snapshot)."""
    catalog = load_catalog("local", type="sql", uri=f"sqlite:///{tmp_path}/catalog.db",
                           warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(pa.Table.from_pylist([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
                                      schema=SCHEMA.as_arrow()))
    snapshot = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(snapshot, "before").create_branch(
        snapshot, "dev").commit()
    with table.update_schema() as update:
        update.add_column("extra", IntegerType())
    table = catalog.load_table("db.t")
    assert table.metadata.current_schema_id == 1
    assert table.current_snapshot().schema_id == 0
    return table.metadata_location.removeprefix("file://"), snapshot


def _scan(metadata: str, *args: str) -> list[dict]:
    done = subprocess.run([str(MELTWATER), "scan", metadata, "--format", "jsonl", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return sorted((json.loads(line) for line in done.stdout.splitlines()),
                  key=lambda row: row["id"])


def test_branches_read_in_the_current_schema_snapshots_and_tags_in_their_own(evolved):
    metadata, snapshot = evolved
    current = [{"id": 1, "name": "a", "extra": None}, {"id": 2, "name": "b", "extra": None}]
    written = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert _scan(metadata) == current
    assert _scan(metadata, "--ref", "main") == current
    assert _scan(metadata, "--ref", "dev") == current
    assert _scan(metadata, "--ref", "before") == written
    assert _scan(metadata, "--snapshot", str(snapshot)) == written


def test_a_snapshot_naming_an_unknown_schema_id_is_refused_at_time_travel(evolved, tmp_path):
    """Java: "Cannot find schema with schema id 77" for the snapshot; the branch's read
    uses the table's schema and goes on."""
    metadata, snapshot = evolved
    obj = json.loads(Path(metadata).read_text())
    for entry in obj["snapshots"]:
        entry["schema-id"] = 77
    damaged = tmp_path / "00099-damaged.metadata.json"
    damaged.write_text(json.dumps(obj))
    message = (f"snapshot {snapshot} was written with schema-id 77, which is not among the "
               "table's schemas (ids 0, 1)")
    table = load_table(str(damaged))
    with pytest.raises(CorruptMetadataError, match=re.escape(message)):
        TableScan(table, snapshot_id=snapshot).schema  # noqa: B018 - the property refuses
    assert [f.name for f in TableScan(table).schema.fields] == ["id", "name", "extra"]
    done = subprocess.run([str(MELTWATER), "scan", str(damaged), "--snapshot", str(snapshot)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert len(_scan(str(damaged))) == 2
