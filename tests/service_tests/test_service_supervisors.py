"""The service as supervisors run it: stopped by a SIGTERM to its whole process group, a
pipeline that cannot heal stopped (not restarted forever) with its reason in meltwater's
words, available-now runs ending with a status that says how they went.
"""

from __future__ import annotations

import re
import socket
import sqlite3
import struct
import time
from pathlib import Path

import pyarrow.dataset as ds
from loopback_ports import free_port
from service_process import Pipeline, command_line, descendants, running, write_config

from meltwater.sinks.mirror_stream import ledger_name
from meltwater.stream import changes
from service_tests.harness import log_records

DUPLICATE = "choose key columns that are unique"


def batch_ids(folder: Path) -> list[int]:
    """The batch ids of a checkpoint's `offsets` or `commits` log."""
    if not folder.exists():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def test_available_now_ends_naming_a_failure_that_cannot_heal(tmp_path, corpus, serve):
    """Two available-now pipelines: an archive with no [pipelines.options] at all (the stream
    is read as changes whatever the trigger) finishes; a mirror keyed on a column that is
    not unique stops at its first batch, once, and the run exits 2 naming it, in
    meltwater's words, in JSON log lines."""
    table = corpus.scenarios["equality_deletes"].location
    archive = tmp_path / "archive"
    config = write_config(tmp_path / "svc.toml", [
        Pipeline("archive", table, tmp_path / "chk-archive", {"type": "parquet",
                                                              "path": str(archive)},
                 trigger="available-now", options={}),
        Pipeline("dup", table, tmp_path / "chk-dup",
                 {"type": "sqlite", "url": f"sqlite:///{tmp_path}/m.db", "key": ["part"]},
                 trigger="available-now", options={})], port=0, progress="off")
    config.write_text(config.read_text().replace('http = "127.0.0.1:0"', 'http = "off"'))
    started = time.monotonic()
    result = serve.run(config, timeout=400)
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr[-3000:]
    logged = log_records(result.stderr)
    stopped = [r for r in logged if r.get("pipeline") == "dup" and r["level"] == "error"]
    assert len(stopped) == 1, stopped  # stopped once, not restarted
    assert stopped[0]["message"].startswith("pipeline stopped: restarting cannot fix this")
    assert stopped[0]["error"].startswith("DuplicateKeyError: batch 0 of pipeline 'dup@")
    assert stopped[0]["error"].endswith(DUPLICATE)
    assert not any("restarting from its checkpoint" in r["message"] for r in logged)
    final = logged[-1]
    assert final["message"] == "pipelines failed" and final["failed"].startswith("dup: "), final
    assert any(r["message"] == "pipeline finished" and r["pipeline"] == "archive"
               for r in logged)
    files = [str(p) for p in archive.rglob("*.parquet")]  # in _commit_snapshot_id=... folders
    written = ds.dataset(files, format="parquet").to_table()
    assert written.num_rows == changes(table).read_all().num_rows > 0
    print(f"\navailable-now run with a duplicate key ended (exit 2) in {elapsed:.0f}s")


def _hang_up(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")


def test_a_pipeline_that_cannot_heal_stops_and_the_others_go_on(tmp_path, corpus, serve):
    """Long-running: the failed pipeline's state is `failed` with the reason, /health is
    503, it is not restarted (its error count stays 1), the other pipeline mirrors the
    table; the status server on 0.0.0.0 was warned of, clients hanging up leave no trace,
    and SIGTERM still exits 0."""
    table = corpus.scenarios["equality_deletes"].location
    port = free_port()
    config = write_config(tmp_path / "svc.toml", [
        Pipeline("dup", table, tmp_path / "chk-dup",
                 {"type": "sqlite", "url": f"sqlite:///{tmp_path}/m.db", "key": ["part"]}),
        Pipeline("good", table, tmp_path / "chk-good",
                 {"type": "sqlite", "url": f"sqlite:///{tmp_path}/m.db"})], port=port)
    config.write_text(config.read_text().replace(f'"127.0.0.1:{port}"', f'"0.0.0.0:{port}"'))
    service = serve.start(config, port, tmp_path / "service.log")
    deadline = time.monotonic() + 240
    document: dict = {}
    while time.monotonic() < deadline:
        answer = service.health()
        if answer is not None:
            status, document = answer
            pipelines = document.get("pipelines", {})
            if pipelines.get("dup", {}).get("state") == "failed" \
                    and pipelines.get("good", {}).get("batches", 0) > 0:
                break
        assert service.process.poll() is None, service.tail()
        time.sleep(0.5)
    else:
        raise AssertionError(f"no failed pipeline: {document}\n{service.tail()}")
    assert status == 503 and document["status"] == "failing"
    dup, good = document["pipelines"]["dup"], document["pipelines"]["good"]
    assert dup["last_error"].startswith("DuplicateKeyError: ") and DUPLICATE in dup["last_error"]
    assert good["state"] == "running"
    for _ in range(10):
        _hang_up(port)
    time.sleep(3)  # a restart, were there one, would have come after 1 s
    metrics = service.metrics()
    assert re.search(r'meltwater_errors_total\{pipeline="dup"\} 1\.0', metrics), metrics
    assert 'meltwater_pipeline_up{pipeline="dup"} 0.0' in metrics
    with sqlite3.connect(tmp_path / "m.db") as db:
        assert db.execute("SELECT count(*) FROM good").fetchone()[0] > 0
    assert service.stop() == 0, service.tail()
    log = service.log_path.read_text()
    lines = log_records(log)
    assert any(r["level"] == "warning" and f"0.0.0.0:{port}, which other machines can reach"
               in r["message"] for r in lines), log[-3000:]
    assert "Exception occurred during processing of request" not in log
    assert "socketserver" not in log


def test_sigterm_to_the_process_group_finishes_the_running_batch(tmp_path, corpus, serve):
    """A supervisor's stop: SIGTERM to the service's whole process group while a micro-batch
    runs. The JVM is not in that group, so the batch finishes: the checkpoint commits the
    batch that was in flight, the service exits 0 without py4j errors, and the JVM is gone
    after it. Started again, the service goes on from there and the mirror ends equal to
    the table: nothing lost or applied twice."""
    scenario = corpus.scenarios["equality_deletes"]
    checkpoint = tmp_path / "chk"
    pipeline = Pipeline("term", scenario.location, checkpoint,
                        {"type": "sqlite", "url": f"sqlite:///{tmp_path}/m.db"},
                        options={"streaming-max-files-per-micro-batch": 1})
    port = free_port()
    config = write_config(tmp_path / "svc.toml", [pipeline], port=port)
    service = serve.start(config, port, tmp_path / "service.log")
    service.wait_running()
    deadline = time.monotonic() + 180
    while True:  # wait for a batch in flight (planned, not committed) after the first one
        offsets, commits = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
        if commits and offsets and offsets[-1] > commits[-1]:
            break
        assert time.monotonic() < deadline, f"no batch in flight: {service.tail()}"
        assert service.process.poll() is None, service.tail()
        time.sleep(0.02)
    in_flight = offsets[-1]
    jvms = [pid for pid in descendants(service.process.pid)
            if b"java" in command_line(pid)]
    assert jvms, "no JVM below the service"
    started = time.monotonic()
    code = service.stop(group=True)
    stopped_in = time.monotonic() - started
    log = service.log_path.read_text()
    assert code == 0, log[-5000:]
    commits = batch_ids(checkpoint / "commits")
    assert commits[-1] >= in_flight, (in_flight, commits[-3:], log[-3000:])
    ledger = ledger_name("term", str(checkpoint))
    with sqlite3.connect(tmp_path / "m.db") as db:
        applied = db.execute("SELECT max(batch_id) FROM meltwater_ledger WHERE pipeline = ?",
                             (ledger,)).fetchone()[0]
    # The stop lands after the batch in flight committed; the next one may have started by
    # then and is cut short: at most applied to the sink, never committed by Spark, so the
    # next start runs it again and the ledger skips it.
    assert applied in (commits[-1], commits[-1] + 1), (applied, commits[-3:])
    lines = log_records(log)
    assert [r["message"] for r in lines][-1] == "stopped"
    assert any(r["message"] == "stopping" and r["signal"] == "SIGTERM" for r in lines)
    assert not re.search(r"Py4J|py4j\.protocol|Connection refused|Answer from Java", log), \
        log[-3000:]
    for _ in range(600):  # JVM shutdown hooks may take a while on a loaded machine
        if not any(running(pid) for pid in jvms):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the JVM outlived the service: {jvms}")

    service = serve.start(config, port, tmp_path / "service-2.log")
    last = scenario.snapshots[-1]
    truth = sorted(tuple(row.values()) for row in last.rows().select(
        ["id", "name", "val", "part"]).to_pylist())
    deadline = time.monotonic() + 240
    while True:
        with sqlite3.connect(tmp_path / "m.db") as db:
            rows = sorted(db.execute("SELECT id, name, val, part FROM term").fetchall())
        if rows == truth:
            break
        assert time.monotonic() < deadline, f"not caught up: {service.tail()}"
        assert service.process.poll() is None, service.tail()
        time.sleep(0.5)
    assert service.stop(group=True) == 0, service.tail()
    print(f"\nSIGTERM to the group with batch {in_flight} in flight: committed through batch "
          f"{commits[-1]} (sink through {applied}), exit 0 after {stopped_in:.1f}s; "
          "restarted, the mirror equals the table")
