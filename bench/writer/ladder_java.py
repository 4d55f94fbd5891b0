"""Iceberg Java's reads for the scale ladder (issue 25): the peers it is timed against and
the reads every rung's rows are checked against.

Usage (inside the writer virtualenv): python ladder_java.py --warehouse DIR --jars JARS
--jobs FILE. FILE is a JSON list of jobs, run in order in one JVM (local[2], 4g driver):

- {"op": "read", "name", "location", "snapshot": ID or null, "warmups": N, "repeats": N}:
  every live row of the table at that snapshot decoded into Spark's `noop` sink (as
  java_read.py's full_read does, but by location and at any snapshot); then the rows
  counted (untimed).
- {"op": "diff", "name", "location", "from": ID, "to": ID, "where": SQL or null, "warmups",
  "repeats", "out": DIR}: java_diff.py's brute-force snapshot diff, both snapshots read and
  EXCEPT ALL taken both ways (rows only in `to` are INSERTs, only in `from` DELETEs), written
  as Parquet to `out`. With `where`, both reads are first restricted to the rows it selects
  (the keys a range of upserts wrote): the same diff, cheaper on a big table whose other rows
  the range cannot have changed; the harness checks that restriction by row counts.
- {"op": "dump", "name", "location", "snapshot", "out", "where": SQL or null}: the table's
  rows at that snapshot (with `where`, those it selects) written as Parquet (untimed; the
  service rung's check of its mirror).

Prints one JSON line per job: {"name", "seconds": [...], "warmup_seconds": [...], "rows": N
or {"DELETE": n, "INSERT": n}, "startup_seconds", "jvm_peak_rss_bytes"}: the JVM's peak
resident memory so far (VmHWM), so the first job's figure is its own. JVM and SparkSession
start-up and the warm-up runs are excluded from `seconds`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from java_diff import counts
from spark import spark_session


def at(spark: Any, location: str, snapshot: int | None) -> Any:
    reader = spark.read.format("iceberg")
    if snapshot is not None:
        reader = reader.option("snapshot-id", str(snapshot))
    return reader.load(location)


def read_once(spark: Any, job: dict[str, Any]) -> float:
    begin = time.perf_counter()
    at(spark, job["location"], job.get("snapshot")).write.format("noop").mode(
        "overwrite").save()
    return time.perf_counter() - begin


def diff_once(spark: Any, job: dict[str, Any]) -> float:
    from pyspark.sql import functions as F

    begin = time.perf_counter()
    old = at(spark, job["location"], job["from"])
    new = at(spark, job["location"], job["to"])
    if job.get("where"):
        old, new = old.where(job["where"]), new.where(job["where"])
    inserted = new.exceptAll(old).withColumn("_change_type", F.lit("INSERT"))
    deleted = old.exceptAll(new).withColumn("_change_type", F.lit("DELETE"))
    deleted.unionByName(inserted).write.mode("overwrite").parquet(job["out"])
    return time.perf_counter() - begin


def dump_once(spark: Any, job: dict[str, Any]) -> float:
    begin = time.perf_counter()
    _selected(at(spark, job["location"], job.get("snapshot")), job).write.mode(
        "overwrite").parquet(job["out"])
    return time.perf_counter() - begin


def _selected(frame: Any, job: dict[str, Any]) -> Any:
    return frame.where(job["where"]) if job.get("where") else frame


def peak_rss(spark: Any) -> int | None:
    """The JVM's peak resident set size (VmHWM), in bytes."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run(spark: Any, job: dict[str, Any]) -> dict[str, Any]:
    once = {"read": read_once, "diff": diff_once, "dump": dump_once}[job["op"]]
    warmups = [once(spark, job) for _ in range(job.get("warmups", 0))]
    seconds = [once(spark, job) for _ in range(job.get("repeats", 1))]
    if job["op"] == "diff":
        rows: Any = counts(spark, job["out"])
    else:
        rows = _selected(at(spark, job["location"], job.get("snapshot")), job).count()
    return {"name": job["name"], "seconds": seconds, "warmup_seconds": warmups, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--jobs", required=True, type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    spark = spark_session(args.warehouse, args.jars, "meltwater-ladder-java")
    # Timestamps as Parquet INT64 micros with UTC, so pyarrow reads what meltwater returns.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    startup = time.perf_counter() - started
    for job in json.loads(args.jobs.read_text()):
        try:
            record = run(spark, job)
        except Exception as error:  # the harness reports it; the next job goes on
            text = getattr(error, "desc", None) or str(error)
            record = {"name": job["name"], "error": " | ".join(
                line for line in str(text).splitlines()[:3] if line.strip())[:600]}
        record.update(startup_seconds=startup, jvm_peak_rss_bytes=peak_rss(spark))
        print(json.dumps(record), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
