"""`meltwater serve` with a pipeline over many tables (`tables = "local.db.*"`): each
table the pattern names gets its own pipeline and mirror table (`{table}`), a table created
while the service runs is followed without a restart, and a table dropped stops its own
pipeline with one log line and `meltwater_tables_dropped`, the others going on and
/health staying 200.

The tables are written by pyiceberg (`corpus.pyiceberg_writer`: appends, overwrites, a
delete, an upsert) through a SQL catalog on SQLite, which the service lists and loads them
through (`[catalogs.local]`); each mirror must hold the writer's model of the table's last
step, row for row."""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from pathlib import Path

from loopback_ports import free_port

from corpus.pyiceberg_writer import write_history
from service_tests.harness import log_records

DISCOVERY = "1s"


def _config(path: Path, catalog: dict[str, str], checkpoints: Path, database: Path,
            port: int) -> Path:
    path.write_text("\n".join([
        "[service]", f'http = "127.0.0.1:{port}"', 'log = "json"', 'progress = "lines"',
        'shutdown-timeout = "20s"', "", "[spark]", 'master = "local[2]"', "[spark.conf]",
        '"spark.driver.memory" = "1g"', "", "[catalogs.local]",
        *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in catalog.items()), "",
        "[[pipelines]]", 'name = "db"', 'tables = "local.db.*"',
        f"checkpoint = {json.dumps(str(checkpoints))}",
        f'discovery-interval = "{DISCOVERY}"', "[pipelines.sink]", 'type = "sqlite"',
        f"url = {json.dumps(f'sqlite:///{database}')}", 'table = "mirror_{table}"', ""]))
    return path


def _rows(database: Path, table: str) -> Counter | None:
    """The mirror's rows (id, category, name, amount), None before it exists."""
    try:
        connection = sqlite3.connect(database, timeout=30)
        try:
            return Counter(connection.execute(
                f'SELECT id, category, name, amount FROM "{table}"'))
        finally:
            connection.close()
    except sqlite3.OperationalError:
        return None  # not created yet


def _model(history) -> Counter:
    """The writer's model of the table after its last step, as the mirror holds rows."""
    return Counter((r["id"], r["category"], r["name"], r["amount"])
                   for r in history.steps[-1].rows.to_pylist())


def _until(service, what: str, condition, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if service.process.poll() is not None:
            raise AssertionError(f"service exited waiting for {what}:\n{service.tail(60)}")
        assert time.monotonic() < deadline, f"no {what} after {timeout}s:\n{service.tail(60)}"
        time.sleep(0.3)


def test_a_pattern_follows_tables_created_and_dropped_while_the_service_runs(tmp_path, serve):
    from pyiceberg.catalog import load_catalog

    root = tmp_path / "warehouse"
    root.mkdir()
    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
                  "warehouse": root.as_uri()}
    catalog = load_catalog("local", **properties)
    histories = {name: write_history(catalog, ("db", name)) for name in ("a", "b")}
    database = tmp_path / "mirror.db"
    port = free_port()
    config = _config(tmp_path / "service.toml", properties, tmp_path / "checkpoints", database,
                     port)
    service = serve.start(config, port, tmp_path / "service.log")
    for name, history in histories.items():
        model = _model(history)
        _until(service, f"mirror_{name} equal to the table",
               lambda name=name, model=model: _rows(database, f"mirror_{name}") == model)

    histories["c"] = write_history(catalog, ("db", "c"))  # created while it runs
    model = _model(histories["c"])
    _until(service, "mirror_c, of a table created while the service runs",
           lambda: _rows(database, "mirror_c") == model)

    catalog.drop_table(("db", "b"))  # dropped while it runs
    _until(service, "the dropped table's pipeline stopped", lambda: any(
        r.get("message") == "table gone: its pipeline stopped" and r.get("pipeline") == "db.b"
        for r in log_records(service.log_path.read_text(errors="replace"))))
    _, health = _until(service, "/health 200", lambda: (
        answer := service.health()) is not None and answer[0] == 200 and answer)
    assert sorted(health["pipelines"]) == ["db.a", "db.c"]
    metrics = service.metrics()
    assert 'meltwater_tables_dropped_total{pipeline="db"} 1.0' in metrics
    assert 'meltwater_tables_followed{pipeline="db"} 2.0' in metrics
    assert service.stop() == 0, service.tail()
    records = log_records(service.log_path.read_text(errors="replace"))
    found = sorted(r["pipeline"] for r in records
                   if r.get("message") == "table found: pipeline started")
    assert found == ["db.a", "db.b", "db.c"]
