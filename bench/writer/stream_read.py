"""Times tables' whole histories read as Spark streams into the `noop` sink.

Runs in either virtualenv, one engine per process, with the same local Spark settings:

- `--engine iceberg` in the writer venv (pyspark 3.5.9, Iceberg 1.10.2's runtime jar from
  `--jars`): `spark.readStream.format("iceberg").load(LOCATION)`, Iceberg's own
  `SparkMicroBatchStream` (appends only; by default it fails on other snapshots);
- `--engine meltwater` in the main venv (pyspark 4.x): `meltwater.stream.register(spark)`,
  then `spark.readStream.format("meltwater").option("starting", "earliest").load(LOCATION)`.

Usage: python stream_read.py --engine iceberg|meltwater [--jars JARS]
[--trigger availableNow|once], then either

- `--table LOCATION [--option k=v ...] [--warmups N] [--repeats N] [--checksum]`: runs the
  queries and prints one JSON record; or
- `--serve`: prints {"ready": true, "startup_seconds": S}, then answers one JSON line per
  JSON command read from stdin, {"op": "run" | "checksum", "table": LOCATION, "options":
  {...}}, until {"op": "quit"} or end of input. The benchmark keeps one process per engine
  alive this way and alternates their runs, so both see the same load on a shared machine.

Every run is a new query with a fresh checkpoint: `readStream ... load()`, `writeStream`
into `noop` with the trigger, `start()`, `awaitTermination()`. Its seconds are from just
before `readStream` to termination, so JVM and SparkSession start-up (and, for meltwater,
the Python data source's registration) are excluded. A run answers {"seconds", "rows" (the
sum of `numInputRows` over the query's progress reports), "batches", "tasks" (per Spark
stage), "duration_ms" (Spark's progress phases, summed over batches)}. A checksum is one
untimed query through `foreachBatch` adding up rows, sum(id), sum(id * id) and rows per
`_change_type`. A query that fails answers {"error": ...}; it is the finding, not a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any


def spark_session(engine: str, jars: str | None) -> Any:
    """local[2] and a 4g driver for both engines; only the source's own set-up differs."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if engine == "meltwater":  # as meltwater.stream.local_session sets a local Spark up
        from meltwater.stream.spark.session import use_local_spark_home

        use_local_spark_home("local[2]")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(f"meltwater-bench-stream-{engine}")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
    )
    if engine == "meltwater":
        from meltwater.stream.spark.session import LOCAL_SESSION_CONF

        builder = builder.config(map=LOCAL_SESSION_CONF)
    if engine == "iceberg":
        if not jars:
            raise SystemExit("--engine iceberg needs --jars")
        builder = (builder.config("spark.jars", jars)
                   .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions."
                           "IcebergSparkSessionExtensions"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if engine == "meltwater":
        import meltwater.stream

        meltwater.stream.register(spark)
    return spark


class Streams:
    """One engine's session and the queries it runs on demand."""

    def __init__(self, engine: str, jars: str | None, trigger: str) -> None:
        began = time.perf_counter()
        self.engine, self.trigger = engine, trigger
        self.spark = spark_session(engine, jars)
        self.startup_seconds = time.perf_counter() - began
        self.work = tempfile.mkdtemp(prefix="meltwater-bench-stream-")

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        self.spark.stop()

    def _frame(self, table: str, options: dict[str, str]) -> Any:
        stream = self.spark.readStream.format(self.engine)
        if self.engine == "meltwater":
            stream = stream.option("starting", "earliest")
        for key, value in options.items():
            stream = stream.option(key, value)
        return stream.load(table)

    def _start(self, writer: Any, checkpoint: str) -> Any:
        writer = writer.option("checkpointLocation", checkpoint)
        if self.trigger == "availableNow":
            return writer.trigger(availableNow=True).start()
        return writer.trigger(once=True).start()

    def run(self, table: str, options: dict[str, str]) -> dict[str, Any]:
        """One whole-history query into `noop`."""
        checkpoint = tempfile.mkdtemp(prefix="ckpt-", dir=self.work)
        try:
            started = time.perf_counter()
            query = self._start(self._frame(table, options).writeStream.format("noop"),
                                checkpoint)
            query.awaitTermination()
            elapsed = time.perf_counter() - started
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
        progress = [p for p in query.recentProgress if p]
        phases: dict[str, int] = {}
        for report in progress:
            for phase, ms in (_get(report, "durationMs") or {}).items():
                phases[phase] = phases.get(phase, 0) + int(ms)
        return {"seconds": elapsed,
                "rows": sum(int(_get(p, "numInputRows") or 0) for p in progress),
                "batches": len({_get(p, "batchId") for p in progress
                                if _get(p, "numInputRows")}),
                "tasks": self._tasks(query), "duration_ms": phases}

    def _tasks(self, query: Any) -> list[int]:
        """Tasks of each stage of the query's Spark jobs (their job group is its run id)."""
        tracker = self.spark.sparkContext.statusTracker()
        tasks = []
        for job in sorted(tracker.getJobIdsForGroup(str(query.runId))):
            info = tracker.getJobInfo(job)
            for stage in (info.stageIds if info else []):
                stage_info = tracker.getStageInfo(stage)
                if stage_info:
                    tasks.append(stage_info.numTasks)
        return tasks

    def checksum(self, table: str, options: dict[str, str]) -> dict[str, Any]:
        """One untimed query adding up every micro-batch: rows, sum(id) and sum(id * id)
        (the ids as a multiset, nearly), and rows per `_change_type` when there is one."""
        total: dict[str, Any] = {"rows": 0, "sum_id": 0, "sum_id_squared": 0}
        types: dict[str, int] = {}

        def collect(batch: Any, _batch_id: int) -> None:
            row = batch.selectExpr(
                "count(*)", "coalesce(sum(id), 0)",
                "coalesce(sum(CAST(id AS DECIMAL(38, 0)) * id), 0)").collect()[0]
            total["rows"] += int(row[0])
            total["sum_id"] += int(row[1])
            total["sum_id_squared"] += int(row[2])
            if "_change_type" in batch.columns:
                for typed in batch.groupBy("_change_type").count().collect():
                    types[typed[0]] = types.get(typed[0], 0) + typed[1]

        checkpoint = tempfile.mkdtemp(prefix="ckpt-", dir=self.work)
        try:
            self._start(self._frame(table, options).writeStream.foreachBatch(collect),
                        checkpoint).awaitTermination()
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
        if types:
            total["change_types"] = types
        return total

    def answer(self, command: dict[str, Any]) -> dict[str, Any]:
        table, options = command["table"], command.get("options") or {}
        try:
            if command["op"] == "checksum":
                return self.checksum(table, options)
            return self.run(table, options)
        except Exception as error:  # a source that cannot read the table: the finding
            return {"error": f"{type(error).__name__}: {error_text(error)}"}


def _get(progress: Any, key: str) -> Any:
    """A field of a progress report: a dict on pyspark 3.5, an object (also a dict) on 4."""
    try:
        return progress[key]
    except (KeyError, TypeError):
        return getattr(progress, key, None)


def error_text(error: BaseException) -> str:
    """The first lines of a (Java or Python) streaming error, without the stack trace."""
    text = getattr(error, "desc", None) or str(error)
    lines = [line for line in str(text).splitlines() if line.strip()]
    return " | ".join(lines[:3])[:600]


def serve(streams: Streams) -> None:
    print(json.dumps({"ready": True, "startup_seconds": streams.startup_seconds}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("op") == "quit":
            return
        print(json.dumps(streams.answer(command)), flush=True)


def once(streams: Streams, args: argparse.Namespace) -> None:
    options = dict(item.partition("=")[::2] for item in args.option)
    command = {"op": "run", "table": args.table, "options": options}
    record: dict[str, Any] = {"engine": args.engine, "spark": streams.spark.version,
                              "options": options, "startup_seconds": streams.startup_seconds,
                              "warmup_seconds": [], "seconds": [], "rows": []}
    for index in range(args.warmups + args.repeats):
        result = streams.answer(command)
        if "error" in result:
            record["error"] = result["error"]
            break
        key = "warmup_seconds" if index < args.warmups else "seconds"
        record[key].append(result.pop("seconds"))
        record["rows"].append(result.pop("rows"))
        record.update(result)
    if args.checksum and "error" not in record:
        record["checksum"] = streams.answer({**command, "op": "checksum"})
    print(json.dumps(record), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", required=True, choices=["iceberg", "meltwater"])
    parser.add_argument("--jars")
    parser.add_argument("--trigger", default="availableNow", choices=["availableNow", "once"])
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--table", help="the table's location")
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--warmups", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--checksum", action="store_true")
    args = parser.parse_args()
    if not args.serve and not args.table:
        parser.error("--table or --serve is required")
    streams = Streams(args.engine, args.jars, args.trigger)
    try:
        serve(streams) if args.serve else once(streams, args)
    finally:
        streams.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
