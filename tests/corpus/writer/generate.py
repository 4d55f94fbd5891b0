"""Writes the corpus: every scenario's table and ground truth, into one directory.

Usage (inside the writer virtualenv): python generate.py --out DIR --jars JAR[,JAR...]
[--only NAME ...] [--foreign FILE]. Writes DIR/warehouse (the Iceberg tables, Hadoop
catalog layout), DIR/<scenario>/scenario.json and DIR/<scenario>/truth/<snapshot-id>/
(Parquet). With --foreign, tables other writers wrote (pyiceberg:
`corpus.pyiceberg_corpus`) get Iceberg Java's truth the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from recorder import CATALOG, NAMESPACE, ForeignRecorder, Recorder
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
    parser.add_argument("--foreign", type=Path, default=None,
                        help="a JSON list of tables other writers wrote: name, "
                             "metadata_location, features, labels (snapshot id -> label)")
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
    foreign = json.loads(args.foreign.read_text()) if args.foreign else []
    for entry in foreign:
        if args.only and entry["name"] not in args.only:
            continue
        recorder = ForeignRecorder(spark, args.out, entry["name"], entry["features"],
                                   entry["metadata_location"],
                                   {int(k): v for k, v in entry["labels"].items()})
        recorder.capture("written by another writer")
        record = recorder.finish()
        index.append(entry["name"])
        print(f"{entry['name']}: {len(record['snapshots'])} snapshots (read by Iceberg Java "
              "from another writer's table)", flush=True)
    (args.out / "index.json").write_text(json.dumps({"scenarios": index}, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
