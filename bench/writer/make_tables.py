"""Writes the two bench tables with Apache Iceberg Java 1.10.2 on Spark 3.5.

Usage (inside the writer virtualenv): python make_tables.py --out DIR --jars JAR[,JAR...]
--rows N --files N --manifests N. Writes DIR/warehouse (Hadoop catalog layout) and
DIR/tables.json describing each table (locations, file and manifest counts, live rows).

- `scan_mor`: N rows of realistic columns in --files data files, then one merge-on-read
  DELETE of ~5% of the rows spread over every file, so every data file gets its own
  file-scoped position delete file.
- `plan_many_manifests`: --manifests separate Iceberg Java appends with manifest merging
  off, so the current snapshot lists one manifest per append, then one merge-on-read DELETE
  adding position delete files, so planning also has to build a delete index.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from spark import CATALOG, NAMESPACE, PLAN_TABLE, SCAN_TABLE, ident, spark_session

COLUMNS = ("id BIGINT, customer_id INT, amount DOUBLE, category STRING, note STRING, "
           "event_ts TIMESTAMP, event_date DATE")
CATEGORIES = ("books", "garden", "toys", "music", "sports", "grocery", "beauty", "tools",
              "games", "office", "shoes", "travel")
MOR_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.delete.granularity": "file",
    "write.distribution-mode": "none",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "3",
}
EPOCH_2024_MICROS = 1_704_067_200_000_000
YEAR_MICROS = 365 * 86_400 * 1_000_000


def jiter(iterable: Any):
    """Iterate a Java Iterable through py4j."""
    iterator = iterable.iterator()
    while iterator.hasNext():
        yield iterator.next()


def create(spark: Any, name: str, extra: dict[str, str], partitioned_by: str = "") -> None:
    props = {**MOR_PROPERTIES, **extra}
    tblprops = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    spark.sql(f"DROP TABLE IF EXISTS {ident(name)}")
    spark.sql(f"CREATE TABLE {ident(name)} ({COLUMNS}) USING iceberg {partitioned_by} "
              f"TBLPROPERTIES ({tblprops})")


def scan_rows(spark: Any, rows: int) -> Any:
    """Synthetic orders: hashed (not sequential) values so files do not compress to nothing."""
    categories = ", ".join(f"'{c}'" for c in CATEGORIES)
    return spark.range(0, rows).selectExpr(
        "id",
        "CAST(pmod(xxhash64(id, 'customer'), 100000) AS INT) AS customer_id",
        "CASE WHEN pmod(xxhash64(id, 'null'), 50) = 0 THEN NULL "
        "ELSE round(pmod(xxhash64(id, 'amount'), 1000000) / 100.0, 2) END AS amount",
        f"element_at(array({categories}), "
        f"CAST(pmod(xxhash64(id, 'cat'), {len(CATEGORIES)}) + 1 AS INT)) AS category",
        "concat_ws(' ', 'order', CAST(id AS STRING), "
        "substr(sha1(CAST(id AS STRING)), 1, CAST(4 + pmod(xxhash64(id, 'len'), 28) AS INT)))"
        " AS note",
        f"timestamp_micros({EPOCH_2024_MICROS} + pmod(xxhash64(id, 'ts'), {YEAR_MICROS}))"
        " AS event_ts",
    ).selectExpr("*", "to_date(event_ts) AS event_date")


def make_scan_table(spark: Any, rows: int, files: int) -> None:
    """Hundreds of data files, then ~5% of rows position-deleted across all of them."""
    create(spark, SCAN_TABLE, {})
    scan_rows(spark, rows).repartition(files).writeTo(ident(SCAN_TABLE)).append()
    spark.sql(f"DELETE FROM {ident(SCAN_TABLE)} WHERE pmod(xxhash64(id, 'delete'), 20) = 0")


def small_rows(append: int, per_file: int) -> list[dict[str, Any]]:
    """One small file's rows, all in one day partition (writeData needs a single partition)."""
    day = dt.date(2024, 1, 1) + dt.timedelta(days=append % 30)
    out = []
    for i in range(per_file):
        row_id = append * per_file + i
        out.append({
            "id": row_id,
            "customer_id": row_id % 1000,
            "amount": float(row_id % 997) / 10.0,
            "category": CATEGORIES[row_id % len(CATEGORIES)],
            "note": f"order {row_id}",
            "event_ts": f"{day.isoformat()}T{i % 24:02d}:00:00+00:00",
            "event_date": day.isoformat(),
        })
    return out


def make_plan_table(spark: Any, manifests: int, per_file: int = 20) -> None:
    """One manifest per append (merging off), committed through the Iceberg Java API."""
    create(spark, PLAN_TABLE, {"commit.manifest-merge.enabled": "false"},
           "PARTITIONED BY (event_date)")
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, ident(PLAN_TABLE))
    files = jvm.meltwater.corpus.CorpusFiles
    for append in range(manifests):
        data_file = files.writeData(table, small_rows(append, per_file))
        table.newAppend().appendFile(data_file).commit()
    spark.sql(f"DELETE FROM {ident(PLAN_TABLE)} WHERE id % 10 = 3")


def describe(spark: Any, name: str) -> dict[str, Any]:
    """What the harness needs to find and check a table, as Iceberg Java sees it."""
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, ident(name))
    current = table.operations().current()
    counts = {0: (0, 0), 1: (0, 0), 2: (0, 0)}
    for row in spark.sql(f"SELECT content, count(*) AS n, sum(record_count) AS r "
                         f"FROM {ident(name)}.files GROUP BY content").collect():
        counts[row["content"]] = (row["n"], row["r"])
    manifests = spark.sql(f"SELECT content, count(*) AS n FROM {ident(name)}.manifests "
                          "GROUP BY content").collect()
    return {
        "ident": ident(name),
        "location": table.location(),
        "metadata_location": current.metadataFileLocation(),
        "snapshots": sum(1 for _ in jiter(table.snapshots())),
        "data_files": counts[0][0],
        "data_rows": counts[0][1],
        "position_delete_files": counts[1][0],
        "deleted_rows": counts[1][1],
        "equality_delete_files": counts[2][0],
        "manifests": {("data" if r["content"] == 0 else "deletes"): r["n"] for r in manifests},
        "live_rows": spark.table(ident(name)).count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--manifests", type=int, required=True)
    args = parser.parse_args()
    spark = spark_session(args.out / "warehouse", args.jars, "meltwater-bench-writer")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    record = {}
    for name, build in ((SCAN_TABLE, lambda: make_scan_table(spark, args.rows, args.files)),
                        (PLAN_TABLE, lambda: make_plan_table(spark, args.manifests))):
        started = time.monotonic()
        build()
        record[name] = describe(spark, name)
        print(f"{name}: {json.dumps(record[name])} ({time.monotonic() - started:.0f}s)",
              flush=True)
    (args.out / "tables.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
