"""Commits upserts to a table at a steady pace for the ladder's service benchmark (issue 25).

Usage (inside the writer virtualenv): python ladder_upserts.py --jars JARS --table DIR
--commits N --interval SECONDS --keys N --key-space N --first-commit N [--seed N]
[--data DIR]. DIR is a Hadoop table (loaded by path with HadoopTables); with --data, its
`write.data.path` is first set there, so new data files land beside a copied table's
metadata and never in the table it was copied from.

Commits one untimed upsert (the JVM's first commit is slow), prints {"ready": true} and that
snapshot, waits for a line on stdin, then commits one upsert every --interval seconds on a
fixed schedule (commit i at start + i x interval, not an interval after the previous one
returns): ladder_tables.py's RowDelta of a key-only equality delete file and the keys' new
rows, --keys keys each, commit numbers from --first-commit on (so the values differ from
every earlier version). After each timed commit:
{"commit": i, "snapshot_id", "sequence_number", "committed_at": epoch seconds when the
commit returned}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from ladder_tables import JavaTable, upsert_keys
from spark import spark_session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jars", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--data")
    parser.add_argument("--commits", type=int, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--key-space", type=int, required=True)
    parser.add_argument("--first-commit", type=int, required=True)
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args()
    spark = spark_session(Path(args.table).parent, args.jars, "meltwater-ladder-upserts")
    jvm = spark._jvm
    loaded = jvm.org.apache.iceberg.hadoop.HadoopTables(
        spark._jsc.hadoopConfiguration()).load(args.table)
    if args.data:
        loaded.updateProperties().set("write.data.path", args.data).commit()
    table = JavaTable(spark, loaded)
    # One untimed upsert first: the JVM's first commit (class loading, JIT) takes over a
    # second and would bunch the first timed commits together.
    table.upsert(upsert_keys(args.seed, args.first_commit, args.key_space, args.keys),
                 args.first_commit)
    print(json.dumps({"ready": True, **table.snapshot()}), flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    for index in range(args.commits):
        delay = start + index * args.interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        commit = args.first_commit + 1 + index
        table.upsert(upsert_keys(args.seed, commit, args.key_space, args.keys), commit)
        committed_at = time.time()
        print(json.dumps({"commit": commit, **table.snapshot(), "committed_at": committed_at}),
              flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
