"""What the `meltwater` command writes: rows and changes as files or on stdout.

The read path (`meltwater.stream`, the planner) hands it Arrow batches and never imports it
(`tests/test_layers.py`); the CLI calls it.

- `writers`: a stream of batches in one of `FORMATS` (table, jsonl, csv, parquet);
- `text`: CSV and JSON lines rendered column by column with Arrow's kernels, and
  `json_values`: how one value is written as JSON, for every JSON writer;
- `parquet_parts` and `parquet_footer`: row groups encoded apart on worker threads and
  joined into one Parquet file (the footer through the vendored `parquet.thrift`);
- `pipeline`: writing on a thread of its own while the read goes on, bounded;
- `files`: an output file that is whole or absent, whatever fails;
- `change_events`: change rows as Debezium-style JSON events (the envelope the Kafka
  sink writes too, `meltwater.sinks.kafka_events`);
- `errors`: what cannot be written where or as asked.
"""
