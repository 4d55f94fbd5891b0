"""`meltwater serve` mirrors a table through Iceberg schema evolution into SQLite and
PostgreSQL, and each mirror equals Iceberg Java's read after every commit, across a kill -9.

The table is the corpus's `column_evolution` (ADD COLUMN, RENAME data -> payload, int ->
bigint, DROP + re-ADD `extra` as int, merge-on-read DML after each), replayed one metadata
version at a time (`watch_tests.replay.Replay`) so the service sees the commits arrive one by
one. After each commit the test waits for both ledgers to name that snapshot, then compares
the mirror's columns and rows with Iceberg Java's read of the snapshot in its own schema.
Everything waited on is a condition with a bounded timeout; snapshot ids come from the
table's metadata, never from timing.
"""

from __future__ import annotations

import sqlite3
import time

import psycopg
from loopback_ports import free_port
from service_process import Pipeline, ServiceProcess, write_config

from corpus.compare import row_multiset
from meltwater.planner.table.table_loading import load_table
from meltwater.sinks.mirror_stream import ledger_name
from service_tests.harness import log_records
from sink_tests.mirror_read import fetch, mirror_columns, read_mirror
from watch_tests.replay import Replay

KILL_AFTER = 8  # the service is killed right after the 8th commit lands (mid-batch or not)
WAIT_S = 90


def _position(url: str, pipeline: str) -> int | None:
    try:
        found = fetch(url, "SELECT snapshot_id FROM meltwater_ledger WHERE pipeline = ? "
                           "ORDER BY batch_id DESC LIMIT 1", (pipeline,))
    except (sqlite3.Error, psycopg.Error):  # the service has not created its tables yet
        return None
    return found[0][0] if found else None


def _wait_for(service: ServiceProcess, url: str, pipeline: str, snapshot_id: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while _position(url, pipeline) != snapshot_id:
        if service.process.poll() is not None:
            raise AssertionError(f"service exited:\n{service.tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{pipeline} did not reach snapshot {snapshot_id} in "
                                 f"{WAIT_S}s (at {_position(url, pipeline)}):\n"
                                 + service.tail(60))
        time.sleep(0.05)


def test_schema_evolution_mirrored_after_every_commit_and_across_kill_9(corpus, tmp_path,
                                                                         pg_database, serve):
    scenario = corpus.scenarios["column_evolution"]
    metadata = load_table(scenario.location).metadata
    replay = Replay(scenario.location, tmp_path / "table")
    while replay.current_snapshot(replay.version + 1) is None:
        replay.commit()  # CREATE TABLE, SET IDENTIFIER FIELDS: no snapshot yet
    mirrors = {"sqlite": f"sqlite://{tmp_path / 'mirror.db'}", "postgres": pg_database}
    pipelines = [Pipeline(kind, replay.location, tmp_path / f"chk-{kind}",
                          {"type": kind, "url": url, "table": "evo"})
                 for kind, url in mirrors.items()]
    ledgers = {p.name: ledger_name(p.name, str(p.checkpoint)) for p in pipelines}
    port = free_port()
    config = write_config(tmp_path / "service.toml", pipelines, port=port)
    started = time.monotonic()
    service = serve.start(config, port, tmp_path / "service-1.log")
    checked, commits, restarts = [], 0, 0
    try:
        service.wait_running(timeout=240)
        last = None
        while replay.remaining:
            replay.commit()
            snapshot_id = replay.current_snapshot()
            if snapshot_id == last:
                continue  # a schema change alone: no commit to mirror yet
            last = snapshot_id
            commits += 1
            if commits == KILL_AFTER:
                service.kill()
                service = serve.start(config, port, tmp_path / "service-2.log")
                service.wait_running(timeout=240)
            schema = metadata.schema_for(metadata.snapshot(snapshot_id))
            truth = scenario.snapshot(snapshot_id).rows()
            for kind, url in mirrors.items():
                _wait_for(service, url, ledgers[kind], snapshot_id)
                assert [n for n, _ in mirror_columns(url, "evo")] == \
                    [f.name for f in schema.fields], f"{kind} at commit {commits}"
                got = row_multiset(read_mirror(url, "evo", schema))
                want = row_multiset(truth)
                assert got == want, (f"{kind} at commit {commits} (snapshot {snapshot_id}): "
                                     f"{sum((got - want).values())} rows extra, "
                                     f"{sum((want - got).values())} missing")
            checked.append(snapshot_id)
        seconds = time.monotonic() - started
        assert service.stop() == 0, service.tail()
    finally:
        if service.process.poll() is None:
            service.kill()
    assert len(checked) == len([s for s in scenario.snapshots]) == commits
    for log in sorted(tmp_path.glob("service-*.log")):
        restarts += sum(1 for record in log_records(log.read_text(errors="replace"))
                        if "table schema changed" in record.get("message", ""))
    assert restarts >= 2 * 3  # add, widen and drop/re-add stop each pipeline's stream
    print(f"\nschema evolution: {commits} commits mirrored exactly into SQLite and "
          f"PostgreSQL in {seconds:.0f}s, {restarts} schema restarts, one kill -9")

