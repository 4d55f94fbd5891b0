"""What the `meltwater` command writes: rows and changes as files or on stdout.

Two users: the CLI (`meltwater.cli`) writes every `--format` through it, and the Kafka sink
(`meltwater.sinks.kafka_events`) borrows its Debezium envelope (`change_events`) and its
JSON rendering (`text.json_objects`, `json_values`), so a topic's events and a
`debezium-jsonl` file are the same text. The read path (`meltwater.stream`, the planner)
hands it Arrow batches and never imports it (`tests/test_layers.py`).

- `formats`: the formats the command writes (`OutputFormat`), importable without the writers;
- `writers`: a stream of batches in one of the row formats (table, jsonl, csv, parquet);
- `text`: CSV and JSON lines rendered column by column with Arrow's kernels, and
  `json_values`: how one value is written as JSON, for every JSON writer;
- `parquet_parts` and `parquet_footer`: row groups encoded apart on worker threads and
  joined into one Parquet file (the footer through the vendored `parquet.thrift`);
- `pipeline`: writing on a thread of its own while the read goes on, bounded;
- `files`: an output file that is whole or absent, whatever fails;
- `change_events`: change rows as Debezium-style JSON events (`debezium-jsonl`);
- `errors`: what cannot be written where or as asked.
"""
