"""Scale ladder (issue 25): what change reads and scans cost as the delete backlog, the
history and the table grow, whole processes side by side with their peers.

Usage: .venv/bin/python bench/ladder.py [--quick] [--shapes backlog,history,big]
       [--skip peers service checks] [--repeats 3] [--backlog-rows 2000000,20000000]

Tables (bench/writer/ladder_tables.py, Iceberg Java 1.10.2; cached, see ladder_tables.py):
- backlog: rows in id order, then 200 Flink-style upserts of 1,000 keys (a key-only
  equality delete file + a data file, one RowDelta each). Its rungs are snapshots of that
  one history: at rung k, `changes` of commit k alone (--from-snapshot parent(k)
  --to-snapshot k) and `scan --snapshot` of commit k, with a backlog of k delete files.
  Also `changes --net` over the last 20 commits against Iceberg Java's snapshot diff, and
  the scan of the last snapshot against the raw pyarrow floor, Iceberg Java and DuckDB.
- history: 200k rows, then 1,000 mixed commits; rung k is `changes --net` over commits
  1..k (from the first load, exclusive).
- big: 30M rows, 1% deleted and 0.1% updated by merge-on-read: the scan and the update's
  changes, a guard of what is fast already.
- the service: `meltwater serve` mirroring the 2M backlog table into SQLite while Iceberg
  Java commits an upsert a second (ladder_service.py).

Every meltwater figure is a whole process (`meltwater changes|scan ... --format parquet
--output F`, this checkout's console script) with its peak RSS; ladder_processes.py says
how they are repeated. Every rung's rows are checked against Iceberg Java's reads
(ladder_checks.py); a mismatch fails the run (exit 1). Prints a table of figures with
growth factors and targets; writes bench/results/ladder.json and a plot (PNG).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ladder_checks
import ladder_report
from ladder_processes import Command, measure
from ladder_tables import LadderTable, Shape, ensure_ladder_table

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MELTWATER = Path(sys.executable).parent / "meltwater"
SHAPES = ("backlog", "history", "big")
NET_WINDOW = 20  # `changes --net` over the backlog's last 20 commits


@dataclass
class Entry:
    """One measured command of the ladder and the check of its rows."""

    table: str
    shape: str
    at: int  # the rung: commits of the history (backlog: equality delete files)
    kind: str  # changes, changes-key, net, scan, or a peer: raw-pyarrow, duckdb, iceberg-java-*
    command: Command | None = None
    seconds: list[float] = field(default_factory=list)  # peers timed in their own process
    rss_bytes: int | None = None
    check: dict[str, Any] | None = None
    rows: int | None = None
    error: str | None = None
    note: str = ""
    limit_reached: float | None = None  # an entry read back from JSON that did not finish

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        """An entry of an earlier run's JSON (its command's figures, no command)."""
        return cls(data["table"], data["shape"], data["at"], data["kind"],
                   seconds=data["seconds"], rss_bytes=data["peak_rss_bytes"],
                   check=data["check"], rows=data["rows"], error=data["error"],
                   note=data["note"], limit_reached=data["did_not_finish_seconds"])

    @property
    def median(self) -> float | None:
        if self.command is not None:
            return self.command.median
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def peak_rss(self) -> int | None:
        return self.command.peak_rss if self.command is not None else self.rss_bytes

    @property
    def did_not_finish(self) -> float | None:
        return self.command.did_not_finish if self.command is not None else self.limit_reached

    @property
    def failure(self) -> str | None:
        return self.error or (self.command.error if self.command is not None else None)

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "shape": self.shape, "at": self.at, "kind": self.kind,
                "median_seconds": self.median, "peak_rss_bytes": self.peak_rss,
                "did_not_finish_seconds": self.did_not_finish, "error": self.failure,
                "rows": self.rows, "check": self.check, "note": self.note,
                "seconds": self.command.seconds if self.command else self.seconds,
                "command": self.command.as_json() if self.command else None}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small tables only (a smoke run of minutes)")
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help="comma-separated: backlog,history,big (default all)")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["rungs", "peers", "java-diff", "service", "checks",
                                 "diff-checks", "plot"],
                        help="rungs: measure no table (e.g. the service only); java-diff: "
                             "no timed Iceberg Java snapshot diff (minutes on a 20M-row "
                             "backlog); diff-checks: scans checked, change rungs not (the "
                             "Java diffs and counts take most of an hour at 20M rows)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed rounds after the warm-up (default 3)")
    parser.add_argument("--slow", type=float, default=60.0,
                        help="a command whose warm-up took longer is timed once (default 60)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="a meltwater command's time limit, seconds (default 600)")
    parser.add_argument("--duckdb-timeout", type=float, default=300.0)
    parser.add_argument("--backlog-rows", default=None,
                        help="comma-separated backlog sizes (default 2000000,20000000)")
    parser.add_argument("--history-rows", type=int, default=None)
    parser.add_argument("--history-commits", type=int, default=None)
    parser.add_argument("--big-rows", type=int, default=None)
    parser.add_argument("--service-commits", type=int, default=60)
    parser.add_argument("--service-interval", type=float, default=1.0)
    parser.add_argument("--service-driver-memory", default="4g",
                        help="the service's spark.driver.memory (default 4g; Spark's 1g "
                             "runs out of heap bootstrapping the 2M-row mirror)")
    parser.add_argument("--out", type=Path, default=RESULTS / "ladder.json")
    parser.add_argument("--plot", type=Path, default=RESULTS / "ladder.png")
    parser.add_argument("--report-from", type=Path, nargs="+", default=None, metavar="JSON",
                        help="measure nothing: report and plot earlier runs' results "
                             "together (e.g. the 2M and the 20M backlog run)")
    args = parser.parse_args(argv)
    args.shapes = [s for s in args.shapes.split(",") if s]
    unknown = set(args.shapes) - set(SHAPES)
    if unknown:
        parser.error(f"--shapes: unknown {', '.join(sorted(unknown))}")
    return args


def shapes(args: argparse.Namespace) -> dict[str, list[Shape]]:
    """The tables of each shape, smallest first."""
    if args.quick:
        backlog = [Shape("backlog", r, 20, 100) for r in (100_000, 400_000)]
        history = [Shape("history", args.history_rows or 20_000, args.history_commits or 100)]
        big = [Shape("big", args.big_rows or 1_000_000)]
    else:
        rows = [int(r) for r in (args.backlog_rows or "2000000,20000000").split(",")]
        backlog = [Shape("backlog", r, 200, 1000) for r in rows]
        history = [Shape("history", args.history_rows or 200_000,
                         args.history_commits or 1000)]
        big = [Shape("big", args.big_rows or 30_000_000)]
    return {"backlog": backlog, "history": history, "big": big}


# -- commands ------------------------------------------------------------------------------
def changes(table: LadderTable, first: int, last: int, out: Path, net: bool,
            key_images: bool = False) -> list[str]:
    argv = [str(MELTWATER), "changes", table.location,
            "--from-snapshot", str(table.snapshot(first)["snapshot_id"]),
            "--to-snapshot", str(table.snapshot(last)["snapshot_id"]),
            "--format", "parquet", "--output", str(out)]
    if key_images:  # what a sink by key reads (a mirror's stream reads so)
        argv += ["--before-images", "key"]
    return [*argv, "--net"] if net else argv


def scan(table: LadderTable, commit: int, out: Path) -> list[str]:
    return [str(MELTWATER), "scan", table.location, "--snapshot",
            str(table.snapshot(commit)["snapshot_id"]), "--format", "parquet",
            "--output", str(out)]


def live_data_files(metadata_location: str) -> tuple[list[str], int]:
    """The current snapshot's data files (local paths) and their rows, from the manifests
    as pyiceberg reads them (pyiceberg's planner refuses equality deletes)."""
    from pyiceberg.manifest import ManifestContent
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    snapshot = table.metadata.current_snapshot()
    assert snapshot is not None
    paths, rows = [], 0
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            paths.append(entry.data_file.file_path.removeprefix("file:"))
            rows += entry.data_file.record_count
    return paths, rows


def scan_peers(table: LadderTable, work: Path, args: argparse.Namespace) -> list[Entry]:
    """Whole-process raw pyarrow (no deletes) and DuckDB on the last snapshot, as
    bench/cli_peer.py writes Parquet."""
    paths, data_rows = live_data_files(table.record["metadata_location"])
    paths_file = work / "data-files.json"
    paths_file.write_text(json.dumps(paths))
    peer = [sys.executable, str(HERE / "cli_peer.py")]
    last = len(table.record["snapshots"]) - 1
    raw = Entry(table.shape.label, table.shape.shape, last, "raw-pyarrow", Command(
        f"{table.shape.label}: raw pyarrow (no deletes)",
        [*peer, "raw-pyarrow", "parquet", str(work / "raw.parquet"), str(paths_file)],
        work / "raw.parquet", args.timeout), note="deletes not applied")
    raw.rows = data_rows
    duck = Entry(table.shape.label, table.shape.shape, last, "duckdb", Command(
        f"{table.shape.label}: DuckDB iceberg_scan",
        [*peer, "duckdb", "parquet", str(work / "duckdb.parquet"),
         table.record["metadata_location"]], work / "duckdb.parquet", args.duckdb_timeout))
    duck.rows = table.live_rows(last)
    return [raw, duck]


# -- shapes --------------------------------------------------------------------------------
def backlog_entries(table: LadderTable, work: Path, args: argparse.Namespace) -> list[Entry]:
    label, last = table.shape.label, table.shape.commits
    entries = []
    for k in table.record["rungs"]:
        out = work / f"changes-{k}.parquet"
        entries.append(Entry(label, "backlog", k, "changes", Command(
            f"{label}: changes of commit {k}", changes(table, k - 1, k, out, False),
            out, args.timeout, series="changes")))
        out = work / f"scan-{k}.parquet"
        entries.append(Entry(label, "backlog", k, "scan", Command(
            f"{label}: scan at commit {k}", scan(table, k, out), out, args.timeout,
            series="scan")))
    top = max(table.record["rungs"])
    out = work / f"changes-key-{top}.parquet"
    entries.append(Entry(label, "backlog", top, "changes-key", Command(
        f"{label}: changes of commit {top}, key before-images",
        changes(table, top - 1, top, out, False, key_images=True), out, args.timeout)))
    window = min(NET_WINDOW, last)
    out = work / "net.parquet"
    entries.append(Entry(label, "backlog", last, "net", Command(
        f"{label}: changes --net of commits {last - window + 1}..{last}",
        changes(table, last - window, last, out, True), out, args.timeout),
        note=f"last {window} commits"))
    if "peers" not in args.skip:
        entries += scan_peers(table, work, args)
    return entries


def history_entries(table: LadderTable, work: Path, args: argparse.Namespace
                    ) -> list[Entry]:
    label, last = table.shape.label, table.shape.commits
    entries = []
    for k in table.record["rungs"]:
        out = work / f"net-{k}.parquet"
        entries.append(Entry(label, "history", k, "net", Command(
            f"{label}: changes --net of commits 1..{k}",
            changes(table, 0, k, out, True), out, args.timeout, series="net")))
    out = work / "scan.parquet"
    entries.append(Entry(label, "history", last, "scan", Command(
        f"{label}: scan at commit {last}", scan(table, last, out), out, args.timeout)))
    return entries


def big_entries(table: LadderTable, work: Path, args: argparse.Namespace) -> list[Entry]:
    label, last = table.shape.label, len(table.record["snapshots"]) - 1
    out = work / "changes.parquet"
    entries = [Entry(label, "big", last, "changes", Command(
        f"{label}: changes of the UPDATE commit", changes(table, last - 1, last, out, False),
        out, args.timeout)),
               Entry(label, "big", last, "scan", Command(
                   f"{label}: scan", scan(table, last, work / "scan.parquet"),
                   work / "scan.parquet", args.timeout))]
    if "peers" not in args.skip:
        entries += scan_peers(table, work, args)
    return entries


# -- Iceberg Java peers --------------------------------------------------------------------
def java_peers(table: LadderTable, entries: list[Entry], work: Path,
               args: argparse.Namespace, log: Any) -> list[Entry]:
    """Iceberg Java's scan of the last snapshot and, on the backlog table, its snapshot
    diff of the `--net` range: one JVM, timed part only (start-up and warm-up excluded)."""
    label, last = table.shape.label, len(table.record["snapshots"]) - 1
    jobs = [{"op": "read", "name": "scan", "location": table.location,
             "snapshot": table.snapshot(last)["snapshot_id"], "warmups": 1,
             "repeats": args.repeats}]
    net = next((e for e in entries if e.kind == "net" and e.shape == "backlog"), None)
    if "java-diff" in args.skip:
        net = None
    if net is not None:
        first = last - min(NET_WINDOW, last)
        jobs.append({"op": "diff", "name": "diff", "location": table.location,
                     "from": table.snapshot(first)["snapshot_id"],
                     "to": table.snapshot(last)["snapshot_id"], "warmups": 0, "repeats": 1,
                     "out": str(work / "java-diff")})
    log(f"  Iceberg Java: scan{' and snapshot diff' if net else ''} of {label} "
        "(one JVM) ...")
    found = []
    try:
        records = ladder_checks.run_java(table, jobs)
    except Exception as error:
        records = {job["name"]: {"error": str(error)[-300:]} for job in jobs}
    for job in jobs:
        record = records.get(job["name"], {"error": "no record"})
        kind = "iceberg-java-scan" if job["op"] == "read" else "iceberg-java-diff"
        entry = Entry(label, table.shape.shape, last, kind, seconds=record.get("seconds", []),
                      rss_bytes=record.get("jvm_peak_rss_bytes"), error=record.get("error"),
                      note="timed part only (warm JVM; start-up "
                           f"{record.get('startup_seconds', 0):.0f} s excluded)")
        if job["op"] == "read":
            entry.rows = record.get("rows")
            entry.check = {"rows": entry.rows, "iceberg_java_rows": table.live_rows(last),
                           "equal": entry.rows == table.live_rows(last)}
        else:
            entry.rows = sum((record.get("rows") or {}).values())
            entry.note += f"; {NET_WINDOW} commits, {json.dumps(record.get('rows'))}"
        found.append(entry)
    return found


# -- checks --------------------------------------------------------------------------------
def check_table(table: LadderTable, entries: list[Entry], log: Any,
                timed_diff: Path | None = None, changes: bool = True) -> None:
    """Each entry's rows against Iceberg Java's reads (ladder_checks); a failed or
    unfinished command is left unchecked. `timed_diff`: the Iceberg Java peer's diff of
    the backlog's `--net` range, unrestricted; the net rung is checked against it."""
    specs, counts, plan = [], set(), []
    for entry in entries:
        command = entry.command
        if command is None or command.error or command.kept is None:
            continue
        if entry.kind in ("changes", "changes-key", "net") and changes:
            first = entry.at - 1 if entry.kind != "net" else entry.at - min(
                NET_WINDOW, entry.at)
            if entry.shape == "history":
                first = 0
            where = None
            if entry.shape == "backlog":  # the keys the range upserted (ladder_checks)
                where = f"id IN ({','.join(map(str, table.keys(first + 1, entry.at)))})"
            elif entry.shape == "big":
                where = table.record["update_where"]
            spec = ladder_checks.DiffSpec(
                f"{entry.kind}-{first}-{entry.at}", table.snapshot(first)["snapshot_id"],
                table.snapshot(entry.at)["snapshot_id"], where)
            counts.update({spec.from_snapshot, spec.to_snapshot})
            if entry.kind == "net" and timed_diff is not None:
                plan.append((entry, spec, timed_diff))
                entry.note += "; checked against the timed (unrestricted) Java diff"
            else:
                specs.append(spec)
                plan.append((entry, spec, None))
        elif entry.kind in ("scan", "duckdb", "raw-pyarrow"):
            plan.append((entry, None, None))
    diffs, live = ladder_checks.java_diffs(table, specs, sorted(counts), log)
    for entry, spec, diff in plan:
        assert entry.command is not None and entry.command.kept is not None
        output = entry.command.kept
        if spec is None:
            expected = entry.rows if entry.rows is not None else table.live_rows(entry.at)
            entry.check = ladder_checks.compare_rows(output, expected)
            entry.rows = entry.check["rows"]
        else:
            compare = (ladder_checks.compare_key_changes if entry.kind == "changes-key"
                       else ladder_checks.compare_changes)
            entry.check = compare(output, diff or diffs[spec.name],
                                  live[spec.to_snapshot] - live[spec.from_snapshot])
            entry.rows = ladder_checks.output_rows(output)
        output.unlink(missing_ok=True)


# -- the run -------------------------------------------------------------------------------
def run_table(table: LadderTable, args: argparse.Namespace, log: Any) -> list[Entry]:
    work = RESULTS / "ladder-work" / table.home.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    build = {"backlog": backlog_entries, "history": history_entries, "big": big_entries}
    entries = build[table.shape.shape](table, work, args)
    log(f"\n{table.shape.label}: {table.record['live_rows']:,} live rows, "
        f"{table.record['data_files']} data files, {table.record['equality_delete_files']} "
        f"equality and {table.record['position_delete_files']} position delete files, "
        f"{len(table.record['snapshots'])} snapshots ({table.home})")
    measure([e.command for e in entries if e.command is not None], args.repeats, args.slow,
            log)
    if "peers" not in args.skip and table.shape.shape in ("backlog", "big"):
        entries += java_peers(table, entries, work, args, log)
    if "checks" not in args.skip:
        diff = next((e for e in entries if e.kind == "iceberg-java-diff"), None)
        timed = work / "java-diff"
        check_table(table, entries, log, timed if diff and diff.error is None
                    and timed.exists() else None, "diff-checks" not in args.skip)
    shutil.rmtree(work, ignore_errors=True)
    return entries


def environment() -> dict[str, Any]:
    import pyarrow

    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "pyarrow": pyarrow.__version__, "iceberg_java": "1.10.2 on Spark 3.5.9",
            "load_average_at_start": os.getloadavg()[0]}


def report_from(args: argparse.Namespace) -> int:
    """The report, targets and plot of earlier runs' JSON files, merged."""
    runs = [json.loads(path.read_text()) for path in args.report_from]
    entries = [Entry.from_json(e) for run in runs for e in run["entries"]]
    services = [run["service"] for run in runs if run.get("service")]
    service = next((s for s in services if "error" not in s), None) or next(
        iter(services), None)
    record = {"environment": runs[0]["environment"], "service": service,
              "generation_seconds": {k: v for run in runs
                                     for k, v in run["generation_seconds"].items()},
              "summary": ladder_report.summarize(entries, service)}
    ladder_report.print_report(entries, record)
    ladder_report.plot(entries, args.plot)
    print(f"plot written to {args.plot}")
    return 1 if ladder_report.mismatches(entries, service) else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_from:
        return report_from(args)
    started = time.monotonic()
    record: dict[str, Any] = {"environment": environment(), "options": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "tables": {}, "generation_seconds": {}, "entries": [], "service": None}
    entries: list[Entry] = []
    tables: dict[str, LadderTable] = {}
    wanted = shapes(args)
    for shape_name in args.shapes:
        for shape in wanted[shape_name]:
            began = time.monotonic()
            table = ensure_ladder_table(shape, lambda m: print(m, flush=True))
            tables[shape.label] = table
            record["generation_seconds"][shape.label] = {
                "this_run": round(time.monotonic() - began, 1),
                "writer_seconds": table.record.get("write_seconds")}
            record["tables"][shape.label] = {
                k: v for k, v in table.record.items() if k != "snapshots"} | {
                "home": str(table.home)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for table in tables.values() if "rungs" not in args.skip else ():
        entries += run_table(table, args, lambda m: print(m, flush=True))
        # Written as each table ends, so an interrupted run keeps what it measured.
        record["entries"] = [e.as_json() for e in entries]
        args.out.write_text(json.dumps(record, indent=2, default=str))
    backlog = [t for t in tables.values() if t.shape.shape == "backlog"]
    if "service" not in args.skip and backlog:
        import ladder_service

        table = backlog[0]
        print(f"\nservice: {table.shape.label}", flush=True)

        def java_dump(location: str, snapshot: int, out: Path) -> None:
            result = ladder_checks.run_java(table, [{
                "op": "dump", "name": "dump", "location": location, "snapshot": snapshot,
                "out": str(out)}])["dump"]
            if "error" in result:
                raise RuntimeError(f"Iceberg Java's read of the mirror's table: "
                                   f"{result['error']}")

        try:
            record["service"] = ladder_service.run_service(
                table, args.service_commits, args.service_interval,
                RESULTS / "ladder-work" / "service", java_dump,
                args.service_driver_memory, lambda m: print(m, flush=True))
        except Exception as error:
            record["service"] = {"error": str(error)[:600]}
    record["entries"] = [e.as_json() for e in entries]
    record["summary"] = ladder_report.summarize(entries, record["service"])
    record["environment"]["load_average_at_end"] = os.getloadavg()[0]
    ladder_report.print_report(entries, record)
    args.out.write_text(json.dumps(record, indent=2, default=str))
    if "plot" not in args.skip:
        ladder_report.plot(entries, args.plot)
        print(f"plot written to {args.plot}")
    print(f"results written to {args.out} ({time.monotonic() - started:.0f}s in all)")
    mismatches = ladder_report.mismatches(entries, record["service"])
    if mismatches:
        print("\nMISMATCH: rows differ from Iceberg Java's reads:", file=sys.stderr)
        for line in mismatches:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
