"""Tables in a Hive Metastore: Hive 2.3 from the jars in the pyspark wheel, embedded Derby,
in a network namespace of its own and reached on loopback only
(`testbed/metastore_server.py`), next to the REST, SQL and Glue catalogs' tests.

The table is written by pyiceberg's HiveCatalog (appends, overwrites, a delete, an upsert;
`corpus.pyiceberg_writer`, whose model says what each step holds, never read back from the
table). meltwater reads it by identifier, configured as pyiceberg users configure it
(`PYICEBERG_CATALOG__HMS__*`): the CLI's scan and changes at every step, the Python API,
and `meltwater serve` mirroring it into SQLite while pyiceberg commits through the
metastore, across a kill -9. A metastore that cannot be reached, or a table it does not
hold, is one line naming the table.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from loopback_ports import free_port
from metastore_server import HiveMetastore
from object_store_fixtures import catalog_env, clean_env

import meltwater.stream
from corpus.compare import assert_same_rows
from corpus.pyiceberg_writer import History, write_history
from meltwater.planner.table.table_source import TableSource, parse_table_source

MELTWATER = str(Path(sys.executable).parent / "meltwater")
NAMESPACE = "hms_tests"
TABLE = f"hms.{NAMESPACE}.orders"


@pytest.fixture(scope="module")
def metastore(hive_metastore: HiveMetastore) -> HiveMetastore:
    return hive_metastore


def _properties(metastore: HiveMetastore) -> dict[str, str]:
    return {"type": "hive", "uri": metastore.uri, "warehouse": metastore.warehouse,
            "hive.hive2-compatible": "true"}


@pytest.fixture(scope="module")
def hms(metastore) -> tuple[History, dict[str, str]]:
    """A pyiceberg-written history in the metastore, and the CLI environment naming it."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("hms", **_properties(metastore))
    history = write_history(catalog, (NAMESPACE, "orders"))
    return history, clean_env(**catalog_env("hms", _properties(metastore)))


def run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([MELTWATER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def read_output(env: dict[str, str], tmp_path: Path, *args: str) -> pa.Table:
    out = tmp_path / f"out{time.monotonic_ns()}.parquet"
    done = run(env, *args, "--format", "parquet", "--output", str(out))
    assert done.returncode == 0, done.stderr
    return pq.read_table(out)


def _multiset(table: pa.Table) -> Counter:
    columns = ["id", "category", "name", "amount"]
    return Counter(tuple(row[c] for c in columns) for row in table.select(columns).to_pylist())


def test_cli_scans_and_changes_a_hive_table_at_every_step(hms, tmp_path):
    history, env = hms
    for step in history.steps:
        got = read_output(env, tmp_path, "scan", TABLE, "--snapshot", str(step.snapshot_id))
        assert_same_rows(got, step.rows, f"meltwater scan at {step.label}")
    for before, after in zip(history.steps, history.steps[1:], strict=False):
        got = read_output(env, tmp_path, "changes", TABLE, "--net",
                          "--from-snapshot", str(before.snapshot_id),
                          "--to-snapshot", str(after.snapshot_id))
        kinds = got["_change_type"].to_pylist()
        arrived = got.filter(pa.array([k in ("INSERT", "UPDATE_AFTER") for k in kinds]))
        left = got.filter(pa.array([k in ("DELETE", "UPDATE_BEFORE") for k in kinds]))
        old, new = _multiset(before.rows), _multiset(after.rows)
        assert _multiset(arrived) == new - old, after.label
        assert _multiset(left) == old - new, after.label


def test_python_api_reads_a_hive_table_by_identifier(hms, metastore):
    history, _ = hms
    source = TableSource(identifier=parse_table_source(f"{NAMESPACE}.orders",
                                                       catalog="hms").identifier,
                         catalog_properties=_properties(metastore))
    rows = meltwater.stream.scan(source).read_all()
    assert_same_rows(rows, history.steps[-1].rows, "meltwater.stream.scan(hive identifier)")
    first, last = history.steps[0], history.steps[-1]
    changes = meltwater.stream.changes(source, from_snapshot_id=first.snapshot_id,
                                       to_snapshot_id=last.snapshot_id, net=True).read_all()
    kinds = changes["_change_type"].to_pylist()
    arrived = changes.filter(pa.array([k in ("INSERT", "UPDATE_AFTER") for k in kinds]))
    assert _multiset(arrived) == _multiset(last.rows) - _multiset(first.rows)


def test_an_unreachable_metastore_or_a_missing_table_is_one_line(hms):
    _, env = hms
    nobody = free_port()
    cases = [
        ({}, ["scan", f"hms.{NAMESPACE}.missing"],
         f"table hms.{NAMESPACE}.missing: not found in catalog 'hms'"),
        ({}, ["scan", "hms.no_such_namespace.orders"],
         "table hms.no_such_namespace.orders: not found in catalog 'hms'"),
        ({"PYICEBERG_CATALOG__HMS__URI": f"thrift://127.0.0.1:{nobody}"}, ["scan", TABLE],
         f"table {TABLE}: catalog 'hms' at thrift://127.0.0.1:{nobody} cannot be reached"),
    ]
    for extra, args, expected in cases:
        started = time.monotonic()
        done = run({**env, **extra}, *args, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, extra, done.stderr)
        assert len(lines) == 1 and lines[0].startswith("meltwater: "), done.stderr
        assert expected in lines[0], (expected, lines[0])
        assert time.monotonic() - started < 30, args  # bounded, never a hang


@pytest.mark.usefixtures("hms")  # the table written
def test_a_tables_pattern_lists_the_metastores_tables(metastore):
    """What a pipeline over many tables (`tables = "hms.hms_tests.*"`) follows: the
    namespace's tables whose names match, asked of the metastore; a namespace it does
    not have holds none."""
    from meltwater.service.discovery import matching_tables, table_pattern

    catalogs = {"hms": _properties(metastore)}
    assert matching_tables(table_pattern(f"hms.{NAMESPACE}.*", catalogs), catalogs) == [TABLE]
    assert matching_tables(table_pattern(f"hms.{NAMESPACE}.ord*", catalogs), catalogs) == [TABLE]
    assert matching_tables(table_pattern(f"hms.{NAMESPACE}.x*", catalogs), catalogs) == []
    assert matching_tables(table_pattern("hms.no_such_namespace.*", catalogs), catalogs) == []
