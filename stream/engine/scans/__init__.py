"""Reading planned scans: one task at a time, or many Parquet tasks as one dataset.

Above `deletes`.

- `reader`: one scan task -> Arrow batches (projection, deletes, residual), and one file
  under several delete sets for change reads (`read_with_delete_sets`);
- `bulk_scan`: the full-scan fast path, many Parquet tasks through one Arrow dataset scan;
- `bulk_groups`: which Parquet tasks one such scan reads together, from their footers;
- `scan`: the Python API's table scans (`scan`, `plan`, `read_plan`), tasks read on
  worker threads into one bounded stream.
"""
