"""Run one `meltwater` streaming query (or batch read) in its own process, for the restart
and cluster tests.

    python tests/spark_tests/stream_query.py --master local[2] --table T --checkpoint C --sink S \
        [--option k=v ...] [--hold-after-first-batch] [--pid-column] [--batch]

Reads `spark.readStream.format("meltwater").load(T)` with trigger(availableNow=True) and
writes a Parquet sink (exactly once through its `_spark_metadata` log); with `--batch`,
`spark.read.format("meltwater").load(T)` written to the sink directory as Parquet.
`--hold-after-first-batch`: once the first micro-batch is committed (its `commits/0` is in
the checkpoint), every task of a later one writes `<checkpoint>.held` and then blocks for
good, so a test can kill the process in the middle of a micro-batch without guessing how
long one takes. `--pid-column` adds `_pid`, the process id that handled each row, so a test
can see the work ran in executors. Prints one JSON line at the end: batches run, driver
pid, executors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--hold-after-first-batch", action="store_true")
    parser.add_argument("--pid-column", action="store_true")
    parser.add_argument("--batch", action="store_true")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(args.master).appName("meltwater-stream-child")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    if args.master.startswith("local-cluster"):
        builder = builder.config("spark.executor.memory", "512m")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    import meltwater.stream

    meltwater.stream.register(spark)
    reader = (spark.read.format("meltwater") if args.batch
              else spark.readStream.format("meltwater").option("starting", "earliest"))
    for item in args.option:
        key, _, value = item.partition("=")
        reader = reader.option(key, value)
    frame = reader.load(args.table)
    hold, with_pid = args.hold_after_first_batch, args.pid_column
    first_committed = os.path.join(args.checkpoint, "commits", "0")
    held = args.checkpoint.rstrip("/") + ".held"
    if hold or with_pid:
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType

        def pid(_):
            if hold and os.path.exists(first_committed):
                with open(held, "w") as marker:
                    marker.write(str(os.getpid()))
                while True:  # mid-flight until the test kills the process group
                    time.sleep(1)
            return os.getpid()

        called = F.udf(pid, IntegerType())(F.col("_change_type"))
        # a dropped column would be pruned, so without --pid-column the UDF is a filter
        frame = frame.withColumn("_pid", called) if with_pid else frame.filter(called > 0)
    if args.batch:
        partitions = frame.rdd.getNumPartitions()
        frame.write.parquet(args.sink)
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
        print(json.dumps({"partitions": partitions, "driver_pid": os.getpid(),
                          "executors_and_driver": executors}), flush=True)
        spark.stop()
        return
    query = (frame.writeStream.format("parquet")
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start(args.sink))
    query.awaitTermination()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    print(json.dumps({"batches": len(query.recentProgress), "driver_pid": os.getpid(),
                      "executors_and_driver": executors}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
