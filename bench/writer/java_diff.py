"""Times the way users get a commit's row changes today: Spark 3.5 + Iceberg Java reading
both snapshots and taking EXCEPT ALL both ways.

Usage (inside the writer virtualenv): python java_diff.py --warehouse DIR --jars JARS
--job JSON [--job JSON ...]. Each job is {"name": NAME, "location": TABLE_DIR, "from": ID,
"to": ID, "repeats": N, "warmups": N, "out": DIR}: Iceberg Java loads the table by path
(so one session reads tables of several warehouses) at both snapshot ids;
`(to EXCEPT ALL from)` rows are tagged INSERT and `(from EXCEPT ALL to)` rows DELETE, and
the union is written as Parquet to `out` (a few small files: the change is small), which is
both what a user keeps and what the harness checks.

Prints one JSON line per job: {"name", "seconds": [...], "rows": {"DELETE": n,
"INSERT": n}, "warmup_seconds": [...], "startup_seconds": S}. JVM and SparkSession start-up
and the warm-up runs are excluded from `seconds`; jobs run in order in one JVM, so a later
job may skip its own warm-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from spark import spark_session


def diff(spark: Any, location: str, before: int, after: int) -> Any:
    """Both snapshots read by id; rows only in `after` are INSERTs, only in `before` DELETEs."""
    from pyspark.sql import functions as F

    def at(snapshot_id: int) -> Any:
        return (spark.read.format("iceberg").option("snapshot-id", str(snapshot_id))
                .load(location))

    old, new = at(before), at(after)
    inserted = new.exceptAll(old).withColumn("_change_type", F.lit("INSERT"))
    deleted = old.exceptAll(new).withColumn("_change_type", F.lit("DELETE"))
    return deleted.unionByName(inserted)


def run_once(spark: Any, job: dict[str, Any]) -> float:
    begin = time.perf_counter()
    diff(spark, job["location"], job["from"], job["to"]).write.mode("overwrite").parquet(job["out"])
    return time.perf_counter() - begin


def counts(spark: Any, out: str) -> dict[str, int]:
    """Rows of each change type in the written diff (untimed)."""
    rows = spark.read.parquet(out).groupBy("_change_type").count().collect()
    return {r["_change_type"]: r["count"] for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", required=True, type=Path,
                        help="the session catalog's warehouse (tables load by path)")
    parser.add_argument("--jars", required=True)
    parser.add_argument("--job", action="append", default=[], type=json.loads)
    parser.add_argument("--shuffle-partitions", type=int, default=0,
                        help="spark.sql.shuffle.partitions for the diffs (0: the session's)")
    args = parser.parse_args()
    started = time.perf_counter()
    spark = spark_session(args.warehouse, args.jars, "meltwater-bench-java-diff")
    # Timestamps as Parquet INT64 micros with UTC, so pyarrow reads what meltwater returns.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    if args.shuffle_partitions:
        spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    startup = time.perf_counter() - started
    for job in args.job:
        warmups = [run_once(spark, job) for _ in range(job.get("warmups", 1))]
        seconds = [run_once(spark, job) for _ in range(job["repeats"])]
        print(json.dumps({"name": job["name"], "seconds": seconds,
                          "warmup_seconds": warmups, "rows": counts(spark, job["out"]),
                          "startup_seconds": startup}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
