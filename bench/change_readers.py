"""The two ways of getting one commit's row changes that bench/changes.py compares.

- meltwater: `meltwater.stream.change_feed(location, range_request(from_snapshot_id=parent,
  to_snapshot_id=update)).reader().read_all()` (what `meltwater.stream.changes` returns, with
  the feed kept so its planning stats can be read), on a FileIO that counts the files it
  opens, after emptying the manifest cache.
- Spark 3.5 + Iceberg Java: both snapshots read and `EXCEPT ALL` taken both ways, timed in a
  child process in the writer venv (writer/java_diff.py).

Also the cheap correctness check: meltwater's change rows against the Spark diff's, as
multisets.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tables import WRITER_DIR, writer_child_env
from timing import RunFn

BEFORE_TYPES = ("DELETE", "UPDATE_BEFORE")
AFTER_TYPES = ("INSERT", "UPDATE_AFTER")


# -- meltwater -----------------------------------------------------------------------------
def _local(location: str) -> str:
    for prefix in ("file://", "file:"):
        if location.startswith(prefix):
            return location[len(prefix):]
    return location


def counting_io(delete_paths: list[str]):
    """A PyArrowFileIO that records every file meltwater opens, by kind.

    Data files are opened through `open_input` (one `pq.ParquetFile` each); Parquet position
    delete files may instead go through `resolve` into one Arrow dataset scan, so every
    resolved location is recorded too and files are counted by distinct location.
    """
    from meltwater.planner.table.fileio import PyArrowFileIO

    deletes = {_local(p) for p in delete_paths}

    class CountingIO(PyArrowFileIO):
        def __init__(self, options: dict[str, str] | None = None) -> None:
            super().__init__(options)
            self.opened: list[str] = []
            self.resolved: set[str] = set()

        def open_input(self, location: str) -> Any:
            self.opened.append(location)
            return super().open_input(location)

        def resolve(self, location: str):
            self.resolved.add(location)
            return super().resolve(location)

        def kind(self, location: str) -> str:
            path = _local(location)
            if "/metadata/" in path:
                if not path.endswith(".avro"):
                    return "metadata_file"  # metadata JSON, version hint
                return "manifest_list" if "/snap-" in path else "manifest"
            return "delete_file" if path in deletes else "data_file"

        def counts(self) -> dict[str, int]:
            out: dict[str, int] = {}
            for location in self.opened:
                key = f"{self.kind(location)}_opens"
                out[key] = out.get(key, 0) + 1
            touched = set(self.opened) | self.resolved
            for location in touched:
                key = f"{self.kind(location)}s_touched"
                out[key] = out.get(key, 0) + 1
            return out

    return CountingIO()


@dataclass
class MeltwaterRuns:
    """What each meltwater run planned and opened, and the last run's change rows."""

    stats: list[dict[str, int]] = field(default_factory=list)
    files: list[dict[str, int]] = field(default_factory=list)
    last: pa.Table | None = None

    def consistent(self) -> bool:
        """Every run planned and opened exactly the same (a cold cache each time)."""
        return all(s == self.stats[0] for s in self.stats) and all(
            f == self.files[0] for f in self.files)


def meltwater_changes(table: dict[str, Any], runs: MeltwaterRuns) -> RunFn:
    """One change read of the update commit, recording its stats and files into `runs`."""
    from meltwater.stream.engine.changes.change_feed import change_feed, range_request

    commit = range_request(from_snapshot_id=table["parent_snapshot_id"],
                           to_snapshot_id=table["update_snapshot_id"])

    def run() -> int:
        io = counting_io(table["delete_file_paths"])
        feed = change_feed(table["location"], commit, io=io)
        result = feed.reader().read_all()
        runs.stats.append(feed.stats.as_dict())
        runs.files.append(io.counts())
        runs.last = result
        return result.num_rows

    return run


def clear_manifest_cache() -> None:
    from meltwater.planner.table.manifests import MANIFEST_CACHE

    MANIFEST_CACHE.clear()


def change_type_counts(changes: pa.Table) -> dict[str, int]:
    counted = changes.group_by("_change_type").aggregate([("_change_type", "count")])
    return dict(zip(counted.column("_change_type").to_pylist(),
                    counted.column("_change_type_count").to_pylist(), strict=True))


# -- Spark 3.5 + Iceberg Java --------------------------------------------------------------
@dataclass(frozen=True)
class SparkDiff:
    """What the child Spark process measured for one table: timed runs only."""

    name: str
    seconds: list[float]
    warmup_seconds: list[float]
    rows: dict[str, int]
    startup_seconds: float
    out: str


def spark_diffs(env: Any, warehouse: str, jobs: list[dict[str, Any]],
                shuffle_partitions: int) -> list[SparkDiff]:
    """Run writer/java_diff.py once for all jobs: one JVM, the jobs in order."""
    command = [str(env.python), str(WRITER_DIR / "java_diff.py"), "--warehouse", warehouse,
               "--jars", env.spark_jars(), "--shuffle-partitions", str(shuffle_partitions)]
    for job in jobs:
        command += ["--job", json.dumps(job)]
    result = subprocess.run(command, env=writer_child_env(env), capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-10:])
        raise RuntimeError(f"java_diff.py failed:\n{tail}")
    records = [json.loads(line) for line in result.stdout.splitlines()
               if line.startswith("{")]
    outs = {job["name"]: job["out"] for job in jobs}
    return [SparkDiff(r["name"], r["seconds"], r["warmup_seconds"], r["rows"],
                      r["startup_seconds"], outs[r["name"]]) for r in records]


# -- correctness -----------------------------------------------------------------------------
def _side(rows: pa.Table, column: str, types: tuple[str, ...], schema: pa.Schema) -> pa.Table:
    import pyarrow.compute as pc

    kept = rows.filter(pc.is_in(rows.column(column), value_set=pa.array(types)))
    kept = kept.select(schema.names).cast(schema)
    return kept.sort_by([(name, "ascending") for name in schema.names])


def compare_with_spark(changes: pa.Table, spark_out: str, table_columns: list[str]
                       ) -> dict[str, Any]:
    """meltwater's rows that left (DELETE, UPDATE_BEFORE) against `before EXCEPT ALL after`,
    and the rows that arrived (INSERT, UPDATE_AFTER) against `after EXCEPT ALL before`,
    as multisets (both sides sorted on every column, then compared exactly)."""
    import pyarrow.dataset as ds

    schema = pa.schema([pa.field(f.name, f.type) for f in
                        changes.schema if f.name in table_columns])
    spark = ds.dataset(Path(spark_out), format="parquet").to_table()
    result: dict[str, Any] = {}
    for side, ours, theirs in (("before", BEFORE_TYPES, ("DELETE",)),
                               ("after", AFTER_TYPES, ("INSERT",))):
        a = _side(changes, "_change_type", ours, schema)
        b = _side(spark, "_change_type", theirs, schema)
        result[side] = {"meltwater_rows": a.num_rows, "spark_rows": b.num_rows,
                        "equal": a.equals(b)}
    result["equal"] = all(result[s]["equal"] for s in ("before", "after"))
    return result
