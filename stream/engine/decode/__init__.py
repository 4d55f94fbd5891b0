"""Decoding files into Arrow: formats, field-id projection, Arrow types, filters, reads.

The bottom room of the engine: it imports only the planner and `meltwater.stream.errors`.

- `formats`: Parquet, ORC and Avro files read batch by batch (`FileSource`, `open_source`);
- `parquet_layout`: the row groups a split or a set of positions needs, the leaves a
  selection names;
- `parquet_pages`: rows named by position read from the pages holding them (OffsetIndex);
- `page_file`: one column's chosen pages as a Parquet file in memory, decoded by pyarrow;
- `page_metadata`: what page reads decoded and checked of a file, kept per process;
- `parquet_thrift`: parquet.thrift's structs (footers, page indexes, page headers);
- `projection`: a file's columns matched to a read schema by field id;
- `arrow_schema`: Iceberg types as Arrow types, internal values as Arrow scalars;
- `arrow_filter`: bound row filters as `pyarrow.compute` expressions (residuals);
- `arrow_constants`: columns of one repeated value, built without visiting rows;
- `remote_reads`: many small reads at a time where files wait on the network;
- `batch_size`: the rows a batch holds at most (`DEFAULT_BATCH_SIZE`), and `limited`.
"""
