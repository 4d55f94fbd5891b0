"""Writes the scan benchmark's `scan_mor` a second time, by Iceberg Java, at an s3:// warehouse.

Usage (inside the writer virtualenv): python make_s3_table.py --out DIR --jars JAR[,JAR...]
--warehouse s3://BUCKET --rows N --files N. --jars must include the compiled
LocalBucketFileSystem (tests/corpus/s3writer/). Writes the table to DIR/bucket/<BUCKET>/<key>
for s3://BUCKET/<key> and DIR/tables.json describing it, as bench/writer/make_tables.py
describes the local copy.

The table is make_tables.py's `scan_mor`, built by the same functions (`make_scan_table`,
`describe`) in the same Spark session (bench/writer/spark.py); only the Hadoop catalog's
warehouse differs, and `fs.s3.impl` is LocalBucketFileSystem, rooted at DIR/bucket. So every
path Iceberg Java writes into metadata, manifest lists, manifests and delete files is an
s3:// path it built itself, and DIR/bucket/<BUCKET> can be uploaded to an object store
byte for byte under the same keys (bench/s3bench.py).

Lives outside bench/writer/ on purpose: bench/tables.py keys the local bench tables by the
scripts there, and this one must not regenerate them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "writer"))

from make_tables import describe, make_scan_table
from spark import CATALOG, NAMESPACE, SCAN_TABLE, spark_session

FS_CLASS = "meltwater.corpus.s3.LocalBucketFileSystem"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--warehouse", required=True, help="s3://bucket")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--files", type=int, required=True)
    args = parser.parse_args()
    if not args.warehouse.startswith("s3://"):
        parser.error("--warehouse must be an s3:// URI")
    warehouse = args.warehouse.rstrip("/")
    spark = spark_session(warehouse, args.jars, "meltwater-bench-s3-writer")  # str() of it
    # Before the first use of the catalog, which copies the Hadoop configuration when it
    # initializes (and HadoopFileIO carries that copy into every task).
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("fs.s3.impl", FS_CLASS)
    hadoop.set("fs.s3.local-bucket.root", str((args.out / "bucket").resolve()))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    started = time.monotonic()
    make_scan_table(spark, args.rows, args.files)
    record = {SCAN_TABLE: describe(spark, SCAN_TABLE)}
    if not record[SCAN_TABLE]["metadata_location"].startswith(warehouse + "/"):
        raise RuntimeError(f"{SCAN_TABLE} was written at "
                           f"{record[SCAN_TABLE]['metadata_location']}, not under {warehouse}")
    print(f"{SCAN_TABLE}: {json.dumps(record[SCAN_TABLE])} ({time.monotonic() - started:.0f}s)",
          flush=True)
    (args.out / "tables.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
