"""Tables named by catalog identifier, on S3: the CLI, the Python API, the watcher and Spark's
executors, against SeaweedFS's S3 and Iceberg REST catalog on loopback.

The table is written by pyiceberg through the REST catalog (appends, overwrites, a delete,
an upsert); each step's rows come from a plain-Python model (`corpus.pyiceberg_writer`),
not from reading the table back. The catalog is configured only the way pyiceberg users
configure it (`PYICEBERG_CATALOG__LAKE__*` variables) or through the Spark source's
`catalog.*` options: no `AWS_*` variable is set, so whatever reaches S3 got its endpoint
and keys from the catalog's configuration.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from http_counter import CountingProxy
from object_store_fixtures import catalog_env, clean_env

import meltwater.stream
from corpus.compare import assert_same_rows
from corpus.pyiceberg_writer import SCHEMA, History, write_history
from meltwater.planner.table.table_source import TableSource, parse_table_source

ROOT = Path(__file__).resolve().parent.parent
MELTWATER = str(Path(sys.executable).parent / "meltwater")
NAMESPACE = "catalog_tests"


@pytest.fixture(scope="module")
def lake(seaweed) -> tuple[History, dict[str, str]]:
    """A pyiceberg-written history in catalog `lake`, and the CLI environment naming it."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("lake", **seaweed.catalog_properties())
    catalog.create_namespace_if_not_exists(NAMESPACE)
    history = write_history(catalog, (NAMESPACE, "orders"))
    return history, clean_env(**catalog_env("lake", seaweed.catalog_properties()))


def run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([MELTWATER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def read_output(env: dict[str, str], tmp_path: Path, *args: str) -> pa.Table:
    out = tmp_path / f"out{time.monotonic_ns()}.parquet"
    done = run(env, *args, "--format", "parquet", "--output", str(out))
    assert done.returncode == 0, done.stderr
    return pq.read_table(out)


def test_cli_scans_a_catalog_table_at_every_step(lake, tmp_path):
    history, env = lake
    for step in history.steps:
        got = read_output(env, tmp_path, "scan", f"lake.{NAMESPACE}.orders",
                          "--snapshot", str(step.snapshot_id))
        assert_same_rows(got, step.rows, f"meltwater scan at {step.label}")
    last = history.steps[-1]
    got = read_output(env, tmp_path, "scan", "--catalog", "lake", f"{NAMESPACE}.orders")
    assert_same_rows(got, last.rows, "--catalog lake namespace.table")


def _multiset(table: pa.Table) -> Counter:
    columns = ["id", "category", "name", "amount"]
    return Counter(tuple(row[c] for c in columns) for row in table.select(columns).to_pylist())


def test_cli_net_changes_of_each_step_are_the_models_differences(lake, tmp_path):
    history, env = lake
    for before, after in zip(history.steps, history.steps[1:], strict=False):
        got = read_output(env, tmp_path, "changes", f"lake.{NAMESPACE}.orders", "--net",
                          "--from-snapshot", str(before.snapshot_id),
                          "--to-snapshot", str(after.snapshot_id))
        kinds = got["_change_type"].to_pylist()
        # the table has identifier fields (id), so a changed row is an update pair
        inserted = _multiset(got.filter(pa.array([k in ("INSERT", "UPDATE_AFTER")
                                                  for k in kinds])))
        deleted = _multiset(got.filter(pa.array([k in ("DELETE", "UPDATE_BEFORE")
                                                 for k in kinds])))
        old, new = _multiset(before.rows), _multiset(after.rows)
        assert inserted == new - old, after.label
        assert deleted == old - new, after.label


def test_python_api_reads_a_catalog_table_named_by_identifier(lake, monkeypatch):
    history, env = lake
    for key, value in env.items():
        if key.startswith("PYICEBERG_"):
            monkeypatch.setenv(key, value)
    rows = meltwater.stream.scan(f"lake.{NAMESPACE}.orders").read_all()
    assert_same_rows(rows, history.steps[-1].rows, "meltwater.stream.scan(identifier)")
    source = parse_table_source(f"lake.{NAMESPACE}.orders")
    assert source.is_catalog_table and str(source) == f"lake.{NAMESPACE}.orders"
    assert "secret" not in repr(source).lower()


def _silent_port() -> tuple[socket.socket, int]:
    """A port that accepts connections and never answers: a catalog behind a dead route."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return listener, listener.getsockname()[1]


def test_bad_catalog_input_is_one_line_naming_the_table(lake, seaweed):
    _, env = lake
    table = f"lake.{NAMESPACE}.orders"
    listener, silent = _silent_port()
    cases = [
        ({}, ["scan", f"nolake.{NAMESPACE}.orders"], "no catalog named 'nolake'"),
        ({}, ["scan", f"lake.{NAMESPACE}.missing"],
         f"table lake.{NAMESPACE}.missing: not found in catalog 'lake'"),
        ({}, ["scan", "lake.no_such_namespace.orders"],
         "table lake.no_such_namespace.orders: not found in catalog 'lake'"),
        ({"PYICEBERG_CATALOG__LAKE__CREDENTIAL": "nobody:wrong"}, ["scan", table],
         f"table {table}: catalog 'lake' at {seaweed.catalog_uri} refused access"),
        ({"PYICEBERG_CATALOG__LAKE__URI": "http://127.0.0.1:9"}, ["scan", table],
         f"table {table}: catalog 'lake' at http://127.0.0.1:9 cannot be reached "
         "(Connection refused)"),
        ({"PYICEBERG_CATALOG__LAKE__URI": f"http://127.0.0.1:{silent}",
          "PYICEBERG_CATALOG__LAKE__MELTWATER__TIMEOUT": "2"}, ["scan", table],
         f"table {table}: catalog 'lake' at http://127.0.0.1:{silent}: no answer within 2 s"),
        ({"PYICEBERG_CATALOG__LAKE__S3__SECRET_ACCESS_KEY": "wrong"}, ["scan", table],
         f"table {table}: s3://lake/{NAMESPACE}/orders/metadata/v7.metadata.json: access "
         "denied"),
        ({"PYICEBERG_CATALOG__LAKE__S3__ACCESS_KEY_ID": "AKIANOBODY"}, ["scan", table],
         "access denied"),
        ({"PYICEBERG_CATALOG__LAKE__S3__ACCESS_KEY_ID": "AKIANOBODY",
          "PYICEBERG_CATALOG__LAKE__S3__SESSION_TOKEN_EXPIRES_AT_MS": "1700000000000"},
         ["scan", table], "the credentials expired at 2023-11-14T22:13:20+00:00"),
        ({**seaweed.s3_env()}, ["scan", "s3://no-such-bucket/db/orders"],
         "the bucket 'no-such-bucket' does not exist"),
    ]
    try:
        for extra, args, expected in cases:
            started = time.monotonic()
            done = run({**env, **extra}, *args, timeout=60)
            took = time.monotonic() - started
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2, (args, extra, done.stderr)
            assert len(lines) == 1 and lines[0].startswith("meltwater: "), done.stderr
            assert expected in lines[0], (expected, lines[0])
            assert took < 30, (args, took)  # bounded, never a hang
    finally:
        listener.close()


def test_watching_a_catalog_table_costs_one_request_a_second_and_sees_commits(seaweed):
    """The watcher's idle cost, counted at the socket by a proxy in front of the catalog,
    and a commit made through the catalog reported."""
    from pyiceberg.catalog import load_catalog

    from meltwater.stream.watch.watcher import SnapshotWatcher

    writer = load_catalog("writer", **seaweed.catalog_properties())
    writer.create_namespace_if_not_exists(NAMESPACE)
    write_history(writer, (NAMESPACE, "watched"))
    with CountingProxy(seaweed.catalog_uri) as proxy:
        properties = {**seaweed.catalog_properties(), "uri": proxy.url,
                      "oauth2-server-uri": f"{proxy.url}/v1/oauth/tokens"}
        source = TableSource(identifier=parse_table_source(
            f"{NAMESPACE}.watched", catalog="proxied").identifier,
            catalog_properties=properties)
        with SnapshotWatcher(source) as watcher:
            assert watcher.mode == "catalog"
            first = proxy.count("GET", "/watched")
            time.sleep(10.0)
            idle = proxy.count("GET", "/watched") - first
            # One loadTable a second at most while nothing changes (60 a minute); each look
            # waits a second after the last one ended, so a slow server makes fewer.
            assert 2 <= idle <= 11, idle
            table = writer.load_table((NAMESPACE, "watched"))
            table.append(pa.Table.from_pylist(
                [{"id": 10_001, "category": "w", "name": "watched", "amount": 1.0}],
                schema=SCHEMA))
            events = watcher.wait(timeout=30)
            assert [e.snapshot_id for e in events] == [
                writer.load_table((NAMESPACE, "watched")).metadata.current_snapshot_id]


def test_a_stream_on_local_cluster_reads_with_the_drivers_catalog_options_only(
        lake, seaweed, tmp_path):
    """readStream of a catalog table on local-cluster[2,1,1024]: the catalog and S3 settings
    are only the source's `catalog.*` options (no AWS_* or PYICEBERG_* anywhere), so the
    executors can read only with the FileIO properties their partitions carry. The union
    of the micro-batches, applied in order to an empty table, is the final step's rows."""
    history, _ = lake
    options = [f"--option=catalog.{k}={v}" for k, v in seaweed.catalog_properties().items()]
    command = [sys.executable, str(ROOT / "tests" / "spark_tests" / "stream_query.py"),
               "--master", "local-cluster[2,1,1024]", "--table", f"lake.{NAMESPACE}.orders",
               "--checkpoint", str(tmp_path / "chk"), "--sink", str(tmp_path / "sink"),
               "--pid-column", *options]
    done = subprocess.run(command, env=clean_env(PYTHONPATH=str(ROOT / "tests" / "spark_tests")),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["executors_and_driver"] == 3
    got = pq.read_table(tmp_path / "sink")
    assert report["driver_pid"] not in set(got["_pid"].to_pylist())
    rows = sorted(got.to_pylist(), key=lambda r: (r["_commit_sequence_number"],
                                                  r["_change_ordinal"]))
    state: Counter = Counter()
    for row in rows:
        key = (row["id"], row["category"], row["name"], row["amount"])
        if row["_change_type"] in ("INSERT", "UPDATE_AFTER"):
            state[key] += 1
        else:
            state[key] -= 1
    assert all(count >= 0 for count in state.values())  # no DELETE of a row never there
    assert +state == _multiset(history.steps[-1].rows)


def test_vended_credentials_are_renewed_by_the_stream_and_reach_its_partitions(
        seaweed_vending):
    """A catalog that vends expiring, table-scoped keys: every load of a stream asks the
    catalog again, so the FileIO properties the Spark stream reader's partitions carry to
    executors are the newest keys (a later expiry), and those keys read the table where the
    partition is read. The server's shortest session is 15 minutes, so expiry itself is
    shown by the refusal test above."""
    from pyiceberg.catalog import load_catalog
    from pyspark.sql.datasource import ReadAllAvailable

    from meltwater.stream.spark.source import stream_schema_for
    from meltwater.stream.spark.stream_reader import MeltwaterStreamReader

    writer = load_catalog("writer", **seaweed_vending.catalog_properties())
    writer.create_namespace_if_not_exists(NAMESPACE)
    table = writer.create_table((NAMESPACE, "vended"), schema=SCHEMA)
    table.append(pa.Table.from_pylist(
        [{"id": i, "category": "v", "name": f"v{i}", "amount": 1.0} for i in range(5)],
        schema=SCHEMA))
    options = {f"catalog.{k}": v
               for k, v in seaweed_vending.catalog_properties(with_s3=False).items()}
    options = {"path": f"vend.{NAMESPACE}.vended", "starting": "earliest", **options}
    reader = MeltwaterStreamReader(options, stream_schema_for(options))
    first = dict(reader.stream.load().io.properties)
    time.sleep(1.1)
    start = reader.initialOffset()
    partitions = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    assert partitions
    second = dict(partitions[0].io_properties)
    assert all(dict(p.io_properties) == second for p in partitions)
    assert first["s3.access-key-id"] != second["s3.access-key-id"]
    assert int(second["s3.session-token-expires-at-ms"]) > int(
        first["s3.session-token-expires-at-ms"])
    assert "credential" not in " ".join(second)  # the catalog's own secret stays behind
    rows = pa.Table.from_batches([b for p in partitions for b in reader.read(p)])
    assert sorted(rows["id"].to_pylist()) == list(range(5))


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                                  "glue"])
@pytest.mark.usefixtures("seaweed")
def test_sql_and_glue_catalog_tables_are_read_by_identifier(request, kind, namespace):
    """pyiceberg's SqlCatalog (on SQLite and on the session's PostgreSQL) and GlueCatalog
    (on moto's Glue), their tables on SeaweedFS's S3: meltwater reads each step of a
    pyiceberg history by identifier, given the same catalog properties pyiceberg used."""
    catalog = request.getfixturevalue(f"{kind}_catalog")
    history = write_history(catalog, (namespace, "orders"))
    identifier = parse_table_source(f"{namespace}.orders", catalog=kind).identifier
    source = TableSource(identifier=identifier,
                         catalog_properties={**catalog.properties, "type": kind
                                             if kind == "glue" else "sql"})
    for step in history.steps:
        rows = meltwater.stream.scan(source, snapshot_id=step.snapshot_id).read_all()
        assert_same_rows(rows, step.rows, f"{kind} catalog at {step.label}")
