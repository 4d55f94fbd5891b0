"""Writes the corpus: every scenario's table and ground truth, into one directory.

Usage (inside the writer virtualenv): python generate.py --out DIR --jars JAR[,JAR...]
[--only NAME ...]. Writes DIR/warehouse (the Iceberg tables, Hadoop catalog layout),
DIR/<scenario>/scenario.json and DIR/<scenario>/truth/<snapshot-id>/ (Parquet).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from recorder import CATALOG, NAMESPACE, Recorder
from scenarios import SCENARIOS


def spark_session(warehouse: Path, jars: str):
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("meltwater-corpus-writer")
        .config("spark.jars", jars)
        .config("spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", str(warehouse))
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    spark = spark_session(args.out / "warehouse", args.jars)
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    index = []
    for name, (features, build) in SCENARIOS.items():
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        recorder = Recorder(spark, args.out, name, features)
        build(recorder)
        record = recorder.finish()
        index.append(name)
        print(f"{name}: {len(record['snapshots'])} snapshots, delete files "
              f"{record['delete_files']}, {time.monotonic() - started:.1f}s", flush=True)
    (args.out / "index.json").write_text(json.dumps({"scenarios": index}, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
