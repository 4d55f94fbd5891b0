"""Every rung's rows against Iceberg Java's reads (issue 25).

- A change rung: meltwater's `--output` file against Iceberg Java's brute-force snapshot
  diff of the same range (writer/ladder_java.py, `EXCEPT ALL` both ways), as multisets on
  every table column (change_readers.compare_with_spark: rows that left against the diff's
  DELETEs, rows that arrived against its INSERTs). On the backlog table the diff is
  restricted to the keys the range's commits upserted (every other row is unchanged by
  construction, so the restricted diff is the whole diff): that keeps a 20M-row table's
  check to minutes. The restriction is itself checked: meltwater's arrivals minus
  departures must equal the change in Iceberg Java's live row count over the range.
- A change rung of key before-images: the same, the rows that left compared by `id` only.
- A scan: the rows in the output file against Iceberg Java's live row count there.

The diffs and counts depend only on the table and on ladder_java.py, so they are computed
once and kept in the table's cache directory (`checks-<hash>/`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import change_readers
from ladder_tables import LadderTable
from tables import WRITER_DIR, writer_child_env

TABLE_COLUMNS = ["id", "customer_id", "amount", "category", "note", "event_ts", "event_date"]
ARRIVING = ("INSERT", "UPDATE_AFTER")
LEAVING = ("DELETE", "UPDATE_BEFORE")


def run_java(table: LadderTable, jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run ladder_java.py once for `jobs` (one JVM, in order); its record of each job."""
    env = table.env
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(jobs, file)
        file.flush()
        result = subprocess.run(
            [str(env.python), str(WRITER_DIR / "ladder_java.py"),
             "--warehouse", str(table.warehouse), "--jars", env.spark_jars(),
             "--jobs", file.name],
            env=writer_child_env(env), capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-10:])
        raise RuntimeError(f"ladder_java.py failed:\n{tail}")
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {r["name"]: r for r in records}


@dataclass(frozen=True)
class DiffSpec:
    """A range of a table whose changes are checked: (from, to], optionally restricted to
    the rows `where` selects."""

    name: str
    from_snapshot: int
    to_snapshot: int
    where: str | None = None


def checks_dir(table: LadderTable) -> Path:
    digest = hashlib.sha256((WRITER_DIR / "ladder_java.py").read_bytes()).hexdigest()[:10]
    return table.home / f"checks-{digest}"


def java_diffs(table: LadderTable, specs: list[DiffSpec], counts: list[int],
               log: Callable[[str], None]) -> tuple[dict[str, Path], dict[int, int]]:
    """Iceberg Java's diff of each spec (a Parquet directory) and its live row count at
    each snapshot id in `counts`, computed once per table."""
    home = checks_dir(table)
    home.mkdir(exist_ok=True)
    jobs = []
    for spec in specs:
        if not (home / f"{spec.name}.json").exists():
            jobs.append({"op": "diff", "name": spec.name, "location": table.location,
                         "from": spec.from_snapshot, "to": spec.to_snapshot,
                         "where": spec.where, "warmups": 0, "repeats": 1,
                         "out": str(home / spec.name)})
    for snapshot in counts:
        if not (home / f"count-{snapshot}.json").exists():
            jobs.append({"op": "read", "name": f"count-{snapshot}", "location": table.location,
                         "snapshot": snapshot, "warmups": 0, "repeats": 0})
    if jobs:
        log(f"  Iceberg Java: {len(jobs)} reads to check {table.shape.label} against (once) ...")
        for name, record in run_java(table, jobs).items():
            if "error" in record:
                raise RuntimeError(f"Iceberg Java check {name} failed: {record['error']}")
            (home / f"{name}.json").write_text(json.dumps(record))
    diffs = {spec.name: home / spec.name for spec in specs}
    live = {s: json.loads((home / f"count-{s}.json").read_text())["rows"] for s in counts}
    return diffs, live


def compare_changes(output: Path, java_diff: Path, live_change: int | None = None,
                    ) -> dict[str, Any]:
    """meltwater's change file against Iceberg Java's diff; `live_change`: Iceberg Java's
    live rows at the end minus at the start (checked against arrivals - departures)."""
    import pyarrow.parquet as pq

    changes = pq.read_table(output)
    result = change_readers.compare_with_spark(changes, str(java_diff), TABLE_COLUMNS)
    types = change_readers.change_type_counts(changes) if changes.num_rows else {}
    result["change_types"] = types
    if live_change is not None:
        net = (sum(types.get(t, 0) for t in ARRIVING)
               - sum(types.get(t, 0) for t in LEAVING))
        result["live_row_change"] = {"meltwater": net, "iceberg_java": live_change,
                                     "equal": net == live_change}
        result["equal"] = result["equal"] and net == live_change
    return result


def compare_key_changes(output: Path, java_diff: Path, live_change: int | None = None,
                        ) -> dict[str, Any]:
    """A change file of key before-images (`--before-images key`) against Iceberg Java's
    diff: the rows that left by their key, the rows that arrived whole."""
    import pyarrow.parquet as pq

    by_key = compare_changes(output, java_diff, live_change)
    whole = change_readers.compare_with_spark(pq.read_table(output), str(java_diff),
                                              TABLE_COLUMNS)
    by_key["before"] = change_readers.compare_with_spark(
        pq.read_table(output), str(java_diff), ["id"])["before"]
    by_key["after"] = whole["after"]
    by_key["equal"] = (by_key["before"]["equal"] and whole["after"]["equal"]
                       and by_key.get("live_row_change", {}).get("equal", True))
    return by_key


def output_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def compare_rows(path: Path, expected: int) -> dict[str, Any]:
    rows = output_rows(path)
    return {"rows": rows, "iceberg_java_rows": expected, "equal": rows == expected}
