"""The engine: Iceberg data and delete files in, Arrow record batches of rows or changes out.

Spark-free and watcher-free. Five rooms, each importing only the rooms below it
(`tests/test_layers.py` checks the order), from the bottom:

- `decode/`: data files decoded into Arrow and matched to the read schema by field id;
- `keys/`: key indexes, key -> (data file, position), kept on local disk across reads;
- `deletes/`: delete files read once and kept, as position masks and equality lookups;
- `scans/`: scan tasks read through projection, deletes and residual filters;
- `changes/`: change tasks read into change rows (INSERT, DELETE, UPDATE_BEFORE/AFTER).

At its root, `local_cache` (where meltwater keeps what it builds on this machine) serves
every room. It only reads: the files the CLI writes are `meltwater.output`'s.
"""
