"""`make demo`: meltwater keeps a SQLite mirror in step with a live Iceberg table.

What it runs, all on this machine:
1. Apache Iceberg Java (Iceberg 1.10.2 on Spark 3.5, in a virtualenv of its own that the
   first run builds) creates a merge-on-read table and keeps committing to it: appends,
   position deletes, merge-on-read updates, equality deletes and upserts
   (`testbed/live/writer.py`).
2. `meltwater serve` (local Spark 4, event-driven trigger) mirrors the table's change stream
   into SQLite by its identifier field `id`, printing a progress line per batch and serving
   /health and /metrics.
3. After every commit the demo waits for the mirror to hold that snapshot, checks that the
   mirror equals what Iceberg Java reads at that snapshot, row for row, and prints the
   commit-to-mirror latency: from the snapshot's own commit time (its `timestamp-ms`) to
   the `applied_at` of the ledger row of the batch that brought it into the mirror, so
   neither Iceberg Java's truth read nor the demo's polling is counted in it. At the end
   it stops the service with SIGTERM and exits 0 only if every snapshot matched and the
   service exited 0.

It uses meltwater and testbed/ (what the tests, the benchmarks and this demo run against:
the live writer, `meltwater serve` as a process), never the test suite.

Usage: python deploy/demo.py [--commits N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sqlite3
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "testbed"))

from loopback_ports import free_port  # noqa: E402
from service_process import Pipeline, ServiceProcess, write_config  # noqa: E402
from writer_env import WriterEnvError  # noqa: E402

from live.client import SCHEMA, Commit, LiveWriter, LiveWriterError, truth_table  # noqa: E402
from meltwater.sinks.ledger import LEDGER_TABLE  # noqa: E402

PIPELINE = "orders"
MIRROR_TIMEOUT = 60  # seconds a commit may take to reach the mirror before the demo fails
# The service's own lines: its log records in the text format ("12:00:01 info    ...") and
# its progress lines, which begin with the pipeline's name. Everything else the process
# prints (Spark's JVM, pyspark's workers) goes to service.log only.
SERVICE_LINE = re.compile(rf"\d\d:\d\d:\d\d (debug|info|warning|error|critical) |{PIPELINE} ")


class DemoError(Exception):
    """The demo failed; the message says what differed or what did not happen."""


def say(text: str) -> None:
    """Print a line of the demo's narration."""
    print(f"demo | {text}", flush=True)


def show_service_line(line: str) -> None:
    """Echo one line the service printed, if it is one of the service's own."""
    if SERVICE_LINE.match(line):
        sys.stdout.write("     | " + line)
        sys.stdout.flush()


@dataclass(frozen=True)
class MirrorState:
    """The mirror as one read transaction saw it: the sequence number of the newest commit
    its ledger says it applied, its rows, and when (epoch seconds, the service's clock) the
    first batch holding a given commit was applied, if one was."""

    sequence_number: int | None
    rows: Counter[tuple[Any, ...]]
    applied_at: float | None


def _value(stored: Any, type_: pa.DataType) -> Any:
    """A value as the SQLite mirror stores it (meltwater.sinks.sql_schema's table) back to
    the Python value Iceberg Java's read gives: decimals and timestamps are stored as text."""
    if stored is None:
        return None
    if pa.types.is_decimal(type_):
        return Decimal(stored)
    if pa.types.is_timestamp(type_):
        return datetime.fromisoformat(stored)
    return stored


def read_mirror(database: Path, sequence_number: int) -> MirrorState:
    """The ledger's position and the mirror's rows, read in one transaction, so they agree
    while the service keeps committing; and when the batch that applied the commit of
    `sequence_number` was applied."""
    names = ", ".join(f'"{name}"' for name in SCHEMA.names)
    connection = sqlite3.connect(database, timeout=30, isolation_level=None)
    try:
        connection.execute("BEGIN")
        try:
            newest = connection.execute(
                f"SELECT sequence_number FROM {LEDGER_TABLE} ORDER BY batch_id DESC LIMIT 1"
            ).fetchone()
            applied = connection.execute(
                f"SELECT applied_at FROM {LEDGER_TABLE} WHERE sequence_number >= ? "
                "ORDER BY batch_id LIMIT 1", (sequence_number,)).fetchone()
            stored = connection.execute(f'SELECT {names} FROM "{PIPELINE}"').fetchall()
        except sqlite3.OperationalError:  # the service has not created its tables yet
            newest, applied, stored = None, None, []
        connection.execute("COMMIT")
    finally:
        connection.close()
    rows = Counter(tuple(_value(v, f.type) for v, f in zip(row, SCHEMA, strict=True))
                   for row in stored)
    applied_at = None if applied is None else _utc(applied[0]).timestamp()
    return MirrorState(newest[0] if newest else None, rows, applied_at)


def _utc(text: str) -> datetime:
    """The ledger's `applied_at` (ISO-8601 text in SQLite, UTC) as an aware time."""
    stamp = datetime.fromisoformat(text)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def wait_for_mirror(database: Path, commit: Commit) -> MirrorState:
    """Poll the mirror until its ledger holds `commit` (or a later one)."""
    deadline = time.monotonic() + MIRROR_TIMEOUT
    while True:
        state = read_mirror(database, commit.sequence_number)
        if state.sequence_number is not None and state.sequence_number >= commit.sequence_number \
                and state.applied_at is not None:
            return state
        if time.monotonic() > deadline:
            raise DemoError(f"the mirror did not reach snapshot {commit.snapshot_id} in "
                            f"{MIRROR_TIMEOUT}s (its ledger holds sequence number "
                            f"{state.sequence_number}, the commit is {commit.sequence_number})")
        time.sleep(0.02)


def truth_rows(commit: Commit) -> Counter[tuple[Any, ...]]:
    """What Iceberg Java read at `commit`'s snapshot, as rows."""
    table = truth_table(commit)
    return Counter(tuple(row[name] for name in SCHEMA.names) for row in table.to_pylist())


def differences(mirror: Counter[tuple[Any, ...]], truth: Counter[tuple[Any, ...]]) -> str:
    """A few rows only one side has."""
    extra = list((mirror - truth).elements())[:3]
    missing = list((truth - mirror).elements())[:3]
    return (f"{sum(mirror.values())} rows in the mirror, {sum(truth.values())} in Iceberg "
            f"Java's read; only in the mirror: {extra}; only in Iceberg Java's read: {missing}")


def run(commits: int, work: Path) -> list[float]:
    """The demo proper; the commit-to-mirror latencies. Raises DemoError (or the writer's
    or the service's error) when something differs or does not happen."""
    say("starting Apache Iceberg Java (Iceberg 1.10.2 on Spark 3.5, its own JVM)")
    with LiveWriter(work / "warehouse", work / "truth", log=say) as writer:
        first = writer.commit("append")
        say(f"table {writer.location}: first commit {first.snapshot_id}")
        database = work / "mirror.db"
        port = free_port()
        config = write_config(work / "meltwater.toml", [Pipeline(
            PIPELINE, writer.location, work / "checkpoints" / PIPELINE,
            {"type": "sqlite", "url": f"sqlite:///{database}", "table": PIPELINE})],
            port=port, progress="lines", log="text")
        say(f"starting: meltwater serve --config {config} (its full output: service.log)")
        service = ServiceProcess(config, port, work / "service.log", echo=show_service_line)
        try:
            service.wait_running()
            say(f"service running; health http://127.0.0.1:{port}/health, metrics /metrics")
            latencies = []
            for number in range(1, commits + 1):
                commit = writer.commit()
                state = wait_for_mirror(database, commit)
                assert state.applied_at is not None  # wait_for_mirror returns once it is
                latencies.append(state.applied_at - commit.timestamp_ms / 1000)
                truth = truth_rows(commit)
                equal = state.rows == truth
                say(f"commit {number:>2}/{commits}: {commit.kind:<8} snapshot "
                    f"{commit.snapshot_id} -> mirror {'equal' if equal else 'DIFFERENT'} "
                    f"({sum(truth.values())} rows) in {latencies[-1]:.2f}s")
                if not equal:
                    raise DemoError(f"the mirror differs from Iceberg Java's read at snapshot "
                                    f"{commit.snapshot_id}: {differences(state.rows, truth)}")
            code = service.stop(signal.SIGTERM)
            say(f"service stopped by SIGTERM, exit status {code}")
            if code != 0:
                raise DemoError(f"the service exited {code} on SIGTERM, not 0")
        finally:
            if service.process.poll() is None:
                service.kill()
    return latencies


def main() -> int:
    """Run the demo; the exit status is 0 only if the mirror matched at every commit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=25,
                        help="commits to make and check after the first (default 25)")
    parser.add_argument("--dir", type=Path, default=ROOT / ".demo",
                        help="working directory, emptied first (default .demo/)")
    args = parser.parse_args()
    if args.commits < 1:
        parser.error("--commits must be at least 1")
    work = args.dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    say(f"working in {work}")
    try:
        latencies = run(args.commits, work)
    except (DemoError, LiveWriterError, WriterEnvError, AssertionError) as error:
        # AssertionError: ServiceProcess.wait_running's "service not running" with its log
        say(f"FAILED: {error}")
        logs = [str(log) for log in (work / "service.log", work / "truth-writer.log")
                if log.exists()]
        say(f"logs: {', '.join(logs)}")
        return 1
    median = statistics.median(latencies)
    p95 = sorted(latencies)[max(0, round(0.95 * len(latencies)) - 1)]
    say(f"{len(latencies)} commits mirrored exactly; commit-to-mirror latency median "
        f"{median:.2f}s, p95 {p95:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
