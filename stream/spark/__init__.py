"""The Spark adapter: the only code in meltwater that imports pyspark.

- `source`: the `format("meltwater")` Python data source and its registration;
- `options`: the data source's options, parsed and checked;
- `batch_reader` and `stream_reader`: batch reads and the readStream change feed;
- `partitions`: what one Spark task reads, as picklable data, for both readers;
- `arrow_types`: Spark's types for Arrow batches, one treatment for batch and stream;
- `filters`: Spark's pushed filters as meltwater expressions;
- `session`: a local SparkSession set up as the service runs one;
- `query_start`: starting streaming queries of one session one at a time.
"""
