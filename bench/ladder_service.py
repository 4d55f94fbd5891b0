"""The ladder's service rung (issue 25): `meltwater serve` mirroring the backlog table into
SQLite while Iceberg Java commits one upsert a second.

The backlog table's metadata is copied into a scratch directory (its data files stay where
they are: Iceberg names them by absolute path), so the cached table is never written to;
the committer (writer/ladder_upserts.py, Iceberg Java) points the copy's `write.data.path`
into the scratch directory too. The service (this checkout's console script, local[2]
Spark, `trigger = "event"`, sink `sqlite` keyed on `id`) starts from the copy's current
snapshot with `starting-snapshot-as-inserts` (the table's rows, then every commit after):
the bootstrap is timed apart. Spark's driver gets `driver_memory` (default 4g): with
Spark's own 1g the bootstrap of the 2M-row table failed with `OutOfMemoryError: Java heap
space` in the driver and the service hung instead of exiting (main at 07e46e8).
Then the committer commits `commits` upserts of 1,000 keys on
a fixed one-per-`interval` schedule while this process polls the mirror's ledger
(`meltwater_ledger`: the sequence number the mirror reached) every 10 ms. A commit's
latency is from its commit returning to the ledger reaching its sequence number. The
service keeps up when every commit is mirrored and the last one within `interval` x 5 of
being committed (a service that falls behind lags more with every commit).

At the end the mirror must equal Iceberg Java's read of the snapshot its ledger reached
(the last commit's when it kept up), row for row (id, customer_id, amount, category,
note).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ladder_tables import LadderTable
from tables import WRITER_DIR, writer_child_env

MELTWATER = Path(sys.executable).parent / "meltwater"
PIPELINE = "backlog"
MIRROR_TABLE = "backlog"
COMPARED = ("id", "customer_id", "amount", "category", "note")
POLL = 0.01


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(path: Path, table: Path, checkpoint: Path, db: Path, port: int,
                 start_snapshot: int, driver_memory: str, bootstrap: bool = True,
                 key_index_dir: Path | None = None) -> None:
    """The service's config. Without `bootstrap` the mirror starts empty and gets the
    commits after `start_snapshot` only (a 200M-row table's rows are not copied into
    SQLite); `key_index_dir`, where the pipeline keeps its key index."""
    options = [f'"start-snapshot-id" = "{start_snapshot}"']
    if bootstrap:
        options.append('"starting-snapshot-as-inserts" = "true"')
    if key_index_dir is not None:
        options.append(f'"key-index-dir" = {json.dumps(str(key_index_dir))}')
    path.write_text("\n".join([
        "[service]", f'http = "127.0.0.1:{port}"', 'log = "json"', 'progress = "off"',
        'shutdown-timeout = "30s"', "", "[spark]", 'master = "local[2]"', "[spark.conf]",
        f'"spark.driver.memory" = "{driver_memory}"', "",
        "[[pipelines]]", f'name = "{PIPELINE}"', f"table = {json.dumps(str(table))}",
        f"checkpoint = {json.dumps(str(checkpoint))}", 'trigger = "event"',
        "[pipelines.options]", *options, "[pipelines.sink]", 'type = "sqlite"',
        f"url = {json.dumps(f'sqlite:///{db}')}", f'table = "{MIRROR_TABLE}"',
        'key = ["id"]', ""]))


def mirror_position(db: Path, ledger: str) -> int | None:
    """The sequence number the mirror's ledger names last, or None before its first batch."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True,
                                                timeout=30)) as conn:
            row = conn.execute("SELECT max(sequence_number) FROM meltwater_ledger "
                               "WHERE pipeline = ?", (ledger,)).fetchone()
    except sqlite3.OperationalError:  # no database or no ledger yet
        return None
    return None if row is None else row[0]


def mirror_snapshot(db: Path, ledger: str) -> int | None:
    """The snapshot id of the newest commit the mirror's ledger names."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True,
                                            timeout=30)) as conn:
        row = conn.execute("SELECT snapshot_id FROM meltwater_ledger WHERE pipeline = ? "
                           "AND sequence_number IS NOT NULL ORDER BY sequence_number DESC "
                           "LIMIT 1", (ledger,)).fetchone()
    return None if row is None else row[0]


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            pipelines = json.loads(answer.read()).get("pipelines", {})
    except Exception:
        return False
    return bool(pipelines) and all(p.get("state") == "running" for p in pipelines.values())


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and the processes below it that still run."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for member in _tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def peak_rss(pid: int) -> dict[str, int]:
    """VmHWM of `pid` and its descendants, by command (meltwater, java, python3); helpers
    under a megabyte (Spark's chmod and the like) left out."""
    out: dict[str, int] = {}
    for member in _tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
            name = Path(f"/proc/{member}/comm").read_text().strip()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                out[name] = max(out.get(name, 0), int(line.split()[1]) * 1024)
    return {name: size for name, size in out.items() if size >= 1 << 20}


def stop(process: subprocess.Popen, timeout: float = 60) -> int | None:
    """SIGTERM, then SIGKILL the whole group if it has not ended in `timeout`."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return process.returncode


class Committer:
    """writer/ladder_upserts.py, its commits read from its output on a thread."""

    def __init__(self, table: LadderTable, scratch: Path, commits: int, interval: float,
                 log_path: Path) -> None:
        shape = table.shape
        env = table.env
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [str(env.python), str(WRITER_DIR / "ladder_upserts.py"), "--jars",
             env.spark_jars(), "--table", str(scratch), "--data", str(scratch / "data"),
             "--commits", str(commits), "--interval", str(interval), "--keys",
             str(shape.keys), "--key-space", str(shape.rows + shape.rows // 50),
             "--first-commit", str(shape.commits + 1), "--seed", str(shape.seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env=writer_child_env(env), text=True, start_new_session=True)
        self.commits: list[dict[str, Any]] = []
        self.ready = self._next()

    def _next(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"ladder_upserts.py ended (exit {self.process.wait()}); see "
                           f"{self.log.name}")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.commits.append(json.loads(line))

    def close(self) -> None:
        stop(self.process)
        self.log.close()


def mirror_rows(db: Path) -> Any:
    import pyarrow as pa

    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(f'SELECT {", ".join(COMPARED)} FROM "{MIRROR_TABLE}"').fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in COMPARED]
    return pa.table({name: list(values) for name, values in
                     zip(COMPARED, columns, strict=True)})


def compare_mirror(db: Path, java_rows: Path) -> dict[str, Any]:
    """The mirror against Iceberg Java's read of the last snapshot (of the rows the
    mirror must hold), both sorted by id."""
    import pyarrow.dataset as ds

    ours = mirror_rows(db).sort_by("id")
    theirs = ds.dataset(java_rows, format="parquet").to_table(columns=list(COMPARED))
    theirs = theirs.sort_by("id").cast(ours.schema)
    return {"mirror_rows": ours.num_rows, "java_rows": theirs.num_rows,
            "equal": ours.equals(theirs)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_service(table: LadderTable, commits: int, interval: float, work: Path,
                java_dump: Callable[[str, int, Path], None], driver_memory: str = "4g",
                log: Callable[[str], None] = print, bootstrap: bool = True,
                key_index_dir: Path | None = None) -> dict[str, Any]:
    """The service rung; `java_dump(location, snapshot_id, out)` writes Iceberg Java's read
    of a snapshot as Parquet (the check: without `bootstrap`, of the rows the timed commits
    wrote, which are the mirror's)."""
    from meltwater.sinks.mirror_stream import ledger_name

    scratch = work / "table"
    shutil.rmtree(work, ignore_errors=True)
    scratch.mkdir(parents=True)
    shutil.copytree(Path(table.location) / "metadata", scratch / "metadata")
    db, checkpoint, port = work / "mirror.db", work / "checkpoint", free_port()
    log("  starting the Iceberg Java committer ...")
    committer = Committer(table, scratch, commits, interval, work / "committer.log")
    service = None
    try:
        start = committer.ready
        config = work / "service.toml"
        write_config(config, scratch, checkpoint, db, port, start["snapshot_id"],
                     driver_memory, bootstrap, key_index_dir)
        ledger = ledger_name(PIPELINE, str(checkpoint))
        service_log = open(work / "service.log", "wb")  # noqa: SIM115 - closed below
        began = time.monotonic()
        service = subprocess.Popen([str(MELTWATER), "serve", "--config", str(config)],
                                   stdout=service_log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        log(f"  `meltwater serve` mirroring {table.shape.label} into SQLite; bootstrap ...")
        deadline = time.monotonic() + 1800

        def started() -> bool:
            if not bootstrap:  # nothing to copy: running is ready
                return healthy(port)
            position = mirror_position(db, ledger)
            return position is not None and position >= start["sequence_number"]

        while not started():
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not bootstrap the mirror (exit "
                                   f"{service.poll()}); see {work / 'service.log'}")
            time.sleep(0.1)
        bootstrap_seconds = time.monotonic() - began
        running = healthy(port)
        log(f"  mirror bootstrapped in {bootstrap_seconds:.1f} s; {commits} upserts, one every "
            f"{interval:g} s ...")
        cpu_before = cpu_seconds(service.pid)
        committer.go()
        seen: dict[int, float] = {}
        end_deadline: float | None = None
        while True:
            position = mirror_position(db, ledger) or 0
            now = time.time()
            for commit in list(committer.commits):
                if commit["sequence_number"] <= position and commit["commit"] not in seen:
                    seen[commit["commit"]] = now
            if len(seen) == commits:
                break
            if committer.process.poll() is not None and end_deadline is None:
                end_deadline = time.monotonic() + max(60.0, commits * interval)
            if end_deadline is not None and time.monotonic() > end_deadline:
                break
            if service.poll() is not None:
                raise RuntimeError(f"the service exited ({service.returncode}); see "
                                   f"{work / 'service.log'}")
            time.sleep(POLL)
        cpu = cpu_seconds(service.pid) - cpu_before
        memory = peak_rss(service.pid)
        latencies = [seen[c["commit"]] - c["committed_at"] for c in committer.commits
                     if c["commit"] in seen]
        last = committer.commits[-1] if committer.commits else None
        service_exit = stop(service)
        service_log.close()
        service = None
        # The mirror against the snapshot it reached (the last commit's, if it kept up).
        reached = mirror_snapshot(db, ledger)
        check = None
        if reached is not None:
            dump = work / "java-rows"
            java_dump(str(scratch), reached, dump)
            check = {**compare_mirror(db, dump), "snapshot_id": reached,
                     "last_commit": last is not None and reached == last["snapshot_id"]}
    finally:
        if service is not None:
            stop(service)
        committer.close()
    spacing = [b["committed_at"] - a["committed_at"]
               for a, b in zip(committer.commits, committer.commits[1:], strict=False)]
    keeps_up = (len(seen) == commits and last is not None
                and seen[last["commit"]] - last["committed_at"] <= 5 * interval)
    median = statistics.median(latencies) if latencies else None
    return {
        "commits": commits, "interval_seconds": interval, "keys_per_commit": table.shape.keys,
        "committed": len(committer.commits), "mirrored": len(seen),
        "commit_spacing_median_seconds": statistics.median(spacing) if spacing else None,
        "bootstrap_seconds": bootstrap_seconds, "healthy_after_bootstrap": running,
        "latency_seconds": latencies,
        "latency": None if not latencies else {
            "median": median, "p95": percentile(latencies, 0.95), "min": min(latencies),
            "max": max(latencies)},
        "keeps_up": keeps_up,
        "service_cpu_seconds_per_commit": cpu / max(1, len(seen)),
        "service_peak_rss_bytes": memory, "service_exit": service_exit, "check": check,
        "driver_memory": driver_memory,
    }
