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
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "testbed"))

from loopback_ports import free_port  # noqa: E402
from service_process import Pipeline, ServiceProcess, write_config  # noqa: E402
from writer_env import WriterEnvError  # noqa: E402

from live.client import Commit, LiveWriter, LiveWriterError  # noqa: E402
from live.mirror import MirrorState, differences, read_mirror, truth_rows  # noqa: E402

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


def wait_for_mirror(database: Path, commit: Commit) -> MirrorState:
    """Poll the mirror until its ledger holds `commit` (or a later one)."""
    deadline = time.monotonic() + MIRROR_TIMEOUT
    while True:
        state = read_mirror(database, PIPELINE, commit.sequence_number)
        if state.sequence_number is not None and state.sequence_number >= commit.sequence_number \
                and state.applied_at is not None:
            return state
        if time.monotonic() > deadline:
            raise DemoError(f"the mirror did not reach snapshot {commit.snapshot_id} in "
                            f"{MIRROR_TIMEOUT}s (its ledger holds sequence number "
                            f"{state.sequence_number}, the commit is {commit.sequence_number})")
        time.sleep(0.02)


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
