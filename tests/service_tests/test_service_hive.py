"""`meltwater serve` following a table named `hms.svc_hive.orders` in a Hive Metastore
(`testbed/metastore_server.py`) into SQLite while pyiceberg's HiveCatalog commits to it
through the metastore, across a kill -9 of the service.

The catalog is configured only in the service's `[catalogs.hms]`. After every commit the
mirror is read in one transaction with its ledger and must equal the writer's model (a
plain-Python dict, never read back from the table) at exactly the snapshot the ledger
names.
"""

from __future__ import annotations

import sqlite3
import time

import pyarrow as pa
from loopback_ports import free_port
from service_process import Pipeline, write_config

from corpus.compare import row_multiset
from corpus.pyiceberg_writer import SCHEMA
from meltwater.sinks.ledger import LEDGER_TABLE
from meltwater.sinks.mirror_stream import ledger_name
from service_tests.test_service_catalog import CatalogWriter

TABLE = "orders_hive"


def read_mirror(database, ledger: str) -> tuple[int | None, int | None, pa.Table]:
    """The ledger's position and the mirror's rows, read in one transaction."""
    connection = sqlite3.connect(database, timeout=30, isolation_level=None)
    try:
        connection.execute("BEGIN")
        try:
            position = connection.execute(
                f"SELECT snapshot_id, sequence_number FROM {LEDGER_TABLE} WHERE pipeline = ? "
                "ORDER BY batch_id DESC LIMIT 1", (ledger,)).fetchone()
            rows = connection.execute(
                f'SELECT id, category, name, amount FROM "{TABLE}"').fetchall()
        except sqlite3.OperationalError:  # the service has not created its tables yet
            position, rows = None, []
        connection.execute("COMMIT")
    finally:
        connection.close()
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, row, strict=True)) for row in rows],
                                 schema=SCHEMA)
    snapshot_id, sequence = position or (None, None)
    return snapshot_id, sequence, table


def wait_exact(database, ledger: str, writer: CatalogWriter, what: str,
               timeout: float = 120) -> None:
    """Wait for the mirror to reach the writer's last commit; it must equal the model at
    the snapshot its ledger names."""
    target = writer.commits[-1].sequence_number
    deadline = time.monotonic() + timeout
    while True:
        snapshot_id, sequence, rows = read_mirror(database, ledger)
        if sequence is not None and sequence >= target:
            break
        assert time.monotonic() < deadline, f"{what}: mirror at {sequence}, not {target}"
        time.sleep(0.05)
    commit = writer.at_sequence(sequence)
    assert snapshot_id == commit.snapshot_id, what
    got, want = row_multiset(rows), row_multiset(commit.rows)
    assert got == want, (f"{what}: extra {list((got - want).elements())[:3]}, missing "
                         f"{list((want - got).elements())[:3]}")


def test_serve_mirrors_a_hive_metastore_table_through_a_kill_9(tmp_path, hive_metastore,
                                                                serve):
    from pyiceberg.catalog import load_catalog

    properties = {"type": "hive", "uri": hive_metastore.uri,
                  "warehouse": hive_metastore.warehouse, "hive.hive2-compatible": "true"}
    writer = CatalogWriter(load_catalog("writer", **properties), ("svc_hive", "orders"),
                           seed=5)
    writer.commit()
    database = tmp_path / "mirror.db"
    pipeline = Pipeline("hive", "hms.svc_hive.orders", tmp_path / "checkpoint",
                        {"type": "sqlite", "url": f"sqlite:///{database}", "table": TABLE,
                         "key": ["id"]})
    port = free_port()
    config = write_config(tmp_path / "service.toml", [pipeline], port=port)
    config.write_text(config.read_text() + "\n[catalogs.hms]\n" + "".join(
        f'"{k}" = "{v}"\n' for k, v in properties.items()))
    ledger = ledger_name(pipeline.name, str(pipeline.checkpoint))
    for round_ in range(2):
        service = serve.start(config, port, tmp_path / f"service-{round_}.log")
        try:
            service.wait_running(timeout=180)
            wait_exact(database, ledger, writer, f"round {round_}, caught up")
            for _ in range(4):  # commits landing while the service runs: each exact
                writer.commit()
                wait_exact(database, ledger, writer, f"round {round_}, commit "
                                                     f"{writer.commits[-1].snapshot_id}")
            if round_ == 0:
                writer.commit()  # lands as the service dies, or after
                service.kill()
            else:
                assert service.stop() == 0, service.tail()
        finally:
            if service.process.poll() is None:
                service.kill()
    assert len(writer.commits) == 10
