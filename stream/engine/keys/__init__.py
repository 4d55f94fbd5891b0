"""Key indexes: key -> (data file, row position), kept on local disk across reads.

Above `decode`, below `deletes` (whose loader carries a table's indexes to the readers).

- `key_runs`: one data file's keys sorted with their positions, searched by binary search;
- `key_blocks`: a run cut into blocks of 512 rows, each with its first key and CRC-32, and
  which blocks a key can be in;
- `stored_runs`: a run as its segment file holds it, read and checked a few blocks at a
  time;
- `index_store`: runs in Arrow IPC segments (with their blocks files) named by a JSON
  catalog, written atomically, checked by sizes, CRC-32s and Arrow's own checks;
- `key_index`: `KeyIndex`, a table's index of one key field: lookups, additions, the
  bound in bytes;
- `index_location`: where a table's indexes live (`TableIndexes`), cheap to carry.
"""
