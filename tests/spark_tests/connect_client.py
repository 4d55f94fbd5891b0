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

The local Connect server's JVM writes to OUT_DIR/server.log, never to this process's
stdout or stderr: it is started with those descriptors pointing at the log, and keeps them
(the Python workers it starts inherit them too). Inherited, its log lines (a failed task's
stack trace, written by an executor thread) could land after meltwater's one line,
whenever the machine's load delayed them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def _children_write_to(log: Path) -> Iterator[None]:
    """Processes started inside point their stdout and stderr at `log` (descriptors 1
    and 2 are swapped while they start); this process gets its own back on leaving."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with log.open("ab") as target:
        os.dup2(target.fileno(), 1)
        os.dup2(target.fileno(), 2)
    try:
        yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    import meltwater.stream
    from meltwater.planner.errors import MeltwaterError

    with _children_write_to(out / "server.log"):
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
