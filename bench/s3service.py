"""Service benchmark on a catalog table (issue 14): commit-to-mirror latency and the idle
catalog cost of `meltwater serve` mirroring `lake.bench.orders` (SeaweedFS's Iceberg REST
catalog, files on its S3, loopback) into SQLite.

Usage: .venv/bin/python bench/s3service.py [--commits 30] [--idle-seconds 60]

pyiceberg creates the table through the REST catalog and commits to it (appends, and every
fourth commit a delete); `meltwater serve` (local[2] Spark, `trigger = "event"`) names the
table only by identifier, its catalog configured in the service's `[catalogs.lake]`, through
a counting proxy (testbed/http_counter.py) in front of the catalog and a recording one
(s3_requests.py, about 1 ms a request) in front of S3. For a catalog table the
source's watcher asks `loadTable` every second (`CATALOG_INTERVAL`), and a new metadata
location wakes the idle stream. After each commit the benchmark waits a random 0.2-1.2 s
(so commits fall at every phase of the watcher's one-second cycle), commits, and polls the
mirror's ledger every 10 ms: the latency is from pyiceberg's commit returning to the ledger
naming that snapshot. Then the table is left alone for --idle-seconds and the requests the
service makes of the catalog are counted. At the end the mirror must equal the writer's
model row for row. Prints the figures; writes bench/results/s3service.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))

from http_counter import CountingProxy
from loopback_ports import free_port
from s3_requests import RecordingProxy
from seaweed_server import SeaweedServer
from service_process import Pipeline, ServiceProcess, write_config

from meltwater.sinks.mirror_stream import ledger_name

RESULTS = Path(__file__).resolve().parent / "results" / "s3service.json"
NAMESPACE, TABLE = "bench", "orders"
IDENTIFIER = f"lake.{NAMESPACE}.{TABLE}"
LATENCY_TARGET = 1.5  # median seconds from commit to mirror, at most, at a 1 s poll
IDLE_TARGET = 60  # catalog requests a minute while the table is idle, at most
POLL = 0.01  # how often the benchmark reads the mirror's ledger


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=30,
                        help="commits timed while the service runs (default 30)")
    parser.add_argument("--idle-seconds", type=float, default=60.0,
                        help="how long the idle table's catalog requests are counted "
                             "(default 60)")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


class Writer:
    """pyiceberg committing to the table through the REST catalog; `model` is what the
    table holds after each commit, kept by the writer, never read back."""

    def __init__(self, catalog: Any, seed: int) -> None:
        from pyiceberg.schema import Schema
        from pyiceberg.types import DoubleType, LongType, NestedField, StringType

        catalog.create_namespace_if_not_exists(NAMESPACE)
        schema = Schema(NestedField(1, "id", LongType(), required=True),
                        NestedField(2, "category", StringType(), required=True),
                        NestedField(3, "name", StringType(), required=False),
                        NestedField(4, "amount", DoubleType(), required=False),
                        identifier_field_ids=[1])
        self.table = catalog.create_table((NAMESPACE, TABLE), schema=schema)
        self.arrow_schema = self.table.schema().as_arrow()
        self.model: dict[int, tuple] = {}
        self.rng = random.Random(seed)
        self.next_id = 1
        self.commits = 0

    def commit(self) -> tuple[int, float]:
        """One commit: 50 new rows, or every fourth a delete of 5 rows. Returns the new
        snapshot's sequence number and the time the commit returned."""
        import pyarrow as pa
        from pyiceberg.expressions import In

        if self.commits % 4 == 3 and len(self.model) > 10:
            gone = self.rng.sample(sorted(self.model), 5)
            self.table.delete(In("id", gone))
            for key in gone:
                del self.model[key]
        else:
            rows = [(i, "abc"[i % 3], f"n{i}", round(self.rng.uniform(0, 100), 2))
                    for i in range(self.next_id, self.next_id + 50)]
            self.next_id += 50
            self.table.append(pa.Table.from_pylist(
                [dict(zip(self.arrow_schema.names, r, strict=True)) for r in rows],
                schema=self.arrow_schema))
            self.model.update({r[0]: r for r in rows})
        committed_at = time.time()
        self.commits += 1
        self.table.refresh()
        return self.table.current_snapshot().sequence_number, committed_at


def mirror_position(db: Path, ledger: str) -> int | None:
    """The sequence number the mirror's ledger names last, or None before its first batch."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
            row = conn.execute("SELECT sequence_number FROM meltwater_ledger WHERE pipeline = ?"
                               " ORDER BY batch_id DESC LIMIT 1", (ledger,)).fetchone()
    except sqlite3.OperationalError:  # no database or no ledger yet
        return None
    return None if row is None else row[0]


def wait_for(db: Path, ledger: str, sequence_number: int, timeout: float = 120) -> float:
    """Poll the ledger until it reaches `sequence_number`; the time it was seen."""
    deadline = time.monotonic() + timeout
    while True:
        position = mirror_position(db, ledger)
        if position is not None and position >= sequence_number:
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the mirror did not reach sequence number {sequence_number} "
                               f"within {timeout:.0f} s (it holds {position})")
        time.sleep(POLL)


def mirror_rows(db: Path) -> set[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        return {tuple(r) for r in conn.execute(
            f'SELECT id, category, name, amount FROM "{TABLE}"').fetchall()}


def batch_totals(metrics: str) -> tuple[float, float]:
    """(seconds, count) of the triggers so far, from /metrics."""
    found = []
    for part in ("sum", "count"):
        match = re.search(rf"^meltwater_batch_duration_seconds_{part}{{[^}}]*}} (\S+)$",
                          metrics, re.M)
        found.append(float(match.group(1)) if match else 0.0)
    return found[0], found[1]


def batch_seconds(before: str, after: str) -> dict[str, float] | None:
    """The triggers between two /metrics readings: how many, and their mean seconds (Spark's
    `triggerExecution`, which includes `latestOffset` waiting for the watcher)."""
    (s0, n0), (s1, n1) = batch_totals(before), batch_totals(after)
    if n1 <= n0:
        return None
    return {"batches": n1 - n0, "mean_seconds": (s1 - s0) / (n1 - n0)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from pyiceberg.catalog import load_catalog

    with SeaweedServer() as server:
        catalog = load_catalog("bench-writer", **server.catalog_properties())
        writer = Writer(catalog, args.seed)
        first, _ = writer.commit()
        with CountingProxy(server.catalog_uri) as proxy, \
                RecordingProxy(server.s3_endpoint) as s3:
            service_catalog = {**server.catalog_properties(), "uri": proxy.url,
                               "oauth2-server-uri": f"{proxy.url}/v1/oauth/tokens",
                               "s3.endpoint": s3.url}
            db = work / "mirror.db"
            pipeline = Pipeline("orders", IDENTIFIER, work / "checkpoint",
                                {"type": "sqlite", "url": f"sqlite:///{db}", "table": TABLE,
                                 "key": ["id"]})
            port = free_port()
            config = write_config(work / "service.toml", [pipeline], port=port)
            config.write_text(config.read_text() + "\n[catalogs.lake]\n" + "".join(
                f'"{k}" = "{v}"\n' for k, v in service_catalog.items()))
            ledger = ledger_name(pipeline.name, str(pipeline.checkpoint))
            env_keys = [k for k in os.environ if k.startswith(("AWS_", "PYICEBERG_"))]
            for key in env_keys:  # the service knows the catalog from its config only
                del os.environ[key]
            started = time.monotonic()
            service = ServiceProcess(config, port, work / "service.log")
            try:
                service.wait_running(timeout=240)
                wait_for(db, ledger, first, timeout=240)
                startup = time.monotonic() - started
                print(f"  service running and caught up in {startup:.1f}s; {args.commits} "
                      "commits ...", flush=True)
                rng = random.Random(args.seed + 1)
                latencies = []
                metrics_before = service.metrics()
                s3.take()
                for _ in range(args.commits):
                    time.sleep(rng.uniform(0.2, 1.2))
                    sequence, committed_at = writer.commit()
                    latencies.append(wait_for(db, ledger, sequence) - committed_at)
                metrics = batch_seconds(metrics_before, service.metrics())
                s3_during = len(s3.take())
                print(f"  idle for {args.idle_seconds:.0f}s, counting catalog requests ...",
                      flush=True)
                before_tables = proxy.count("GET", f"/tables/{TABLE}")
                before_all = len(proxy.requests)
                time.sleep(args.idle_seconds)
                idle_tables = proxy.count("GET", f"/tables/{TABLE}") - before_tables
                idle_all = len(proxy.requests) - before_all
                idle_s3 = [f"{r.method} {r.path}" for r in s3.take()]
                exact = mirror_rows(db) == set(writer.model.values())
                exit_code = service.stop()
            finally:
                if service.process.poll() is None:
                    service.kill()
    per_minute = 60.0 / args.idle_seconds
    median = statistics.median(latencies)
    return {
        "commits": args.commits, "seed": args.seed,
        "service_start_seconds": startup,
        "latency_seconds": latencies,
        "latency": {"median": median, "p90": percentile(latencies, 0.9),
                    "min": min(latencies), "max": max(latencies),
                    "mean": statistics.fmean(latencies)},
        "micro_batches": metrics,
        "s3_requests_per_commit": s3_during / args.commits,
        "idle": {"seconds": args.idle_seconds, "load_table_requests": idle_tables,
                 "all_catalog_requests": idle_all, "s3_requests": len(idle_s3),
                 "s3_request_lines": idle_s3,
                 "load_table_per_minute": idle_tables * per_minute,
                 "all_per_minute": idle_all * per_minute},
        "mirror_equals_model": exact, "mirror_rows": len(writer.model),
        "service_exit": exit_code,
        "latency_target_met": median <= LATENCY_TARGET,
        "idle_target_met": idle_all * per_minute <= IDLE_TARGET,
    }


def print_report(result: dict[str, Any]) -> None:
    lat = result["latency"]
    idle = result["idle"]
    print(f"\n{result['commits']} commits to {IDENTIFIER} (SeaweedFS REST catalog + S3, "
          f"loopback) mirrored into SQLite by `meltwater serve` (trigger event, catalog "
          f"watcher asking loadTable every 1 s)")
    print(f"commit -> mirror latency: median {lat['median']:.2f} s, p90 {lat['p90']:.2f} s, "
          f"min {lat['min']:.2f} s, max {lat['max']:.2f} s (target: median <= "
          f"{LATENCY_TARGET} s): {'met' if result['latency_target_met'] else 'NOT met'}")
    batches = result["micro_batches"]
    if batches:
        print(f"triggers during the commits: {batches['batches']:.0f}, mean "
              f"{batches['mean_seconds']:.2f} s (Spark's triggerExecution: the micro-batch and "
              "latestOffset's wait for the watcher)")
    print(f"idle {idle['seconds']:.0f} s: {idle['load_table_requests']} loadTable requests, "
          f"{idle['all_catalog_requests']} catalog requests in all = "
          f"{idle['all_per_minute']:.0f} a minute (target <= {IDLE_TARGET}): "
          f"{'met' if result['idle_target_met'] else 'NOT met'}; S3 requests "
          f"{idle['s3_requests']} {idle['s3_request_lines'][:6]}")
    print(f"the service's S3 requests per commit: {result['s3_requests_per_commit']:.1f}")
    print(f"mirror equals the writer's model ({result['mirror_rows']} rows): "
          f"{result['mirror_equals_model']}; service start to caught up "
          f"{result['service_start_seconds']:.1f} s; exit {result['service_exit']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="meltwater-s3service-") as tmp:
        result = run(args, Path(tmp))
    import pyiceberg

    record = {"environment": {"python": platform.python_version(), "cpus": os.cpu_count(),
                              "pyiceberg": pyiceberg.__version__},
              "load_average": {"start": load_start, "end": os.getloadavg()}, **result}
    print_report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nresults written to {args.out} (load average {load_start[0]:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end)")
    return 0 if result["mirror_equals_model"] else 1


if __name__ == "__main__":
    sys.exit(main())
