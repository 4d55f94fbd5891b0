"""Writes the corpus a second time with an object store's warehouse, by Iceberg Java itself.

Usage (inside the writer virtualenv): python generate_s3.py --out DIR --jars JAR[,JAR...]
--warehouse SCHEME://BUCKET[/PREFIX] [--only NAME ...], SCHEME one of s3, gs, abfs (for
abfs, BUCKET is `container@account.dfs.core.windows.net`). --jars must include the compiled
LocalBucketFileSystem. Writes the tables to DIR/bucket/<BUCKET>/<key> for
SCHEME://BUCKET/<key>, and DIR/index.json, DIR/<scenario>/scenario.json and
DIR/<scenario>/truth/ exactly as writer/generate.py does for the local corpus.

The scenarios, the recorder and the Spark session are writer/'s, unchanged: only the
warehouse differs, and `fs.<SCHEME>.impl` is LocalBucketFileSystem, rooted at DIR/bucket
(its URI, and so every path it answers with, takes the scheme of the warehouse it is
initialized with). The truth is still Iceberg Java's time-travel read of each snapshot,
written to local paths (no scheme: Hadoop's default file system stays `file:`).

Lives outside writer/ on purpose: build.py's key of the local corpus hashes every file under
writer/, and this one must not regenerate it. generate.py is not given a --warehouse option
for the same reason; this script runs its loop with its session builder instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "writer"))

from generate import spark_session
from recorder import CATALOG, NAMESPACE, Recorder
from scenarios import SCENARIOS

FS_CLASS = "meltwater.corpus.s3.LocalBucketFileSystem"
SCHEMES = ("s3", "gs", "abfs")  # what Iceberg Java's HadoopFileIO writes through it here


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--warehouse", required=True, help="s3|gs|abfs://bucket[/prefix]")
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    scheme = args.warehouse.partition("://")[0]
    if scheme not in SCHEMES:
        parser.error(f"--warehouse must be an {', '.join(s + '://' for s in SCHEMES)} URI")
    spark = spark_session(args.warehouse.rstrip("/"), args.jars)  # str(...) of it is used
    spark.sparkContext.setLogLevel("ERROR")
    # Before the first use of the catalog, which copies the Hadoop configuration when it
    # initializes (and HadoopFileIO carries that copy into every task).
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set(f"fs.{scheme}.impl", FS_CLASS)
    hadoop.set("fs.s3.local-bucket.root"  # the class's root property, whatever the scheme
               , str((args.out / "bucket").resolve()))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    index = []
    for name, (features, build) in SCENARIOS.items():
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        recorder = Recorder(spark, args.out, name, features)
        build(recorder)
        record = recorder.finish()
        if not record["metadata_location"].startswith(args.warehouse):
            raise RuntimeError(f"{name} was written at {record['metadata_location']}, "
                               f"not under {args.warehouse}")
        index.append(name)
        print(f"{name}: {len(record['snapshots'])} snapshots, delete files "
              f"{record['delete_files']}, {time.monotonic() - started:.1f}s", flush=True)
    (args.out / "index.json").write_text(json.dumps({"scenarios": index}, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
