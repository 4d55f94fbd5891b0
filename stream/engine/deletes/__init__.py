"""Delete files, read once and kept: position masks, equality key sets and lookups.

Above `decode`.

- `delete_files`: position delete files, deletion vectors and equality keys read from one file;
- `cache`: `DeleteCache`, one LRU bounded in bytes, and its typed `Shelf`s, one per kind
  of entry;
- `loader`: `DeleteLoader`, which reads delete files once per process and keeps them on its
  shelves, and `DeletionMask`, a data file's deleted positions;
- `equality_keys`: key sets rows are matched against, null-safe and across promotions;
- `equality_lookup`: a table state's equality deletes as key -> newest sequence number;
- `key_columns`: a data file's key columns, read alone for matching by key.
"""
