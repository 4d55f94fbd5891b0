"""The engine: Iceberg data and delete files in, Arrow record batches of rows or changes out.

Spark-free and watcher-free; one step per module:

- `formats`: decoding Parquet, ORC and Avro data files into Arrow batches;
- `projection`: matching a file's columns to the read schema by field id;
- `deletes`: position deletes, deletion vectors and equality deletes, applied as masks;
- `reader`: one scan task through those steps (`read_task`), or one file under several
  delete sets at once for change reconstruction (`read_with_delete_sets`);
- `reconstruction` and `updates`: change rows of a commit (carry-over removal, update pairs);
  `held_changes`: the same when a commit is split over micro-batches;
- `scan`, `bulk_scan`, `change_feed`: the Python API's table scans and change feeds.

It only reads: the files the CLI writes are `meltwater.output`'s.
"""
