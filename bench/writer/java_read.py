"""Times Iceberg Java reading a whole bench table through Spark 3.5.

Usage (inside the writer virtualenv): python java_read.py --warehouse DIR --jars JARS
--table NAME --repeats N. Prints one JSON line: {"seconds": [...], "rows": N,
"startup_seconds": S}. JVM and SparkSession start-up and one warm-up read happen before the
timed runs and are excluded from them, so the figures are Iceberg's read path with a hot JVM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from spark import ident, spark_session


def full_read(spark: Any, table: str) -> None:
    """Decode every column of every live row: the noop sink consumes rows and keeps none."""
    spark.table(table).write.format("noop").mode("overwrite").save()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    spark = spark_session(args.warehouse, args.jars, "meltwater-bench-java-read")
    table = ident(args.table)
    full_read(spark, table)  # warm-up: JIT, class loading, page cache
    startup = time.perf_counter() - started
    seconds = []
    for _ in range(args.repeats):
        begin = time.perf_counter()
        full_read(spark, table)
        seconds.append(time.perf_counter() - begin)
    rows = spark.table(table).count()  # untimed; counts rows after deletes
    spark.stop()
    print(json.dumps({"seconds": seconds, "rows": rows, "startup_seconds": startup}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
