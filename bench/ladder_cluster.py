"""One upsert commit of the backlog table read by `format("meltwater")` on a Spark cluster
(issue 25): one task against one task per executor, both checked against the CLI.

    .venv/bin/python bench/ladder_cluster.py [--rows 2000000] [--commit 200] [--repeats 3]

An equality delete's work (match its keys in the older files' key columns, fetch the rows
that match) is split by shares of the commit's keys (`CommitPart.key_shares`), so one
commit's change read can run on several executors. This runs it on
`local-cluster[2,1,1024]` (two executor processes of one core each; the driver is this
process) as a batch change read of commit `--commit` alone, written to Spark's `noop` sink.
Each executor decodes with one thread (`MELTWATER_DECODING_THREADS=1`), as a one-core
executor should: by default a task decodes files on every core of its machine, so on this
2-core machine one task alone already keeps both cores busy and a second executor on the
same cores could add nothing.

- `one task`: option `split-size` larger than the commit, so one executor reads it all;
- `two shares`: the default split (the commit spread over the cluster's cores).

Each is run once untimed, then `--repeats` times alternating; figures are medians of
wall time around `write.format("noop").save()`, with the session already up. Then one more
read of each with a column holding the Python worker's process id, written as Parquet: the
report says which processes read (both executors, never the driver), and the rows must
equal, as a multiset over every column, the CLI's own `meltwater changes` of the same
commit (also timed, a whole process). Exit 1 when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from ladder_processes import run_process
from ladder_tables import Shape, ensure_ladder_table

MELTWATER = Path(sys.executable).parent / "meltwater"
MASTER = "local-cluster[2,1,1024]"
ONE_TASK = str(1 << 40)  # split-size: more bytes than any commit here


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--commit", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench/results/ladder_cluster.json")
    return parser.parse_args(argv)


def session() -> Any:
    """A local-cluster session (executors are separate JVMs with their own Python workers)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(MASTER).appName("meltwater-ladder-cluster")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.executor.memory", "768m")
             .config("spark.executorEnv.MELTWATER_DECODING_THREADS", "1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import meltwater.stream

    meltwater.stream.register(spark)
    return spark


def multiset(table: pa.Table) -> pa.Table:
    """Rows with their counts, so two tables compare as multisets. Timestamps as UTC
    microseconds: Spark writes them as zone-less nanoseconds (its session is UTC)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            values = table.column(i)
            if field.type.tz is None:
                values = values.cast(pa.timestamp(field.type.unit, "UTC"))
            table = table.set_column(i, pa.field(field.name, pa.timestamp("us", "UTC")),
                                     values.cast(pa.timestamp("us", "UTC")))
    columns = sorted(table.column_names)
    return (table.select(columns).group_by(columns, use_threads=False)
            .aggregate([([], "count_all")]).sort_by([(c, "ascending") for c in columns]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    table = ensure_ladder_table(Shape("backlog", args.rows, 200, 1000),
                                lambda m: print(m, flush=True))
    parent = table.snapshot(args.commit - 1)["snapshot_id"]
    snapshot = table.snapshot(args.commit)["snapshot_id"]
    work = Path(tempfile.mkdtemp(prefix="meltwater-ladder-cluster-"))
    reference = work / "cli.parquet"
    cli = run_process([str(MELTWATER), "changes", table.location, "--from-snapshot",
                       str(parent), "--to-snapshot", str(snapshot), "--format", "parquet",
                       "--output", str(reference)], timeout=600)
    if cli.exit_code != 0:
        print(f"the CLI failed: {cli.stderr_tail}", file=sys.stderr)
        return 1

    spark = session()
    options = {"start-snapshot-id": str(parent), "end-snapshot-id": str(snapshot)}
    variants = {"one task": {**options, "split-size": ONE_TASK}, "two shares": options}

    def frame(variant: str) -> Any:
        reader = spark.read.format("meltwater")
        for key, value in variants[variant].items():
            reader = reader.option(key, value)
        return reader.load(table.location)

    def timed(variant: str) -> float:
        started = time.perf_counter()
        frame(variant).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for name in variants:
        timed(name)  # warm-up: executors' Python workers, their delete loaders
    for round_ in range(args.repeats):
        for name in (list(variants) if round_ % 2 == 0 else list(reversed(variants))):
            seconds[name].append(timed(name))

    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    pid = F.udf(lambda _: os.getpid(), IntegerType())
    expected = multiset(pq.read_table(reference))
    report: dict[str, Any] = {"table": table.location, "commit": args.commit,
                              "master": MASTER, "cli_seconds": cli.seconds,
                              "cli_rows": pq.read_metadata(reference).num_rows, "variants": {}}
    same = True
    for name in variants:
        out = work / name.replace(" ", "-")
        read = frame(name)
        partitions = read.rdd.getNumPartitions()
        read.withColumn("_pid", pid(F.col("_change_type"))).write.parquet(str(out))
        got = pq.read_table(out)
        readers = sorted(set(got["_pid"].to_pylist()))
        equal = multiset(got.drop_columns(["_pid"])).equals(expected)
        same = same and equal
        report["variants"][name] = {
            "seconds": statistics.median(seconds[name]), "runs": seconds[name],
            "partitions": partitions, "reader_pids": readers,
            "driver_read": os.getpid() in readers, "rows": got.num_rows,
            "equals_cli": equal}
    spark.stop()
    one, two = (report["variants"][n]["seconds"] for n in variants)
    report["two_shares_over_one_task"] = two / one
    for name, entry in report["variants"].items():
        print(f"{name:>10}: {entry['seconds']:.2f} s (median of {args.repeats}), "
              f"{entry['partitions']} partitions read by {len(entry['reader_pids'])} "
              f"executor process(es){' and the driver' if entry['driver_read'] else ''}, "
              f"{entry['rows']:,} rows, equal to the CLI's: {entry['equals_cli']}")
    print(f"two shares / one task: {report['two_shares_over_one_task']:.2f}x; the CLI "
          f"(whole process) {cli.seconds:.2f} s, {report['cli_rows']:,} rows")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    if not same:
        print("MISMATCH: the cluster's rows differ from the CLI's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
