"""Change planning: what each commit of a range added and removed, in Iceberg's vocabulary.

The top room of the kernel, above `scans`, whose tasks and delete index it reuses.

- `change_range`: a range's bounds as callers give them, resolved to commits;
- `change_tasks`: one commit's changes as tasks (added rows, deleted files, deleted rows);
- `table_state`: the live files of a snapshot, carried from commit to commit;
- `incremental`: the change tasks of every commit in a range, planned from each commit's
  own manifests and the carried state;
- `commit_units`: where one commit's tasks may be cut apart without parting a row's copies;
- `micro_batch`: what one micro-batch of a change stream reads (offsets, budgets, parts).
"""
