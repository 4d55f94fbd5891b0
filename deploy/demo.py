"""`make demo`: meltwater keeps a SQLite mirror in step with a live Iceberg table.

What it runs, all on this machine:
1. Apache Iceberg Java (the test writer environment: Iceberg 1.10.2 on Spark 3.5) creates a
   merge-on-read table and keeps committing to it: appends, position deletes, merge-on-read
   updates, equality deletes and upserts (`tests/live/writer.py`).
2. `meltwater serve` (local Spark 4, event-driven trigger) mirrors the table's change stream
   into SQLite by its identifier field `id`, printing a progress line per batch and serving
   /health and /metrics.
3. After every commit the demo waits for the mirror to hold that snapshot and prints the
   commit-to-mirror latency; at the end it checks that the mirror equals what Iceberg Java
   reads at the last snapshot, row for row, stops the service with SIGTERM, and exits 0 only
   if everything matched.

Usage: python deploy/demo.py [--commits N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from live.client import LiveWriter, truth_table  # noqa: E402
from service_tests.harness import Pipeline, ServiceProcess, free_port, write_config  # noqa: E402
from service_tests.mirror_check import mirror_state, same_rows  # noqa: E402


def say(text: str) -> None:
    """Print a line of the demo's narration."""
    print(f"demo | {text}", flush=True)


def main() -> int:
    """Run the demo; the exit status is 0 only if the mirror ends equal to the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=25)
    parser.add_argument("--dir", type=Path, default=ROOT / ".demo")
    args = parser.parse_args()
    work = args.dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    say(f"working in {work}")
    say("starting Apache Iceberg Java (first run builds its environment: a few minutes)")
    with LiveWriter(work / "warehouse", work / "truth", log=say) as writer:
        first = writer.commit("append")
        say(f"table {writer.location}: first commit {first.snapshot_id}")
        url = f"sqlite:///{work / 'mirror.db'}"
        port = free_port()
        config = write_config(work / "meltwater.toml", [Pipeline(
            "orders", writer.location, work / "checkpoints" / "orders",
            {"type": "sqlite", "url": url, "table": "orders"})],
            port=port, progress="lines", log="text")
        say(f"starting: meltwater serve --config {config}")
        service = ServiceProcess(config, port, work / "service.log", echo=True)
        try:
            service.wait_running()
            say(f"service running; health http://127.0.0.1:{port}/health, metrics /metrics")
            latencies = []
            for number in range(1, args.commits + 1):
                commit = writer.commit()
                state = mirror_state(url, "orders", until_sequence=commit.sequence_number,
                                     timeout=60)
                latency = state.seen_at - commit.committed_at
                latencies.append(latency)
                truth = truth_table(commit)
                verdict = "equal" if same_rows(state.rows, truth) else "DIFFERENT"
                say(f"commit {number:>2}/{args.commits}: {commit.kind:<8} snapshot "
                    f"{commit.snapshot_id} -> mirror {verdict} ({truth.num_rows} rows) "
                    f"in {latency:.2f}s")
                if verdict != "equal":
                    say("the mirror differs from Iceberg Java's read: see service.log")
                    return 1
            code = service.stop(signal.SIGTERM)
            say(f"service stopped by SIGTERM, exit status {code}")
        finally:
            if service.process.poll() is None:
                service.kill()
    median = statistics.median(latencies)
    p95 = sorted(latencies)[max(0, round(0.95 * len(latencies)) - 1)]
    say(f"{len(latencies)} commits mirrored exactly; commit-to-mirror latency median "
        f"{median:.2f}s, p95 {p95:.2f}s")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
