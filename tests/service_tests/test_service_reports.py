"""What `meltwater serve` tells an operator is true: /health, /metrics, the progress line and
the log, across restarts, a second service, a damaged table and a stop.

The table is the corpus's `equality_deletes`, written by Iceberg Java, replayed one metadata
version at a time (`watch_tests.replay.Replay`) so the service sees its commits arrive;
its last two commits change no rows (equality deletes of keys no row has). Every wait is
for a condition, with a bounded timeout; snapshot ids come from the table's metadata.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from loopback_ports import free_port
from service_process import Pipeline, ServiceProcess, descendants, running, write_config

from meltwater.sinks.mirror_stream import ledger_name
from service_tests.harness import log_records
from sink_tests.mirror_read import fetch
from watch_tests.replay import Replay

WAIT_S = 120
SINK_LINE = re.compile(r"^batch (\d+) (?:applied|skipped \(applied before\)): .* at snapshot "
                       r"(\d+|None)$")
TEXT_LINE = re.compile(r"^\d\d:\d\d:\d\d (debug|info|warning|error|critical) +\S")


def _replayed(corpus, tmp_path: Path) -> Replay:
    """`equality_deletes` replayed up to its first snapshot."""
    replay = Replay(corpus.scenarios["equality_deletes"].location, tmp_path / "table")
    while replay.current_snapshot(replay.version + 1) is None:
        replay.commit()  # CREATE TABLE, SET IDENTIFIER FIELDS: no snapshot yet
    replay.commit()
    return replay


def _mirror(replay: Replay, tmp_path: Path) -> Pipeline:
    return Pipeline("orders", replay.location, tmp_path / "chk",
                    {"type": "sqlite", "url": f"sqlite:///{tmp_path / 'mirror.db'}",
                     "table": "orders"})


def _ledger_position(pipeline: Pipeline) -> int | None:
    """The snapshot the mirror's ledger names for the pipeline's newest batch."""
    try:
        found = fetch(pipeline.sink["url"], "SELECT snapshot_id FROM meltwater_ledger WHERE "
                      "pipeline = ? ORDER BY batch_id DESC LIMIT 1",
                      (ledger_name(pipeline.name, str(pipeline.checkpoint)),))
    except sqlite3.Error:  # the service has not created its tables yet
        return None
    return found[0][0] if found else None


def _wait_for(service: ServiceProcess, what: str, condition, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if service.process.poll() is not None:
            raise AssertionError(f"service exited waiting for {what}:\n{service.tail(60)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f}s:\n{service.tail(60)}")
        time.sleep(0.1)


def _health_until_running(service: ServiceProcess) -> list[tuple[int, dict]]:
    """Every /health answer from the service's start until all its pipelines run."""
    answers: list[tuple[int, dict]] = []

    def running() -> bool:
        answer = service.health()
        if answer is not None:
            answers.append(answer)
        pipelines = answer[1].get("pipelines", {}) if answer else {}
        return bool(pipelines) and all(p["state"] == "running" for p in pipelines.values())

    _wait_for(service, "running pipelines", running, timeout=240)
    return answers


def _gauge(metrics: str, name: str) -> float | None:
    match = re.search(rf'^{name}\{{pipeline="orders"\}} (\S+)$', metrics, re.M)
    return None if match is None else float(match.group(1))


def test_a_restart_at_the_head_reports_no_lag_and_every_batch_line_names_its_end(
        corpus, tmp_path, serve):
    """One service mirrors every commit, the ledger naming each new snapshot, those without
    changes too; the sink's line and the service's line about each batch name the same
    snapshot (the service's also its Spark phases' milliseconds). SIGTERM, then a second
    service on the same checkpoint, the table unchanged: /health, /metrics and the
    progress line report no lag at once (not every snapshot of the table, ageing), and
    its text log holds the service's own lines only, Spark's in the Spark log file.
    Until its pipeline has started, /health answered 503 `starting`."""
    replay = _replayed(corpus, tmp_path)
    pipeline = _mirror(replay, tmp_path)
    port = free_port()
    config = write_config(tmp_path / "service.toml", [pipeline], port=port)
    service = serve.start(config, port, tmp_path / "service-1.log")
    answers = _health_until_running(service)
    starting = answers[:-1]  # the last answer is the first with the pipeline running
    assert all(status == 503 and document["status"] == "starting" and document["reason"]
               for status, document in starting), starting
    while True:
        head = replay.current_snapshot()
        _wait_for(service, f"the ledger at {head}",
                  lambda head=head: _ledger_position(pipeline) == head)
        if not replay.remaining:
            break
        replay.commit()
    assert service.stop() == 0, service.tail()

    records = log_records((tmp_path / "service-1.log").read_text())
    sink_lines = {int(m[1]): int(m[2]) for r in records
                  if (m := SINK_LINE.match(r["message"])) is not None}
    service_lines = {r["batch"]: r["snapshot"] for r in records
                     if r["message"] == "batch committed"}
    assert sink_lines and sink_lines == service_lines
    assert service_lines[max(service_lines)] == head
    # each batch line says where its time went, in Spark's phases
    phases = [r["phases_ms"] for r in records if r["message"] == "batch committed"]
    assert all({"addBatch", "latestOffset", "walCommit"} <= set(p) for p in phases), phases
    assert all(isinstance(ms, int) and ms >= 0 for p in phases for ms in p.values()), phases

    text_config = write_config(tmp_path / "service-text.toml", [pipeline], port=port,
                               log="text")
    service = serve.start(text_config, port, tmp_path / "service-2.log")
    service.wait_running()
    metrics = _wait_for(service, "the lag gauge", lambda: _gauge(service.metrics(),
                                                                 "meltwater_lag_snapshots")
                        is not None and service.metrics())
    assert (_gauge(metrics, "meltwater_lag_snapshots"),
            _gauge(metrics, "meltwater_lag_seconds")) == (0.0, 0.0), metrics
    status, health = service.health()
    orders = health["pipelines"]["orders"]
    assert status == 200, health
    assert (orders["snapshot_id"], orders["lag_snapshots"], orders["lag_seconds"]) == (
        head, 0, 0.0)
    progress = _wait_for(service, "a progress line", lambda: [
        line for line in (tmp_path / "service-2.log").read_text().splitlines()
        if line.startswith("orders ")])
    assert f"snapshot {head} " in progress[0] and "lag 0 snapshots 0.0s" in progress[0]
    assert service.stop() == 0, service.tail()

    lines = (tmp_path / "service-2.log").read_text().splitlines()
    strangers = [line for line in lines if not TEXT_LINE.match(line)
                 and not line.startswith("orders ")]
    assert not strangers, strangers  # no Spark WARN, JVM note or worker traceback
    spark_log = (tmp_path / "chk" / "spark.log").read_text()
    assert re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN ", spark_log, re.M), spark_log


def test_a_second_service_on_a_running_checkpoint_is_refused(corpus, tmp_path, serve):
    """A second `serve` of the same pipelines (another HTTP port) is refused at start, in one
    line naming the checkpoint and the running service's pid; `--check` warns of it. Killed
    with SIGKILL (its JVM left to die on its own), the first service leaves no lock behind:
    the next start runs."""
    replay = _replayed(corpus, tmp_path)
    pipeline = _mirror(replay, tmp_path)
    port = free_port()
    config = write_config(tmp_path / "service.toml", [pipeline], port=port)
    first = serve.start(config, port, tmp_path / "service-1.log")
    first.wait_running()
    other_port = free_port()
    second_config = write_config(tmp_path / "second.toml", [pipeline], port=other_port)
    command = [sys.executable, "-m", "meltwater.cli.main", "serve", "--config",
               str(second_config)]
    refused = (f"{second_config}: pipelines[0].checkpoint: checkpoint {pipeline.checkpoint} "
               f"is held by another meltwater serve (pid {first.process.pid})")
    check = subprocess.run([*command, "--check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0 and f"meltwater: warning: {refused}" in check.stderr, check
    second = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second
    lines = [json.loads(line) for line in second.stderr.splitlines()]  # log = "json"
    assert len(lines) == 1 and lines[0]["message"].startswith(refused), lines
    assert first.process.poll() is None and first.health()[0] == 200

    below = descendants(first.process.pid)  # its JVM and Spark's Python workers
    os.kill(first.process.pid, signal.SIGKILL)  # the service only, not its JVM
    first.kill()  # reaps it and closes its log; its JVM, in a session of its own, lives on
    try:
        third = serve.start(second_config, other_port, tmp_path / "service-3.log")
        third.wait_running()
        assert third.stop() == 0, third.tail()
    finally:
        for pid in below:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_with_json_logs_every_line_is_json_through_a_damaged_table_and_a_stop(
        corpus, tmp_path, serve):
    """`log = "json"`, progress lines on: the table's newest metadata file is damaged, the
    pipeline fails (/health 503 saying why) while Spark prints its Java stack and its
    workers their tracebacks, then SIGTERM. Every line the service printed, on stdout and
    stderr, is one JSON object; what Spark printed is in the Spark log file."""
    replay = _replayed(corpus, tmp_path)
    pipeline = _mirror(replay, tmp_path)
    port = free_port()
    spark_log = tmp_path / "logs" / "spark.log"
    config = write_config(tmp_path / "service.toml", [pipeline], port=port)
    config.write_text(config.read_text().replace(
        "[service]\n", f'[service]\nspark-log = "{spark_log}"\n', 1))
    service = serve.start(config, port, tmp_path / "service.log")
    service.wait_running()
    head = replay.current_snapshot()
    _wait_for(service, f"the ledger at {head}", lambda: _ledger_position(pipeline) == head)
    replay.commit("{ this is not table metadata")
    failing = _wait_for(service, "a failing pipeline", lambda: (
        (answer := service.health()) is not None and answer[0] == 503
        and answer[1]["pipelines"]["orders"]["last_error"] and answer))
    assert failing[1]["status"] == "failing", failing
    assert service.stop() == 0, service.tail()

    lines = [line for line in (tmp_path / "service.log").read_text().splitlines() if line]
    not_json = []
    for line in lines:
        try:
            if not isinstance(json.loads(line), dict):
                not_json.append(line)
        except ValueError:
            not_json.append(line)
    assert not not_json, not_json
    messages = [json.loads(line)["message"] for line in lines]
    assert "progress" in messages and "stopped" in messages
    assert spark_log.read_text().strip()  # Spark's own lines, there instead
