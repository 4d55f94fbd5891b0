"""`meltwater serve` following the huge table (issue 32): Iceberg Java commits one upsert of
1,000 keys a second for --commits commits while the service mirrors them into SQLite.

Usage: .venv/bin/python bench/key_index_service.py [--rows 200000000] [--commits 300]
       [--interval 1]

The table is the key index bench's (`huge` shape, bench/ladder_tables.py). Its rows are not
copied into the mirror (200M rows in SQLite would be the whole bench): the service starts
after the committer's first, untimed commit, so the mirror holds exactly the rows the timed
commits wrote (`ladder_service.run_service(bootstrap=False)`). The key index is built
first, as a running service's would be, by one `meltwater changes` of the table's last
upsert into the directory the service is then given (the index is of immutable data files,
so the scratch copy the committer writes to shares it).

Reported (bench/results/key_index_service-<sink>-<rows>.json): commit->mirror latency
(from the commit returning to the mirror's ledger reaching it) median and p95, whether the
service kept up, its CPU a commit and the peak RSS of every process of it (the service,
Spark's JVM, Python workers). The check: the mirror equals Iceberg Java's read, at the
snapshot the mirror reached, of the rows whose note names a timed commit (`v<commit>`:
every key a timed commit wrote, at its last version).

`--sink kafka`: the same commits into a Kafka sink with whole before-images
(`--before-images key`: key images, as a compacted topic needs; Tansu on loopback,
testbed/kafka_broker.py); latency from the commit returning to a
`read_committed` consumer seeing the batch marker naming its snapshot (bench/kafka.py's
`MarkerClock`). The topic's events are not compared here (tests/sink_tests do that on
small tables); the figure is whether the sink keeps up and how late it is.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ladder_checks
import ladder_service
from ladder_tables import LadderTable, Shape, ensure_ladder_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))

RESULTS = Path(__file__).resolve().parent / "results"
MELTWATER = Path(sys.executable).parent / "meltwater"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000_000)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--sink", choices=["sqlite", "kafka"], default="sqlite")
    parser.add_argument("--before-images", choices=["full", "key"], default="full",
                        help="what the Kafka sink's update and delete events carry")
    args = parser.parse_args(argv)
    shape = Shape("huge", args.rows, 50, 1000)
    table = ensure_ladder_table(shape)
    work = RESULTS / "ladder-work" / f"key-index-service-{args.rows}"
    index = RESULTS / "ladder-work" / f"key-index-service-{args.rows}-index"
    parent = table.snapshot(shape.commits - 1)["snapshot_id"]
    child = table.snapshot(shape.commits)["snapshot_id"]
    work.parent.mkdir(parents=True, exist_ok=True)
    print(f"building the key index of {shape.label} in {index} ...", flush=True)
    subprocess.run([str(MELTWATER), "changes", table.location, "--from-snapshot", str(parent),
                    "--to-snapshot", str(child), "--key-index-dir", str(index),
                    "--format", "parquet", "--output", str(work.parent / "built.parquet")],
                   check=True, stdout=subprocess.DEVNULL)
    timed_from = shape.commits + 2  # the committer's untimed commit is shape.commits + 1
    if args.sink == "kafka":
        return _report(kafka_run(table, args.commits, args.interval, args.before_images,
                                 work.with_name(work.name + "-kafka"), index), args)

    def java_dump(location: str, snapshot: int, out: Path) -> None:
        where = (f"CAST(regexp_extract(note, ' v([0-9]+) ', 1) AS INT) >= {timed_from}")
        result = ladder_checks.run_java(table, [{
            "op": "dump", "name": "dump", "location": location, "snapshot": snapshot,
            "out": str(out), "where": where}])["dump"]
        if "error" in result:
            raise RuntimeError(f"Iceberg Java's read of the mirror's table: {result['error']}")

    result = ladder_service.run_service(table, args.commits, args.interval, work, java_dump,
                                        args.driver_memory, lambda m: print(m, flush=True),
                                        bootstrap=False, key_index_dir=index)
    return _report(result, args)


def _report(result: dict[str, Any], args: argparse.Namespace) -> int:
    latency = result["latency"] or {}
    rss = result["service_peak_rss_bytes"]
    print(f"{result['mirrored']}/{args.commits} commits mirrored; latency median "
          f"{latency.get('median', float('nan')):.2f} s, p95 {latency.get('p95', float('nan')):.2f}"
          f" s, max {latency.get('max', float('nan')):.2f} s; keeps up: {result['keeps_up']}; "
          f"CPU {result['service_cpu_seconds_per_commit']:.2f} s a commit; peak RSS "
          + ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in rss.items()))
    print(f"check: {result['check']}")
    RESULTS.mkdir(exist_ok=True)
    images = "-key" if args.sink == "kafka" and args.before_images == "key" else ""
    out = RESULTS / f"key_index_service-{args.sink}{images}-{args.rows}.json"
    out.write_text(json.dumps({"rows": args.rows, "sink": args.sink,
                               "before_images": args.before_images, **result}, indent=1,
                              default=str))
    print(f"results written to {out}")
    if args.sink == "kafka":
        return 0 if result["mirrored"] == args.commits else 1
    check = result["check"] or {}
    return 0 if check.get("equal") and check.get("mirror_rows") else 1


def kafka_run(table: LadderTable, commits: int, interval: float, before_images: str,
              work: Path, index: Path) -> dict[str, Any]:
    """The service writing the committer's upserts to Kafka with `before_images`."""
    from kafka import MarkerClock
    from kafka_broker import KafkaBroker
    from loopback_ports import free_port
    from service_process import Pipeline, ServiceProcess, write_config

    from meltwater.sinks.mirror_stream import ledger_name

    scratch = work / "table"
    shutil.rmtree(work, ignore_errors=True)
    scratch.mkdir(parents=True)
    shutil.copytree(Path(table.location) / "metadata", scratch / "metadata")
    committer = ladder_service.Committer(table, scratch, commits, interval,
                                         work / "committer.log")
    try:
        start = committer.ready
        with KafkaBroker() as broker:
            pipeline = Pipeline("huge", str(scratch), work / "checkpoint",
                                {"type": "kafka", "bootstrap-servers": broker.bootstrap,
                                 "topic": "lake.huge", "before-images": before_images},
                                options={"start-snapshot-id": str(start["snapshot_id"]),
                                         "key-index-dir": str(index)})
            port = free_port()
            config = write_config(work / "service.toml", [pipeline], port=port)
            clock = MarkerClock(broker.bootstrap, "meltwater-" + ledger_name(
                pipeline.name, str(pipeline.checkpoint)))
            service = ServiceProcess(config, port, work / "service.log")
            try:
                service.wait_running(timeout=300)
                print(f"  the service is running; {commits} upserts into Kafka, one every "
                      f"{interval:g} s ...", flush=True)
                cpu_before = ladder_service.cpu_seconds(service.process.pid)
                committer.go()
                deadline = time.monotonic() + commits * interval + 300
                while time.monotonic() < deadline:
                    done = committer.commits
                    if len(done) == commits and done[-1]["snapshot_id"] in clock.seen:
                        break
                    time.sleep(0.05)
                cpu = ladder_service.cpu_seconds(service.process.pid) - cpu_before
                memory = ladder_service.peak_rss(service.process.pid)
                service.stop()
            finally:
                clock.stop.set()
                if service.process.poll() is None:
                    service.kill()
    finally:
        committer.close()
    # A micro-batch of several commits writes one marker, naming its last snapshot: a
    # commit has arrived with the first marker naming it or a later commit.
    seen: dict[int, float] = {}
    arrival = None
    for commit in reversed(committer.commits):
        marked = clock.seen.get(commit["snapshot_id"])
        if marked is not None:
            arrival = marked if arrival is None else min(arrival, marked)
        if arrival is not None:
            seen[commit["commit"]] = arrival
    latencies = [seen[c["commit"]] - c["committed_at"] for c in committer.commits
                 if c["commit"] in seen]
    last = committer.commits[-1] if committer.commits else None
    return {"commits": commits, "interval_seconds": interval, "committed": len(committer.commits),
            "mirrored": len(seen), "latency_seconds": latencies,
            "latency": None if not latencies else {
                "median": statistics.median(latencies),
                "p95": ladder_service.percentile(latencies, 0.95),
                "min": min(latencies), "max": max(latencies)},
            "keeps_up": (last is not None and last["commit"] in seen
                         and seen[last["commit"]] - last["committed_at"] <= 5 * interval),
            "service_cpu_seconds_per_commit": cpu / max(1, len(seen)),
            "service_peak_rss_bytes": memory, "check": None}


if __name__ == "__main__":
    sys.exit(main())
