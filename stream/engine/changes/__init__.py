"""Change rows: what each commit inserted, deleted and updated, as Arrow batches.

The top room of the engine, above `scans`.

- `change_schema`: change row columns, change type vocabularies, a read's row options;
- `change_modes`: the modes those options take (`EqualityDeletes`, `BeforeImages`, ...);
- `reconstruction`: a commit's change tasks read into change rows;
- `delete_payloads`: change rows read from position delete files' `row` payloads;
- `equality_changes`: the rows a commit's equality deletes change, found by key;
- `key_images`: departing rows carried by their key columns only (`before-images=key`);
- `updates`: carry-over removal, update pairing and net changes;
- `held_changes`: one part of a commit split across micro-batches, read as the whole;
- `change_feed`: the Python API's change feeds over a range of commits.
"""
