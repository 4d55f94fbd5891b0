"""Change rows: what each commit inserted, deleted and updated, as Arrow batches.

The top room of the engine, above `scans`.

- `change_schema`: change row columns, change type vocabularies, a read's row options;
- `change_modes`: the modes those options take (`EqualityDeletes`, `BeforeImages`, ...);
- `reconstruction`: the entry points: a commit's, a range's, a net range's change rows;
- `commit_reader`: one commit's pipeline: its tasks' rows, filtered, compared, finished;
- `task_rows`: what each change task changed, read from the files it names;
- `change_columns`: the change metadata columns, and how a commit's rows get them;
- `delete_payloads`: change rows read from position delete files' `row` payloads;
- `equality_changes`: the rows a commit's equality deletes change, found by key;
- `indexed_keys`: those rows found through the table's key index, where it serves;
- `equality_liveness`: the lookups deciding those rows' liveness, by the read's scope;
- `changed_keys`: the changed deletes' key sets, and rows matched to them;
- `key_shares`: one share of a commit's changed keys, for reading it on several executors;
- `key_images`: departing rows carried by their key columns only (`before-images=key`);
- `updates`: carry-over removal, update pairing and net changes;
- `held_changes`: one part of a commit split across micro-batches, read as the whole;
- `change_feed`: the Python API's change feeds over a range of commits.
"""
