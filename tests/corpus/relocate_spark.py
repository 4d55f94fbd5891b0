"""Runs Iceberg's `rewrite_table_path` procedure on one table (inside the writer virtualenv).

Usage: python relocate_spark.py --warehouse DIR --table db.NAME --source-prefix P
       --target-prefix T --staging DIR --jars JAR[,JAR...] [--io-impl CLASS]

The table is loaded from a Hadoop catalog at DIR, the corpus warehouse, read only: the
procedure requires the current metadata file to lie under P, the prefix written into every
file, so the table cannot be read from a copy elsewhere; it writes nothing but the staging
dir. The procedure rewrites every metadata file, manifest list, manifest and position delete
file so that paths under P become paths under T, writes them to the staging dir, and leaves a
CSV listing `source,target` for every file to copy (rewritten ones from staging, data files
from where they are). Prints one JSON line: the procedure's `latest_version` (file name of
the newest rewritten metadata.json) and `file_list_location`.

Lives outside writer/ on purpose: the corpus key hashes writer/*.py, and this file must not
regenerate the corpus. Runs on Spark 3.5 with Iceberg 1.10.2's runtime, as generate.py does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CATALOG = "src"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", required=True, type=Path)
    parser.add_argument("--table", required=True)
    parser.add_argument("--source-prefix", required=True)
    parser.add_argument("--target-prefix", required=True)
    parser.add_argument("--staging", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--io-impl", default=None,
                        help="FileIO class of the catalog (staging writes go through it)")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("meltwater-relocate")
        .config("spark.jars", args.jars)
        .config("spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", str(args.warehouse))
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
        .config(f"spark.sql.catalog.{CATALOG}.io-impl",
                args.io_impl or "org.apache.iceberg.hadoop.HadoopFileIO")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    row = spark.sql(
        f"CALL {CATALOG}.system.rewrite_table_path("
        f"table => '{args.table}', source_prefix => '{args.source_prefix}', "
        f"target_prefix => '{args.target_prefix}', "
        f"staging_location => '{args.staging.as_uri()}')").collect()[0]
    print(json.dumps({"latest_version": row["latest_version"],
                      "file_list_location": row["file_list_location"]}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
