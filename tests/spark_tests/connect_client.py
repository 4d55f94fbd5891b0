"""Read with `format("meltwater")` through a Spark Connect client, in its own process.

    python tests/spark_tests/connect_client.py SPEC.json OUT_DIR

`SparkSession.builder.remote("local[2]")` has pyspark start a local Spark Connect server
(a JVM of this process's own, which is why this runs apart from the test session's classic
SparkSession) and connect to it over gRPC; everything below goes through the Connect
client. The server's Python workers run `PYSPARK_PYTHON`. SPEC holds `{"table": T,
"batch": {name: options}, "stream": {name: options}}`: each batch read is written to
OUT_DIR/<name>.parquet (`toArrow()`), each stream runs once with trigger(availableNow=True)
into a Parquet sink OUT_DIR/<name>/. A meltwater error at registration is printed as the
CLI prints one (`meltwater: ...`, exit status 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    import meltwater.stream
    from meltwater.planner.errors import MeltwaterError

    spark = (SparkSession.builder.remote("local[2]")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        try:
            meltwater.stream.register(spark)
        except MeltwaterError as error:
            print(f"meltwater: {error}", file=sys.stderr)
            return 2
        table = spec["table"]
        for name, options in spec["batch"].items():
            frame = spark.read.format("meltwater").options(**options).load(table)
            pq.write_table(frame.toArrow(), out / f"{name}.parquet")
        for name, options in spec["stream"].items():
            query = (spark.readStream.format("meltwater").options(**options).load(table)
                     .writeStream.format("parquet")
                     .option("checkpointLocation", str(out / f"{name}.checkpoint"))
                     .trigger(availableNow=True).start(str(out / name)))
            query.awaitTermination()
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
