"""CLI output benchmark (issue 15): whole processes writing the scan table to a file.

Usage: .venv/bin/python bench/cli_output.py [--repeats 3] [--formats parquet csv jsonl]

Times, as a user runs them, whole processes (interpreter start, imports, planning, reading,
deletes, encoding, fsync and rename) that write the 5M-row merge-on-read table `scan_mor`
(bench/tables.py, cached) to one file:

- `meltwater scan TABLE --format F --output PATH` (the console script of this checkout);
- raw pyarrow: a script reading the current snapshot's data files (listed before timing)
  and writing them with pyarrow's defaults. Deletes are NOT applied: it writes 250,319 more
  rows. It is the ceiling;
- pyiceberg: a script, `StaticTable.from_metadata(m).scan().to_arrow()`, then pyarrow's
  writers;
- DuckDB: a script, `COPY (SELECT * FROM iceberg_scan(m)) TO PATH (FORMAT ...)`;
- with `--before PATH`, another checkout's console script (e.g. main's) beside this one.

bench/cli_peer.py holds the three scripts. pyarrow writes no JSON: for `jsonl` the raw
pyarrow and pyiceberg scripts use `json.dumps` per row of `to_pylist()`, which takes a
minute a run, so they run only with `--slow-json`.

The processes run one at a time in rounds, as `timing.measure_rounds` runs in-process peers:
each peer once untimed as a warm-up, then `--repeats` rounds in which every peer runs twice
in a row and only the second run is timed (its files warm in the page cache), the order
reversing every other round. With `--cold SECONDS` each timed run is instead a single run
after that long at rest: the machine here takes back freed memory from an idle process
within seconds, so a run from cold touches fresh pages the second of a pair may reuse.
After every timed run the output is counted (Parquet footer;
CSV parsed by pyarrow; JSON lines counted) and checked against the table's live rows
(raw pyarrow: all rows), then removed. Prints medians and ratios; writes
bench/results/cli_output.json (gitignored).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tables import Sizes, ensure_tables

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "cli_output.json"
MELTWATER = Path(sys.executable).parent / "meltwater"
TARGET = 1.25  # meltwater's Parquet output, whole process / raw pyarrow's, at most
FORMATS = ("parquet", "csv", "jsonl")
PEERS = ("raw-pyarrow", "meltwater", "meltwater-before", "pyiceberg", "duckdb")


@dataclass
class Run:
    """One peer writing one format: its command, and what its timed runs gave."""

    peer: str
    fmt: str
    command: Callable[[str], list[str]]
    expected_rows: int
    seconds: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    bytes: int | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.peer} {self.fmt}"

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


def count_rows(path: Path, fmt: str) -> int:
    """Rows in an output file: the Parquet footer, CSV rows as pyarrow parses them (header
    excluded), or JSON lines."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if fmt == "csv":
        import pyarrow.csv as pacsv

        # Every column as text: the count is all that matters, and no type is inferred.
        reader = pacsv.open_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={}, strings_can_be_null=False),
            read_options=pacsv.ReadOptions(block_size=64 << 20))
        return sum(batch.num_rows for batch in reader)
    lines = 0
    with open(path, "rb") as source:
        while chunk := source.read(64 << 20):
            lines += chunk.count(b"\n")
    return lines


# The peers run with Python's bytecode cache on, as an installed package has it (pip
# compiles what it installs; the warm-up run writes it for an editable checkout). With
# PYTHONDONTWRITEBYTECODE set in the caller's environment, every meltwater run compiled its
# 34 modules again (about 50 ms), while the peers' site-packages were compiled.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(run: Run, directory: Path, timed: bool) -> None:
    output = directory / f"{run.peer}.{run.fmt}"
    gc.collect()
    started = time.perf_counter()
    result = subprocess.run(run.command(str(output)), capture_output=True, text=True,
                            env=CHILD_ENV)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"exit {result.returncode}: {' | '.join(tail)}"[:400])
    if timed:
        rows = count_rows(output, run.fmt)
        if rows != run.expected_rows:
            raise RuntimeError(f"wrote {rows} rows, expected {run.expected_rows}")
        run.seconds.append(elapsed)
        run.rows.append(rows)
        run.bytes = output.stat().st_size
    output.unlink(missing_ok=True)


def measure(runs: list[Run], repeats: int, directory: Path, cold: float | None = None) -> None:
    """A warm-up each, then `repeats` rounds of warm pairs (see the module doc); with
    `cold`, each timed run is a single run after `cold` seconds of rest instead."""
    live = list(runs)
    for run in runs:
        print(f"  warming up {run.name} ...", flush=True)
        try:
            run_once(run, directory, timed=False)
        except Exception as error:
            run.error = str(error)
            live.remove(run)
    for round_ in range(repeats):
        order = live if round_ % 2 == 0 else list(reversed(live))
        print(f"  round {round_ + 1}/{repeats} ...", flush=True)
        for run in order:
            if run.error:
                continue
            try:
                if cold is None:
                    run_once(run, directory, timed=False)
                else:
                    time.sleep(cold)
                run_once(run, directory, timed=True)
            except Exception as error:
                run.error = str(error)


def build_runs(tables, formats: list[str], skip: list[str], slow_json: bool,
               paths_file: Path, before: Path | None = None) -> list[Run]:
    location = tables.scan["location"]
    metadata = tables.scan["metadata_location"]
    live, everything = tables.scan["live_rows"], tables.scan["data_rows"]
    peer_script = [sys.executable, str(HERE / "cli_peer.py")]
    runs = []
    for fmt in formats:
        commands = {
            "raw-pyarrow": (lambda out, f=fmt: [*peer_script, "raw-pyarrow", f, out,
                                                str(paths_file)], everything),
            "meltwater": (lambda out, f=fmt: [str(MELTWATER), "scan", location, "--format", f,
                                              "--output", out], live),
            "meltwater-before": (lambda out, f=fmt: [str(before), "scan", location, "--format",
                                                     f, "--output", out], live),
            "pyiceberg": (lambda out, f=fmt: [*peer_script, "pyiceberg", f, out, metadata],
                          live),
            "duckdb": (lambda out, f=fmt: [*peer_script, "duckdb", f, out, metadata], live),
        }
        for peer in PEERS:
            if peer in skip or (fmt == "jsonl" and peer in ("raw-pyarrow", "pyiceberg")
                                and not slow_json):
                continue
            if peer == "meltwater-before" and (before is None or fmt == "jsonl"):
                continue
            command, rows = commands[peer]
            runs.append(Run(peer, fmt, command, rows))
    return runs


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def summarize(runs: list[Run]) -> dict:
    by = {(r.peer, r.fmt): r for r in runs}
    out: dict = {}
    for run in runs:
        raw = by.get(("raw-pyarrow", run.fmt))
        ours = by.get(("meltwater", run.fmt))
        out[run.name] = {
            "seconds": run.seconds, "median_seconds": run.median, "rows": run.rows,
            "bytes": run.bytes, "error": run.error,
            "vs_raw_pyarrow": ratio(run.median, raw.median if raw else None),
            "vs_meltwater": ratio(run.median, ours.median if ours else None),
        }
        if run.peer == "meltwater" and raw and len(raw.seconds) == len(run.seconds):
            out[run.name]["vs_raw_pyarrow_per_round"] = [
                m / r for m, r in zip(run.seconds, raw.seconds, strict=True)]
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(runs: list[Run], summary: dict) -> None:
    print(f"\n{'peer':<24}{'median s':>10}{'rows':>12}{'MB':>8}{'x raw':>8}{'x meltwater':>13}")
    for run in runs:
        s = summary[run.name]
        rows = f"{run.rows[-1]:,}" if run.rows else "-"
        size = _fmt(run.bytes / 1e6 if run.bytes else None, ".0f")
        print(f"{run.name:<24}{_fmt(run.median, '.3f'):>10}{rows:>12}{size:>8}"
              f"{_fmt(s['vs_raw_pyarrow'], '.2f'):>8}{_fmt(s['vs_meltwater'], '.2f'):>13}")
        if run.error:
            print(f"    error: {run.error}")
        rounds = s.get("vs_raw_pyarrow_per_round")
        if rounds:
            print(f"    x raw per round: median {statistics.median(rounds):.2f}, "
                  f"{min(rounds):.2f}-{max(rounds):.2f}")
    parquet = summary.get("meltwater parquet", {}).get("vs_raw_pyarrow")
    verdict = "-" if parquet is None else ("met" if parquet <= TARGET else "NOT met")
    print(f"meltwater parquet / raw pyarrow = {_fmt(parquet, '.2f')} "
          f"(target <= {TARGET}): {verdict}")


def environment() -> dict:
    import duckdb
    import pyarrow
    import pyiceberg

    load = os.getloadavg()
    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "pyarrow": pyarrow.__version__, "pyiceberg": pyiceberg.__version__,
            "duckdb": duckdb.__version__, "load_average_at_start": load[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--formats", nargs="*", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--skip", nargs="*", default=[], choices=PEERS)
    parser.add_argument("--slow-json", action="store_true",
                        help="also time raw pyarrow and pyiceberg writing JSON lines with "
                             "json.dumps per row (about a minute a run)")
    parser.add_argument("--before", type=Path, default=None, metavar="CONSOLE_SCRIPT",
                        help="also time another checkout's `meltwater` console script (e.g. "
                             "main's), as meltwater-before, for parquet and csv")
    parser.add_argument("--cold", type=float, default=None, metavar="SECONDS",
                        help="time single runs, each after SECONDS of rest, instead of the "
                             "second of two runs in a row: a command run once, as a user "
                             "runs it, after the machine has taken back freed memory")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the outputs are written (default: a temporary directory "
                             "under bench/results)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    tables = ensure_tables(Sizes(5_000_000, 200, 600))
    print(f"bench tables: {tables.home}")
    env = environment()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="cli-output-", dir=args.dir or RESULTS.parent))
    try:
        import peers

        paths_file = directory / "data-files.json"
        paths_file.write_text(json.dumps(peers.live_data_files(
            tables.scan["metadata_location"])))
        runs = build_runs(tables, args.formats, args.skip, args.slow_json, paths_file,
                          args.before)
        measure(runs, args.repeats, directory, args.cold)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    env["load_average_at_end"] = os.getloadavg()[0]
    summary = summarize(runs)
    print_table(runs, summary)
    print(f"load average {env['load_average_at_start']:.1f} at the start, "
          f"{env['load_average_at_end']:.1f} at the end")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"environment": env, "repeats": args.repeats,
                                    "cold_seconds": args.cold,
                                    "table": tables.scan, "runs": summary}, indent=2))
    print(f"results written to {args.out} ({time.monotonic() - started:.0f}s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
