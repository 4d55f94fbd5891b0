"""The Spark adapter: the only code in meltwater that imports pyspark or py4j, or reaches
into Spark's JVM (`tests/test_layers.py` checks it).

- `source`: the `format("meltwater")` Python data source and its registration;
- `options`: the data source's options, parsed and checked;
- `batch_reader` and `stream_reader`: batch reads and the readStream change feed;
- `partitions`: what one Spark task reads, as picklable data, for both readers;
- `arrow_types`: Spark's types for Arrow batches, one treatment for batch and stream;
- `filters`: Spark's pushed filters as meltwater expressions;
- `session`: a local SparkSession set up as the service runs one, the one spark-submit
  configured, and Spark's own logs turned down;
- `gateway`: Spark's JVM started in a session (process group) of its own;
- `query_start`: starting streaming queries of one session one at a time;
- `checkpoint`: a query's checkpoint as Spark wrote it, and a running query's batch logs;
- `change_counts`: a stream's change rows counted by type as Spark's observed metrics;
- `foreach_batch`: `foreachBatch` in Arrow, each micro-batch handed to a function (the
  sinks' `meltwater.sinks.spark_writer`);
- `spark_errors`: what pyspark's exceptions carry, and whether Spark refused a plan.
"""
