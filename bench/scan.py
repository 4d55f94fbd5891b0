"""Scan and planning benchmark (issue 3): meltwater against its peers on one MOR table.

Usage: .venv/bin/python bench/scan.py [--rows 5000000] [--quick]

Generates (once, cached) a merge-on-read Iceberg table with file-scoped position deletes
and a table with hundreds of manifests, written by Iceberg Java 1.10.2 on Spark 3.5, then
times full reads by meltwater, pyiceberg, DuckDB's iceberg_scan, Iceberg Java on Spark
(a child process in the writer venv) and raw pyarrow without deletes (the ceiling), and
cold planning by meltwater and pyiceberg. Prints a table; writes bench/results/scan.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import peers
import planning
from tables import BenchTables, Sizes, ensure_tables
from timing import Measurement, Peer, measure_rounds

RESULTS = Path(__file__).resolve().parent / "results" / "scan.json"
SCAN_TARGET = 1.43  # meltwater's scan time / raw pyarrow's, at most
PLAN_TARGET = 3.0  # pyiceberg's planning time / meltwater's, at least
AGREEING = ("meltwater", "pyiceberg", "duckdb", "iceberg-java-spark")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000,
                        help="rows in the scan table before deletes (default 5,000,000)")
    parser.add_argument("--files", type=int, default=200,
                        help="data files in the scan table (default 200)")
    parser.add_argument("--manifests", type=int, default=600,
                        help="appends, so manifests, in the planning table (default 600)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per peer")
    parser.add_argument("--quick", action="store_true",
                        help="one timed run per peer after the warm-up")
    parser.add_argument("--skip", nargs="*", default=[], choices=[
        "meltwater", "pyiceberg", "duckdb", "java", "raw-pyarrow", "planning"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def java_measurement(tables: BenchTables, repeats: int) -> Measurement:
    """Iceberg Java's figures come from the child process, start-up excluded there."""
    result = Measurement("iceberg-java-spark",
                         "Spark 3.5 + Iceberg 1.10.2: spark.table(t).write.format('noop')")
    try:
        timings = peers.java_spark_read(tables, "scan_mor", repeats)
    except Exception as error:  # reported in the table
        result.error = str(error).splitlines()[-1][:300]
        return result
    result.seconds, result.rows = timings.seconds, timings.rows
    result.note = (f"timed reads only; JVM + SparkSession start-up and one warm-up read "
                   f"({timings.startup_seconds:.1f}s) excluded")
    return result


def scan_peers(tables: BenchTables, repeats: int, skip: list[str]) -> list[Measurement]:
    """The in-process readers in rounds (`timing.measure_rounds`), then Iceberg Java in its
    own process."""
    location = tables.scan["location"]
    metadata = tables.scan["metadata_location"]
    candidates = [
        ("raw-pyarrow", Peer("raw pyarrow", "pyarrow.dataset on the live data files, no deletes",
                             lambda: peers.raw_pyarrow_reader(peers.live_data_files(metadata)))),
        ("meltwater", Peer("meltwater", "meltwater.stream.scan(location).read_all()",
                           lambda: peers.meltwater_reader(location))),
        ("pyiceberg", Peer("pyiceberg", "StaticTable.from_metadata(m).scan().to_arrow()",
                           lambda: peers.pyiceberg_reader(metadata))),
        ("duckdb", Peer("duckdb", "SELECT * FROM iceberg_scan(m), fetched as Arrow",
                        lambda: peers.duckdb_reader(metadata))),
    ]
    results = measure_rounds([peer for key, peer in candidates if key not in skip], repeats)
    if "java" not in skip:
        print("  timing Iceberg Java on Spark 3.5 (child process) ...", flush=True)
        results.append(java_measurement(tables, repeats))
    return results


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def scan_summary(results: list[Measurement], live_rows: int) -> dict:
    """Ratios against the ceiling and against meltwater, and whether row counts agree."""
    by_name = {r.name: r for r in results}
    ceiling = by_name.get("raw pyarrow")
    ours = by_name.get("meltwater")
    rows = {r.name: r.rows for r in results if r.name in AGREEING and r.error is None}
    summary = {
        "live_rows_per_iceberg_java": live_rows,
        "rows_agree": bool(rows) and all(n == live_rows for n in rows.values()),
        "rows": rows,
        "ratios": {},
    }
    for r in results:
        summary["ratios"][r.name] = {
            "vs_raw_pyarrow": ratio(r.median, ceiling.median if ceiling else None),
            "vs_meltwater": ratio(r.median, ours.median if ours else None),
        }
    target = ratio(ours.median if ours else None, ceiling.median if ceiling else None)
    summary["meltwater_vs_raw_pyarrow"] = target
    if ours and ceiling and ours.seconds and len(ours.seconds) == len(ceiling.seconds):
        summary["meltwater_vs_raw_pyarrow_per_round"] = [
            m / r for m, r in zip(ours.seconds, ceiling.seconds, strict=True)]
    summary["scan_target_met"] = None if target is None else target <= SCAN_TARGET
    return summary


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_scan(results: list[Measurement], summary: dict, scan: dict) -> None:
    deleted = scan["deleted_rows"] / scan["data_rows"]
    print(f"\nscan: {scan['data_rows']:,} rows in {scan['data_files']} data files, "
          f"{scan['position_delete_files']} position delete files, "
          f"{scan['deleted_rows']:,} rows deleted ({deleted:.1%}); "
          f"{scan['live_rows']:,} live rows")
    print(f"{'peer':<20}{'median s':>10}{'rows':>13}{'x raw pyarrow':>15}{'x meltwater':>13}")
    for r in results:
        ratios = summary["ratios"][r.name]
        rows = "-" if r.rows is None else f"{r.rows:,}"
        print(f"{r.name:<20}{_fmt(r.median, '.3f'):>10}{rows:>13}"
              f"{_fmt(ratios['vs_raw_pyarrow'], '.2f'):>15}"
              f"{_fmt(ratios['vs_meltwater'], '.2f'):>13}")
        if r.error:
            print(f"    error: {r.error}")
        if r.note:
            print(f"    {r.note}")
    agree = "agree" if summary["rows_agree"] else "DO NOT agree"
    print(f"rows of {', '.join(summary['rows'])} {agree} with Iceberg Java's "
          f"{scan['live_rows']:,} (raw pyarrow ignores deletes)")
    target = summary["meltwater_vs_raw_pyarrow"]
    verdict = {None: "not measured", True: "met", False: "NOT met"}[summary["scan_target_met"]]
    print(f"meltwater / raw pyarrow = {_fmt(target, '.2f')} "
          f"(target <= {SCAN_TARGET}): {verdict}")
    rounds = summary.get("meltwater_vs_raw_pyarrow_per_round")
    if rounds:
        print(f"  per round: median {statistics.median(rounds):.2f}, "
              f"{min(rounds):.2f}-{max(rounds):.2f} over {len(rounds)} rounds")


def run_planning(tables: BenchTables, repeats: int) -> dict:
    """Cold planning of the many-manifest table by both Python planners."""
    location, metadata = tables.plan["location"], tables.plan["metadata_location"]
    print("  timing planning ...", flush=True)
    ours, theirs = planning.time_planning(location, metadata, repeats)
    speedup = ratio(theirs.median, ours.median)
    return {
        "table": tables.plan,
        "meltwater": ours.as_json(),
        "pyiceberg": theirs.as_json(),
        "delete_matches": planning.delete_matches(location, metadata),
        "pyiceberg_over_meltwater": speedup,
        "plan_target_met": None if speedup is None else speedup >= PLAN_TARGET,
    }


def print_planning(result: dict) -> None:
    table = result["table"]
    manifests = table["manifests"]
    print(f"\nplanning: {sum(manifests.values())} manifests ({manifests.get('data', 0)} data, "
          f"{manifests.get('deletes', 0)} delete), {table['data_files']} data files, "
          f"{table['position_delete_files']} position delete files (cold manifest caches)")
    for name in ("meltwater", "pyiceberg"):
        r = result[name]
        line = f"{name:<20}{_fmt(r['median_seconds'], '.3f'):>10} s{r['rows'] or '-':>8} tasks"
        print(line + (f"\n    error: {r['error']}" if r["error"] else ""))
    print(f"delete files matched: {result['delete_matches']}")
    speedup = result["pyiceberg_over_meltwater"]
    verdict = {None: "not measured", True: "met", False: "NOT met"}[result["plan_target_met"]]
    print(f"pyiceberg / meltwater = {_fmt(speedup, '.2f')}x (target >= {PLAN_TARGET}): {verdict}")


def environment() -> dict:
    import duckdb
    import pyarrow
    import pyiceberg

    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "machine": platform.machine(), "pyarrow": pyarrow.__version__,
            "pyiceberg": pyiceberg.__version__, "duckdb": duckdb.__version__,
            "iceberg_java": "1.10.2 on Spark 3.5.9"}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    started = time.monotonic()
    tables = ensure_tables(Sizes(args.rows, args.files, args.manifests))
    print(f"bench tables: {tables.home}")
    results = scan_peers(tables, repeats, args.skip)
    summary = scan_summary(results, tables.scan["live_rows"])
    record = {"environment": environment(), "repeats": repeats, "warmups": 1,
              "scan": {"table": tables.scan, "peers": {r.name: r.as_json() for r in results},
                       **summary}}
    planned = None if "planning" in args.skip else run_planning(tables, repeats)
    record["planning"] = planned
    print_scan(results, summary, tables.scan)
    if planned:
        print_planning(planned)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nresults written to {args.out} ({time.monotonic() - started:.0f}s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
