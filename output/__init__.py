"""What meltwater writes for people and tools: rows and changes as files or on stdout.

Who uses it:

- the `meltwater` command (`meltwater.cli`) writes the rows, changes and plans it reads
  through it: `snapshots`, `scan` and `changes` through `writers.write_stream`, `changes
  --format debezium-jsonl` through `change_events.write_debezium_jsonl`, `plan` into
  `files.output_destination`, its `--format` choices from `formats`; on SIGTERM it removes a
  file half written (`files.remove_unfinished`). (`watch` prints its event lines itself.)
- the Kafka sink (`meltwater.sinks.kafka_events`) borrows the Debezium change-event
  envelope (`change_events`: `debezium_op`, `envelope_tail`, `envelope_text`) and how
  values and rows are written as JSON (`json_values`, `text.json_objects`), so a message
  on its topic is the event `changes --format debezium-jsonl` writes for the same change.

The read path (`meltwater.stream`, the planner) hands it Arrow batches and never imports it
(`tests/test_layers.py`).

- `formats`: the formats the command writes (`OutputFormat`), importable without the writers;
- `writers`: a stream of batches in one of the row formats (table, jsonl, csv, parquet);
- `text`: CSV and JSON lines rendered column by column with Arrow's kernels, and
  `json_values`: how one value is written as JSON, for every JSON writer;
- `parquet_writer`, `parquet_parts` and `parquet_footer`: row groups encoded apart on
  worker threads and joined into one Parquet file (the footer through the vendored
  `parquet.thrift`, `meltwater.stream.engine.decode.parquet_thrift`), loaded only when
  Parquet is asked for;
- `pipeline`: writing on a thread of its own while the read goes on, bounded;
- `files`: an output file that is whole or absent, whatever fails;
- `change_events`: change rows as Debezium-style JSON events, one envelope built in one
  place for the CLI and the Kafka sink;
- `errors`: what cannot be written where or as asked.
"""
