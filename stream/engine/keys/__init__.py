"""Key indexes: key -> (data file, row position), kept on local disk across reads.

Above `decode`, below `deletes` (whose loader carries a table's indexes to the readers).

- `key_runs`: one data file's keys sorted with their positions, searched by binary search;
- `index_store`: runs in Arrow IPC segments named by a JSON catalog, written atomically,
  checked by size and CRC-32;
- `key_index`: `KeyIndex`, a table's index of one key field: lookups, additions, the
  bound in bytes;
- `index_location`: where a table's indexes live (`TableIndexes`), cheap to carry.
"""
