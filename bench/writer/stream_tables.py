"""Writes the streaming benchmark's two histories with Apache Iceberg Java 1.10.2 on Spark 3.5.

Usage (inside the writer virtualenv): python stream_tables.py --out DIR --jars JAR[,JAR...]
--appends N --mor-appends N --rows-per-append N. Writes DIR/warehouse (Hadoop catalog
layout) and DIR/tables.json describing both tables (location, snapshots and their
operations, rows appended, files, live rows).

Both tables are format v2, unpartitioned, with the scan benchmark's columns (long, int,
double, string, string, timestamptz, date) and hashed values:

- `stream_appends`: --appends appends of --rows-per-append rows each (ids contiguous per
  append, two data files per append). Every snapshot is an `append`: the one history
  Iceberg's own streaming source reads.
- `stream_mor`: merge-on-read with file-scoped position deletes and `id` as the identifier
  field. --mor-appends appends, and after the 2nd, 3rd and 4th of every four a MOR
  `DELETE` (2% of the live rows), `UPDATE` (2%) or `MERGE` (updates 1% of the live rows
  and inserts 10,000 new ids): `delete` and `overwrite` snapshots carrying position
  deletes, which Iceberg's streaming source refuses.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from make_tables import COLUMNS, MOR_PROPERTIES, describe, jiter, scan_rows
from spark import CATALOG, NAMESPACE, ident, spark_session

APPENDS_TABLE = "stream_appends"
MOR_TABLE = "stream_mor"
MERGE_NEW_IDS = 10_000
MERGE_ID_BASE = 1_000_000_000  # ids the MERGEs insert: far above the appended ones


class _Slice:
    """Hands make_tables.scan_rows a `spark.range` of one append's ids (offset, two
    contiguous partitions), so the tables share the scan table's column definitions."""

    def __init__(self, spark: Any, offset: int, partitions: int = 2) -> None:
        self.spark, self.offset, self.partitions = spark, offset, partitions

    def range(self, start: int, end: int) -> Any:
        return self.spark.range(self.offset + start, self.offset + end, 1, self.partitions)


def create(spark: Any, name: str, identifier: bool) -> None:
    tblprops = ", ".join(f"'{k}'='{v}'" for k, v in MOR_PROPERTIES.items())
    columns = COLUMNS.replace("id BIGINT", "id BIGINT NOT NULL", 1) if identifier else COLUMNS
    spark.sql(f"DROP TABLE IF EXISTS {ident(name)}")
    spark.sql(f"CREATE TABLE {ident(name)} ({columns}) USING iceberg "
              f"TBLPROPERTIES ({tblprops})")
    if identifier:
        spark.sql(f"ALTER TABLE {ident(name)} SET IDENTIFIER FIELDS id")


def append(spark: Any, name: str, index: int, rows: int) -> None:
    scan_rows(_Slice(spark, index * rows), rows).writeTo(ident(name)).append()


def make_appends(spark: Any, appends: int, rows: int) -> None:
    create(spark, APPENDS_TABLE, identifier=False)
    for index in range(appends):
        append(spark, APPENDS_TABLE, index, rows)


def mor_commit(spark: Any, kind: int, round_: int) -> None:
    """One MOR row-level commit; the hash salt changes every round, so each one picks
    other rows."""
    table = ident(MOR_TABLE)
    pick = f"pmod(xxhash64(id, 'r{round_}'), 100)"
    if kind == 1:
        spark.sql(f"DELETE FROM {table} WHERE {pick} < 2")
    elif kind == 2:
        spark.sql(f"UPDATE {table} SET amount = coalesce(amount, 0) + 1, "
                  f"note = concat(note, ' u{round_}') WHERE {pick} < 2")
    else:
        first_new = MERGE_ID_BASE + round_ * MERGE_NEW_IDS
        source = scan_rows(_Slice(spark, first_new, 1), MERGE_NEW_IDS).unionByName(
            spark.table(table).where(f"{pick} < 1")
            .selectExpr("id", "customer_id + 1 AS customer_id", "amount", "category",
                        "concat(note, ' m') AS note", "event_ts", "event_date"))
        source.createOrReplaceTempView("merge_source")
        spark.sql(f"MERGE INTO {table} t USING merge_source s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


def make_mor(spark: Any, appends: int, rows: int) -> None:
    create(spark, MOR_TABLE, identifier=True)
    for index in range(appends):
        append(spark, MOR_TABLE, index, rows)
        if index % 4:
            mor_commit(spark, index % 4, index)


def history(spark: Any, name: str) -> dict[str, Any]:
    """Each snapshot's operation and row counts, in commit order, as Iceberg Java sees it."""
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, ident(name))
    snapshots = sorted(jiter(table.snapshots()), key=lambda s: s.sequenceNumber())
    commits = []
    for snapshot in snapshots:
        summary = dict(snapshot.summary())
        commits.append({
            "snapshot_id": snapshot.snapshotId(),
            "operation": snapshot.operation(),
            "added_records": int(summary.get("added-records", 0)),
            "deleted_records": int(summary.get("deleted-records", 0)),
            "added_position_deletes": int(summary.get("added-position-deletes", 0)),
            "removed_position_deletes": int(summary.get("removed-position-deletes", 0)),
            "added_delete_files": int(summary.get("added-delete-files", 0)),
        })
    operations: dict[str, int] = {}
    for commit in commits:
        operations[commit["operation"]] = operations.get(commit["operation"], 0) + 1
    return {
        "operations": operations,
        "appended_rows": sum(c["added_records"] for c in commits if c["operation"] == "append"),
        "added_rows": sum(c["added_records"] for c in commits),
        "live_position_deletes": sum(c["added_position_deletes"]
                                     - c["removed_position_deletes"] for c in commits),
        "commits": commits,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--appends", type=int, required=True)
    parser.add_argument("--mor-appends", type=int, required=True)
    parser.add_argument("--rows-per-append", type=int, required=True)
    args = parser.parse_args()
    spark = spark_session(args.out / "warehouse", args.jars, "meltwater-bench-stream-writer")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    record = {}
    builds = ((APPENDS_TABLE, lambda: make_appends(spark, args.appends, args.rows_per_append)),
              (MOR_TABLE, lambda: make_mor(spark, args.mor_appends, args.rows_per_append)))
    for name, build in builds:
        started = time.monotonic()
        build()
        record[name] = {**describe(spark, name), **history(spark, name)}
        brief = {k: v for k, v in record[name].items() if k != "commits"}
        print(f"{name}: {json.dumps(brief)} ({time.monotonic() - started:.0f}s)", flush=True)
    (args.out / "tables.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
