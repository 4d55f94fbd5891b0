"""Following a table over time: the snapshot watcher and the change stream built on it.

- `fs_events` and `snapshot_events`: file-system events and the commits they reveal;
- `watcher`: `SnapshotWatcher`, which notices new snapshots, and `watch_modes`, the ways it
  notices them (file events locally, polling on object stores, a catalog's answers) as
  strategy objects;
- `change_stream`: `ChangeStream`, a change feed that advances micro-batch by micro-batch
  (the Spark-free half of a streaming source), coordinating one module per concern:
  `stream_offsets` (`StreamOffset`, a stream's position as Spark's checkpoints store it,
  and what it means), `watched_table` (the table at its newest metadata, and its watcher),
  `stream_lineage` (the snapshots from an offset to a target), `plan_cache` (commits
  planned once per micro-batch in flight), `admission` (how far a budget lets a
  micro-batch go), `offset_parts` (the commit parts between two offsets) and
  `stream_schema` (the schema fixed at the start, and schema changes). What a
  micro-batch's tasks cost and how its parts are packed is the planner's
  (`meltwater.planner.changes.micro_batch`), without I/O.
"""
