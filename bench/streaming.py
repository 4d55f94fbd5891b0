"""Streaming benchmark (issue 5): a table's whole history read as a Spark stream.

Usage: .venv/bin/python bench/streaming.py [--quick] [--repeats 5] [--skip ...]

Generates (once, cached) two histories with Iceberg Java 1.10.2 on Spark 3.5
(`bench/writer/stream_tables.py`): an append-only table of 40 appends of 125,000 rows, and
a merge-on-read table of 20 such appends with 15 MOR DELETE / UPDATE / MERGE commits between
them. Then each engine reads each history as a stream with `trigger(availableNow=True)`
into the `noop` sink. Each engine runs in one child process holding a warm SparkSession, with
the same local[2] settings (`bench/writer/stream_read.py --serve`):

- Iceberg Java's streaming source (Spark 3.5.9, writer venv) on the append-only table, then
  on the MOR table with default options (it fails: recorded) and with
  `streaming-skip-delete-snapshots` / `streaming-skip-overwrite-snapshots` (it reads the
  appends only: recorded);
- meltwater on Spark 4 (this venv), `option("starting", "earliest")`, on both tables, in a
  session set up as `meltwater.stream.local_session` sets one up (Spark's Python processes
  import pyspark from site-packages instead of `pyspark.zip` and talk to the JVM over Unix
  domain sockets: see `stream/spark/session.py`);
- a diagnostic meltwater run on the append-only table (skip it with `--skip diagnostics`):
  with a `split-size` giving two partitions, one per core.

Two untimed warm-up queries, then --repeats timed queries, per engine and table; on the
append-only table the engines alternate query by query, so load from other work on the
machine hits both alike. Prints rows per second side by side with the ratio, checks the row
counts (and, on the append-only table, that every id arrives once) against what Iceberg
Java recorded when it wrote the tables, and writes bench/results/streaming.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tables import (
    WRITER_DIR,
    cache_root,
    ensure_generated,
    ensure_writer_env,
    generator_version,
    writer_child_env,
)

RESULTS = Path(__file__).resolve().parent / "results" / "streaming.json"
MAIN_PYTHON = Path(sys.executable)
# The generator's cache key: the scripts the tables depend on (not stream_read.py).
STREAM_SOURCES = ("make_tables.py", "spark.py", "stream_tables.py")
SKIP_NON_APPENDS = {"streaming-skip-delete-snapshots": "true",
                    "streaming-skip-overwrite-snapshots": "true"}
THROUGHPUT_TARGET = 1.0  # meltwater rows/s over Iceberg's on the append-only history


@dataclass(frozen=True)
class StreamSizes:
    """The two histories' sizes; part of the cache key."""

    appends: int
    mor_appends: int
    rows_per_append: int


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one timed query per engine and table (after the warm-up)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed queries per engine and table (default 5)")
    parser.add_argument("--warmups", type=int, default=2,
                        help="untimed queries first, per engine and table (default 2: the "
                             "first query of a new JVM takes several times longer)")
    parser.add_argument("--appends", type=int, default=40,
                        help="appends of the append-only table (default 40)")
    parser.add_argument("--mor-appends", type=int, default=20,
                        help="appends of the MOR table (default 20; a MOR commit follows "
                             "three of every four)")
    parser.add_argument("--rows-per-append", type=int, default=125_000)
    parser.add_argument("--trigger", default="availableNow", choices=["availableNow", "once"])
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["iceberg", "meltwater", "mor", "checksum", "diagnostics"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.warmups, args.repeats = 1, 1
    return args


def ensure_stream_tables(sizes: StreamSizes) -> tuple[Any, Path, dict[str, Any]]:
    """The writer environment, the tables' home and writer/stream_tables.py's record."""
    env = ensure_writer_env(print)
    home = cache_root() / f"bench-stream-{generator_version(sizes, env, STREAM_SOURCES)}"
    command = [str(env.python), str(WRITER_DIR / "stream_tables.py"), "--out", str(home),
               "--jars", env.spark_jars(), "--appends", str(sizes.appends),
               "--mor-appends", str(sizes.mor_appends),
               "--rows-per-append", str(sizes.rows_per_append)]
    ensure_generated(home, env, command, "streaming tables", print)
    return env, home, json.loads((home / "tables.json").read_text())


# -- the child processes ------------------------------------------------------------------
class Child:
    """One `writer/stream_read.py --serve` process: a warm SparkSession answering commands.

    Its stderr (Spark's log) goes to a file, so a full pipe never blocks it; a child that
    dies answers with the end of that log as its error."""

    def __init__(self, name: str, python: Path, engine: str, env: dict[str, str],
                 trigger: str, scratch: Path, jars: str | None = None) -> None:
        self.name = name
        command = [str(python), str(WRITER_DIR / "stream_read.py"), "--engine", engine,
                   "--trigger", trigger, "--serve"]
        if jars:
            command += ["--jars", jars]
        self.log_path = scratch / f"{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, text=True)
        ready = self._answer()
        self.startup_seconds = ready.get("startup_seconds")
        self.error = ready.get("error")

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        self.process.wait()
        tail = self.log_path.read_text().strip().splitlines()[-8:]
        return {"error": f"{self.name} exited {self.process.returncode}: " + " | ".join(tail)}

    def ask(self, op: str, table: str, options: dict[str, str]) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"op": op, "table": table,
                                                 "options": options}) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass
        answer = self._answer()
        if "seconds" not in answer and "rows" not in answer and self.process.poll() is not None:
            self.error = answer.get("error")
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=120)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()


@dataclass
class Config:
    """One measured stream: which child reads which table with which options."""

    key: str
    label: str
    child: str
    table: str  # "stream_appends" or "stream_mor"
    options: dict[str, str] = field(default_factory=dict)


def data_file_sizes(table: dict[str, Any]) -> list[int]:
    return [p.stat().st_size for p in (Path(table["location"]) / "data").rglob("*.parquet")]


def two_partitions(table: dict[str, Any]) -> int:
    """A `split-size` that packs the append-only history into two partitions, one per core
    (meltwater packs its tasks by bytes alone, so by default this table makes one large
    and one small partition)."""
    sizes = data_file_sizes(table)
    return sum(sizes) // 2 + max(sizes)


def byte_compile_meltwater() -> None:
    """Byte-compile meltwater, as `pip install` does for a regular install.

    Spark starts a fresh Python process for the driver side of every streaming query. From
    an editable install under PYTHONDONTWRITEBYTECODE=1 (as on this machine) no bytecode
    is ever cached, so that process compiled meltwater's modules from source on every query
    (0.05 s of its 0.1 s of imports), a cost no installed user pays.
    """
    import compileall
    import importlib

    for name in ("meltwater.planner", "meltwater.stream"):
        for path in importlib.import_module(name).__path__:
            compileall.compile_dir(path, quiet=1)


def main_env() -> dict[str, str]:
    """This venv's interpreter for Spark 4's Python workers (they import meltwater)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env["PYSPARK_PYTHON"] = str(MAIN_PYTHON)
    return env


def start_children(args: argparse.Namespace, writer: Any, scratch: Path) -> dict[str, Child]:
    children = {}
    if "iceberg" not in args.skip:
        children["iceberg"] = Child("iceberg", writer.python, "iceberg",
                                    writer_child_env(writer), args.trigger, scratch,
                                    writer.spark_jars())
    if "meltwater" not in args.skip:
        children["meltwater"] = Child("meltwater", MAIN_PYTHON, "meltwater", main_env(),
                                      args.trigger, scratch)
    return children


# -- measuring -----------------------------------------------------------------------------
def new_record(config: Config, children: dict[str, Child]) -> dict[str, Any]:
    return {"label": config.label, "child": config.child, "options": config.options,
            "startup_seconds": children[config.child].startup_seconds,
            "warmup_seconds": [], "seconds": [], "rows": [], "error": None}


def run_into(record: dict[str, Any], config: Config, children: dict[str, Child],
             tables: dict[str, Any], timed: bool) -> None:
    """One query of `config` into its record; an error ends the config's runs."""
    if record["error"]:
        return
    answer = children[config.child].ask("run", tables[config.table]["location"],
                                        config.options)
    if "error" in answer:
        record["error"] = answer["error"]
        return
    record["seconds" if timed else "warmup_seconds"].append(answer.pop("seconds"))
    record["rows"].append(answer.pop("rows"))
    if timed:
        trigger_ms = (answer.get("duration_ms") or {}).get("triggerExecution")
        record.setdefault("micro_batch_seconds", []).append(
            None if trigger_ms is None else trigger_ms / 1000)
    record.update(answer)  # batches, tasks, duration_ms: the last run's


def checksum_into(record: dict[str, Any], config: Config, children: dict[str, Child],
                  tables: dict[str, Any]) -> None:
    if not record["error"]:
        record["checksum"] = children[config.child].ask(
            "checksum", tables[config.table]["location"], config.options)


def measure(args: argparse.Namespace, writer: Any, tables: dict[str, Any]) -> dict[str, Any]:
    """Append-only configs alternate run by run (order reversed every other round), so a
    burst of load on the shared machine hits all of them; then the MOR history."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="meltwater-bench-") as scratch:
        print("  starting one SparkSession per engine ...", flush=True)
        children = start_children(args, writer, Path(scratch))
        try:
            split = {"split-size": str(two_partitions(tables["stream_appends"]))}
            appends = [c for c in (
                Config("iceberg_appends", "Iceberg Java, append-only", "iceberg",
                       "stream_appends"),
                Config("meltwater_appends", "meltwater, append-only", "meltwater",
                       "stream_appends"),
                Config("meltwater_appends_2_partitions", "diagnostic: meltwater, 2 partitions",
                       "meltwater", "stream_appends", split),
            ) if c.child in children and not (
                "diagnostics" in args.skip and c.key.startswith("meltwater_appends_"))]
            for config in appends:
                out[config.key] = new_record(config, children)
            print(f"  append-only history: {len(appends)} streams, {args.warmups} warm-up "
                  f"and {args.repeats} timed queries each, alternating ...", flush=True)
            for _ in range(args.warmups):
                for config in appends:
                    run_into(out[config.key], config, children, tables, timed=False)
            for round_ in range(args.repeats):
                for config in appends if round_ % 2 == 0 else appends[::-1]:
                    run_into(out[config.key], config, children, tables, timed=True)
            if "checksum" not in args.skip:
                for config in appends[:2]:
                    checksum_into(out[config.key], config, children, tables)
            if "mor" not in args.skip:
                measure_mor(args, children, tables, out)
        finally:
            for child in children.values():
                child.close()
    for record in out.values():
        record.update(throughput(record))
    return out


def measure_mor(args: argparse.Namespace, children: dict[str, Child],
                tables: dict[str, Any], out: dict[str, Any]) -> None:
    if "iceberg" in children:
        print("  MOR history, Iceberg Java: default options, then skipping non-appends "
              "(one query each) ...", flush=True)
        for config in (Config("iceberg_mor", "Iceberg Java, MOR (default options)", "iceberg",
                              "stream_mor"),
                       Config("iceberg_mor_skipping", "Iceberg Java, MOR, skip non-appends",
                              "iceberg", "stream_mor", dict(SKIP_NON_APPENDS))):
            out[config.key] = new_record(config, children)
            run_into(out[config.key], config, children, tables, timed=True)
    if "meltwater" in children:
        print(f"  MOR history, meltwater: {args.warmups} warm-up and {args.repeats} timed "
              "queries ...", flush=True)
        config = Config("meltwater_mor", "meltwater, MOR (full change feed)", "meltwater",
                        "stream_mor")
        record = out[config.key] = new_record(config, children)
        for index in range(args.warmups + args.repeats):
            run_into(record, config, children, tables, timed=index >= args.warmups)
        if "checksum" not in args.skip:
            checksum_into(record, config, children, tables)


def throughput(record: dict[str, Any]) -> dict[str, Any]:
    """Rows per second of the median timed query and their spread; and, from Spark's
    progress reports, of the median time inside micro-batches (`triggerExecution`) and the
    median time of each query spent outside them (source start-up, stop)."""
    seconds, rows = record.get("seconds") or [], record.get("rows") or []
    if not seconds or not rows:
        return {}
    per_run = rows[-1]
    rates = [per_run / s for s in seconds]
    inside = record.get("micro_batch_seconds") or []
    known = [(s, b) for s, b in zip(seconds, inside, strict=False) if b is not None]
    batch = statistics.median(b for _, b in known) if known else None
    return {"rows_per_run": per_run, "median_seconds": statistics.median(seconds),
            "rows_per_second": per_run / statistics.median(seconds),
            "rows_per_second_spread": [min(rates), max(rates)],
            "micro_batch_rows_per_second": per_run / batch if batch else None,
            "outside_micro_batches_seconds": (statistics.median(s - b for s, b in known)
                                              if known else None),
            "same_rows_every_run": len(set(rows)) == 1}


# -- checks and the report -----------------------------------------------------------------
def expected_checksum(rows: int) -> dict[str, int]:
    """The append-only table holds ids 0 .. rows-1, each once."""
    return {"rows": rows, "sum_id": rows * (rows - 1) // 2,
            "sum_id_squared": (rows - 1) * rows * (2 * rows - 1) // 6}


def checks(runs: dict[str, Any], tables: dict[str, Any]) -> dict[str, Any]:
    """Row counts against what Iceberg Java recorded when it wrote each table."""
    appended = tables["stream_appends"]["appended_rows"]
    mor = tables["stream_mor"]
    out: dict[str, Any] = {}

    def rows_of(name: str) -> int | None:
        return runs.get(name, {}).get("rows_per_run")

    want = expected_checksum(appended)
    for name in ("iceberg_appends", "meltwater_appends", "meltwater_appends_2_partitions"):
        if rows_of(name) is not None:
            out[f"{name}_rows_equal_appended"] = rows_of(name) == appended
        summed = runs.get(name, {}).get("checksum")
        if summed:
            out[f"{name}_every_appended_id_once"] = all(
                summed[k] == v for k, v in want.items())
    types = (runs.get("meltwater_appends", {}).get("checksum") or {}).get("change_types")
    if types is not None:
        out["meltwater_appends_all_inserts"] = types == {"INSERT": appended}
    if runs.get("iceberg_mor", {}).get("seconds") == [] and runs["iceberg_mor"].get("error"):
        out["iceberg_mor_refused"] = True
    skipping = rows_of("iceberg_mor_skipping")
    if skipping is not None:
        out["iceberg_mor_skipping_reads_appended_rows_only"] = skipping == mor["appended_rows"]
    types = (runs.get("meltwater_mor", {}).get("checksum") or {}).get("change_types")
    if types is not None:
        added = types.get("INSERT", 0) + types.get("UPDATE_AFTER", 0)
        removed = types.get("DELETE", 0) + types.get("UPDATE_BEFORE", 0)
        out["meltwater_mor_inserts_and_update_afters_equal_added_records"] = (
            added == mor["added_rows"])
        out["meltwater_mor_deletes_and_update_befores_equal_position_deletes"] = (
            removed == mor["live_position_deletes"])
        out["meltwater_mor_change_types_add_up_to_rows"] = (
            sum(types.values()) == rows_of("meltwater_mor"))
    return out


def summary(runs: dict[str, Any]) -> dict[str, Any]:
    def rate(key: str, field: str = "rows_per_second") -> float | None:
        return runs.get(key, {}).get(field)

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    end_to_end = ratio(rate("meltwater_appends"), rate("iceberg_appends"))
    ours = runs.get("meltwater_appends", {}).get("seconds") or []
    theirs = runs.get("iceberg_appends", {}).get("seconds") or []
    rounds = [t / o for o, t in zip(ours, theirs, strict=False)]  # same rows: time ratio
    return {
        "meltwater_over_iceberg_appends": end_to_end, "target": THROUGHPUT_TARGET,
        "meltwater_over_iceberg_appends_per_round": rounds,
        "target_met": None if end_to_end is None else end_to_end >= THROUGHPUT_TARGET,
        "meltwater_over_iceberg_appends_micro_batch": ratio(
            rate("meltwater_appends", "micro_batch_rows_per_second"),
            rate("iceberg_appends", "micro_batch_rows_per_second")),
        "meltwater_2_partitions_over_iceberg": ratio(
            rate("meltwater_appends_2_partitions"), rate("iceberg_appends")),
        "meltwater_mor_over_iceberg_appends": ratio(rate("meltwater_mor"),
                                                    rate("iceberg_appends")),
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _line(record: dict[str, Any]) -> str:
    spread = record.get("rows_per_second_spread")
    spread_text = "-" if not spread else f"{spread[0] / 1e6:.2f}-{spread[1] / 1e6:.2f}"
    rate = record.get("rows_per_second")
    batch = record.get("micro_batch_rows_per_second")
    runs = " ".join(f"{s:.2f}" for s in record.get("seconds") or []) or "-"
    return (f"{record.get('label', record.get('engine')):<40}"
            f"{_fmt(rate and rate / 1e6, '.2f'):>8}{spread_text:>12}"
            f"{_fmt(batch and batch / 1e6, '.2f'):>10}"
            f"{_fmt(record.get('rows_per_run'), ','):>11}"
            f"{record.get('tasks') or '-'!s:>7}  {runs}")


def print_report(record: dict[str, Any]) -> None:
    tables, runs = record["tables"], record["runs"]
    print()
    for name, t in tables.items():
        print(f"{name}: {t['snapshots']} snapshots {t['operations']}, "
              f"{t['added_rows']:,} rows added, {t['live_position_deletes']:,} position "
              f"deletes live, {t['data_files']} data files ({t['data_bytes'] / 2**20:.0f} MiB), "
              f"{t['live_rows']:,} live rows")
    print(f"\ntrigger {record['trigger']}, sink noop; Mrows/s of the median timed query "
          "(query start to termination), its spread, and within Spark's micro-batches")
    print(f"{'stream':<40}{'Mrows/s':>8}{'min-max':>12}{'in batch':>10}{'rows':>11}"
          f"{'tasks':>7}  timed runs (s)")
    for r in runs.values():
        print(_line(r))
    print()
    for key, r in runs.items():
        label = r.get("label", key)
        if r.get("error"):
            print(f"{label}: {r['error']}")
        types = (r.get("checksum") or {}).get("change_types")
        if types:
            text = ", ".join(f"{n:,} {t}" for t, n in sorted(types.items()))
            print(f"{label} change types: {text}")
        if r.get("seconds"):
            outside = r.get("outside_micro_batches_seconds")
            warmup = " ".join(f"{w:.2f}s" for w in r.get("warmup_seconds") or []) or "none"
            print(f"{label}: warm-up {warmup}, "
                  f"micro-batches {r.get('batches')}, outside them "
                  f"{_fmt(outside, '.2f')}s (median), session start-up "
                  f"{r.get('startup_seconds', 0):.1f}s (excluded)")
    s = record["summary"]
    verdict = {None: "not measured", True: "met", False: "NOT met"}
    rounds = s["meltwater_over_iceberg_appends_per_round"]
    spread = f" (rounds {min(rounds):.2f}-{max(rounds):.2f}x)" if rounds else ""
    print(f"\nmeltwater / Iceberg Java rows/s, append-only history = "
          f"{_fmt(s['meltwater_over_iceberg_appends'], '.2f')}x{spread} "
          f"(target >= {THROUGHPUT_TARGET:.1f}x): {verdict[s['target_met']]}")
    print(f"  within micro-batches only: "
          f"{_fmt(s['meltwater_over_iceberg_appends_micro_batch'], '.2f')}x; diagnostics: "
          f"2 partitions {_fmt(s['meltwater_2_partitions_over_iceberg'], '.2f')}x")
    for name, ok in record["checks"].items():
        print(f"check {name}: {'ok' if ok else 'FAILED'}")


def environment() -> dict[str, Any]:
    import pyarrow
    import pyspark

    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "machine": platform.machine(), "pyarrow": pyarrow.__version__,
            "meltwater_spark": pyspark.__version__, "iceberg_java": "1.10.2 on Spark 3.5.9",
            "load_average_at_start": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    sizes = StreamSizes(args.appends, args.mor_appends, args.rows_per_append)
    writer, home, tables = ensure_stream_tables(sizes)
    print(f"streaming tables: {home}", flush=True)
    byte_compile_meltwater()
    record: dict[str, Any] = {
        "environment": environment(), "trigger": args.trigger, "sink": "noop",
        "warmups": args.warmups, "repeats": args.repeats, "home": str(home),
        "tables": {name: {**{k: v for k, v in t.items() if k != "commits"},
                          "data_bytes": sum(data_file_sizes(t))}
                   for name, t in tables.items()},
    }
    record["runs"] = measure(args, writer, tables)
    record["checks"] = checks(record["runs"], tables)
    record["summary"] = summary(record["runs"])
    record["environment"]["load_average_at_end"] = os.getloadavg()
    print_report(record)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nresults written to {args.out} ({time.monotonic() - started:.0f}s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
