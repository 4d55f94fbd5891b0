"""Writes one change-benchmark table with Apache Iceberg Java 1.10.2 on Spark 3.5.

Usage (inside the writer virtualenv): python changes_tables.py --out DIR --jars JAR[,JAR...]
--rows N --files N --updated N. Writes DIR/warehouse (Hadoop catalog layout) and
DIR/tables.json describing the table (location, snapshots, files, the update's snapshot id
and its parent's, and the paths of the delete files the update wrote).

The table (`changes_mor`) is merge-on-read, format v2, unpartitioned, with file-scoped
position deletes and `id` as its identifier field. Its history has two snapshots:

1. one append of N rows (the scan benchmark's columns) in id order: `spark.range` with
   --files partitions gives each write task one contiguous id range, so the data files are
   append-ordered like a real table's and never overlap in id;
2. one merge-on-read `UPDATE ... SET customer_id = customer_id + 1 WHERE id < --updated`:
   clustered in id space, so it touches the first data file only, and writes one position
   delete file for it and one data file with the new row versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from make_tables import COLUMNS, MOR_PROPERTIES, describe, scan_rows
from spark import CATALOG, NAMESPACE, ident, spark_session

TABLE = "changes_mor"


def create(spark: Any) -> None:
    """The scan table's columns with `id` NOT NULL and the table's identifier field."""
    tblprops = ", ".join(f"'{k}'='{v}'" for k, v in MOR_PROPERTIES.items())
    columns = COLUMNS.replace("id BIGINT", "id BIGINT NOT NULL", 1)
    spark.sql(f"DROP TABLE IF EXISTS {ident(TABLE)}")
    spark.sql(f"CREATE TABLE {ident(TABLE)} ({columns}) USING iceberg "
              f"TBLPROPERTIES ({tblprops})")
    spark.sql(f"ALTER TABLE {ident(TABLE)} SET IDENTIFIER FIELDS id")


def write(spark: Any, rows: int, files: int, updated: int) -> None:
    """One ordered append, then the update of the first `updated` ids."""
    scan_rows(_OrderedRange(spark, files), rows).writeTo(ident(TABLE)).append()
    spark.sql(f"UPDATE {ident(TABLE)} SET customer_id = customer_id + 1 "
              f"WHERE id < {updated}")


class _OrderedRange:
    """Hands make_tables.scan_rows a `spark.range` split into `files` contiguous id ranges,
    so this table shares the scan table's column definitions and writes one file per range."""

    def __init__(self, spark: Any, files: int) -> None:
        self.spark, self.files = spark, files

    def range(self, start: int, end: int) -> Any:
        return self.spark.range(start, end, 1, self.files)


def update_record(spark: Any) -> dict[str, Any]:
    """The update snapshot, its parent, and what the update wrote, as Iceberg Java sees it."""
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, ident(TABLE))
    update = table.currentSnapshot()
    summary = dict(update.summary())
    deletes = [r["file_path"] for r in spark.sql(
        f"SELECT file_path FROM {ident(TABLE)}.delete_files").collect()]
    return {
        "update_snapshot_id": update.snapshotId(),
        "parent_snapshot_id": update.parentId(),
        "update_operation": update.operation(),
        "update_summary": summary,
        "delete_file_paths": deletes,
        "identifier_fields": list(table.schema().identifierFieldNames()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--updated", type=int, required=True)
    args = parser.parse_args()
    spark = spark_session(args.out / "warehouse", args.jars, "meltwater-bench-changes-writer")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    started = time.monotonic()
    create(spark)
    write(spark, args.rows, args.files, args.updated)
    record = {**describe(spark, TABLE), **update_record(spark), "rows": args.rows,
              "updated_ids": args.updated}
    print(f"{TABLE}: {json.dumps(record)} ({time.monotonic() - started:.0f}s)", flush=True)
    (args.out / "tables.json").write_text(json.dumps({TABLE: record}, indent=2,
                                                     sort_keys=True))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
