"""A table as metadata: where it is, how to reach its files, and what its metadata says.

Above `spec` and `expressions`; plans nothing.

- `table_source`: where a table is (a location, or a catalog identifier) and its properties;
- `catalogs`: pyiceberg's catalog clients asked for a table's metadata location;
- `fileio`, `gcs_azure`: file access on `pyarrow.fs`, per scheme (`FileIO`);
- `deadlines`: calls that could wait without end, bounded;
- `table_loading`: finding and reading a table's current metadata (`Table`, `load_table`);
- `metadata`: the model of `*.metadata.json` (v1-v3): snapshots, refs, schemas, specs;
- `lineage`: walking a snapshot's parents back to a start;
- `avro_files`, `manifests`: manifest lists and manifests, read with fastavro, with the
  spec's sequence number inheritance.
"""
