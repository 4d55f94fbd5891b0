"""Following a table over time: the snapshot watcher and the change stream built on it.

- `fs_events` and `snapshot_events`: file-system events and the commits they reveal;
- `watcher`: `SnapshotWatcher`, which notices new snapshots (events locally, polling on
  object stores);
- `change_stream`: `ChangeStream`, a change feed that advances micro-batch by micro-batch
  (the Spark-free half of a streaming source; `meltwater.planner.micro_batch` decides what
  each micro-batch reads).
"""
