"""One service following many tables (issue 33): `meltwater serve` with one pipeline over a
namespace (`tables = "<warehouse>/db/*"`), each table mirrored into SQLite, while a writer
commits to every table in turn; commit -> mirror latency and what the service holds.

Usage: .venv/bin/python bench/many_tables.py [--tables 20] [--interval 10] [--minutes 3]

The tables are written by pyiceberg (identifier `id`; appends of 20 rows, upserts of 5
keys and deletes of 3, in turn) through a SQL catalog on SQLite, which the service lists
and loads them through (`tables = "bench.db.*"`). Each table gets a commit every
--interval seconds, the tables staggered evenly over the interval (20 tables every 10 s:
two commits a second in all).
A commit's latency is from pyiceberg's commit returning to the `applied_at` of the first
ledger row of its table's pipeline holding its sequence number. Reported: latency median
and p95 (all commits, and the last minute against the first), the service's peak RSS by
process (the service's Python, Spark's JVM, its Python workers), its CPU a commit, and
what each followed table costs: RSS and CPU divided by the tables.

Prints the figures; writes bench/results/many_tables.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))

import ladder_service
from loopback_ports import free_port
from service_process import ServiceProcess

RESULTS = Path(__file__).resolve().parent / "results" / "many_tables.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between two commits to one table (default 10)")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


class Writer:
    """pyiceberg committing to the tables in turn."""

    def __init__(self, catalog: Any, tables: int) -> None:
        import pyarrow as pa
        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField, StringType

        self.pa = pa
        catalog.create_namespace_if_not_exists("db")
        schema = Schema(NestedField(1, "id", LongType(), required=True),
                        NestedField(2, "name", StringType(), required=False),
                        identifier_field_ids=[1])
        self.arrow = pa.schema([pa.field("id", pa.int64(), nullable=False),
                                pa.field("name", pa.string())])
        self.tables = [catalog.create_table(("db", f"t{i:02d}"), schema=schema)
                       for i in range(tables)]
        self.next_id = [0] * tables
        self.turns = [0] * tables
        for index in range(tables):
            self.commit(index)

    def commit(self, index: int) -> tuple[str, int, float]:
        """One commit to table `index`: (its name, the sequence number, when it returned)."""
        from pyiceberg.expressions import In

        table = self.tables[index]
        turn = self.turns[index] % 3
        self.turns[index] += 1
        first = self.next_id[index]
        if turn == 0 or first < 10:
            rows = [{"id": first + i, "name": f"n{first + i}"} for i in range(20)]
            self.next_id[index] += 20
            table.append(self.pa.Table.from_pylist(rows, schema=self.arrow))
        elif turn == 1:
            rows = [{"id": first - 1 - i, "name": f"u{first}"} for i in range(5)]
            table.upsert(self.pa.Table.from_pylist(rows, schema=self.arrow), join_cols=["id"])
        else:
            table.delete(In("id", [first - 6 - i for i in range(3)]))
        table.refresh()
        name = table.name()[-1]
        return name, table.current_snapshot().sequence_number, time.time()


def applied(database: Path) -> dict[str, list[tuple[int, float]]]:
    """Per table, its pipeline's ledger rows: (sequence number, applied_at epoch s)."""
    connection = sqlite3.connect(database, timeout=30)
    try:
        rows = connection.execute(
            "SELECT pipeline, sequence_number, applied_at FROM meltwater_ledger "
            "WHERE sequence_number IS NOT NULL ORDER BY batch_id").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        connection.close()
    found: dict[str, list[tuple[int, float]]] = {}
    for pipeline, sequence, at in rows:
        table = pipeline.split("@", 1)[0].split(".", 1)[-1]
        stamp = dt.datetime.fromisoformat(at)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.timezone.utc)
        found.setdefault(table, []).append((int(sequence), stamp.timestamp()))
    return found


def latency_of(ledger: dict[str, list[tuple[int, float]]], table: str, sequence: int,
               committed_at: float) -> float | None:
    for held, at in ledger.get(table, []):
        if held >= sequence:
            return at - committed_at
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and its descendants, from /proc."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for member in ladder_service._tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def main(argv: list[str] | None = None) -> int:
    from pyiceberg.catalog import load_catalog

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="meltwater-bench-many-") as scratch:
        work = Path(scratch)
        properties = {"type": "sql", "uri": f"sqlite:///{work}/catalog.db",
                      "warehouse": (work / "warehouse").as_uri()}
        catalog = load_catalog("bench", **properties)
        print(f"writing {args.tables} tables with pyiceberg", flush=True)
        writer = Writer(catalog, args.tables)
        database = work / "mirror.db"
        port = free_port()
        config = work / "service.toml"
        config.write_text("\n".join([
            "[service]", f'http = "127.0.0.1:{port}"', 'log = "json"', 'progress = "off"',
            "", "[spark]", 'master = "local[2]"', "", "[catalogs.bench]",
            *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in properties.items()), "",
            "[[pipelines]]", 'name = "db"', 'tables = "bench.db.*"',
            f"checkpoint = {json.dumps(str(work / 'checkpoints'))}",
            'discovery-interval = "5s"', "[pipelines.sink]", 'type = "sqlite"',
            f"url = {json.dumps(f'sqlite:///{database}')}", 'table = "{table}"', ""]))
        service = ServiceProcess(config, port, work / "service.log")
        try:
            started = time.monotonic()
            while len(applied(database)) < args.tables:
                if service.process.poll() is not None or time.monotonic() - started > 600:
                    raise SystemExit("the service did not mirror every table:\n"
                                     + service.tail(40))
                time.sleep(1)
            print(f"all {args.tables} tables mirrored after {time.monotonic() - started:.0f} s;"
                  f" committing for {args.minutes:g} min", flush=True)
            cpu_before = cpu_seconds(service.process.pid)
            commits: list[tuple[str, int, float]] = []
            step = args.interval / args.tables
            begin = time.monotonic()
            turn = 0
            while time.monotonic() - begin < args.minutes * 60:
                due = begin + turn * step
                time.sleep(max(0.0, due - time.monotonic()))
                commits.append(writer.commit(turn % args.tables))
                turn += 1
            deadline = time.monotonic() + 120
            while True:
                ledger = applied(database)
                latencies = [latency_of(ledger, *c) for c in commits]
                if all(x is not None for x in latencies) or time.monotonic() > deadline:
                    break
                time.sleep(1)
            cpu = cpu_seconds(service.process.pid) - cpu_before
            memory = ladder_service.peak_rss(service.process.pid)
        finally:
            code = ladder_service.stop(service.process)
        done = [x for x in latencies if x is not None]
        first = [x for (_, _, at), x in zip(commits, latencies, strict=True)
                 if x is not None and at - commits[0][2] < 60]
        last = [x for (_, _, at), x in zip(commits, latencies, strict=True)
                if x is not None and commits[-1][2] - at < 60]

        def p95(values: list[float]) -> float:
            return sorted(values)[max(0, round(0.95 * len(values)) - 1)]

        result = {
            "tables": args.tables, "interval_s": args.interval, "minutes": args.minutes,
            "commits": len(commits), "mirrored": len(done), "service_exit": code,
            "latency_median_s": statistics.median(done), "latency_p95_s": p95(done),
            "first_minute_p95_s": p95(first), "last_minute_p95_s": p95(last),
            "peak_rss_bytes": memory, "cpu_seconds": cpu,
            "cpu_seconds_per_commit": cpu / max(1, len(commits)),
            "rss_bytes_per_table": sum(memory.values()) / args.tables}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{result['mirrored']} of {result['commits']} commits mirrored; commit -> mirror "
          f"median {result['latency_median_s']:.2f} s, p95 {result['latency_p95_s']:.2f} s "
          f"(first minute p95 {result['first_minute_p95_s']:.2f} s, last "
          f"{result['last_minute_p95_s']:.2f} s); CPU {result['cpu_seconds_per_commit']:.2f} s"
          " a commit; peak RSS " + ", ".join(f"{n} {s / 2**20:.0f} MiB"
                                            for n, s in memory.items())
          + f"; {result['rss_bytes_per_table'] / 2**20:.0f} MiB a table in all; service "
          f"exit {code}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
