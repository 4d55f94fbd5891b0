"""Snapshot scans: the files of one snapshot, their deletes, and task groups to read them.

Above `table`.

- `tasks`: picklable scan tasks (`FileScanTask`, `ScanTaskGroup`) and delete file refs;
- `delete_index`: which delete files apply to which data file, as the spec says;
- `manifest_group`: a snapshot's manifests in, pruned live entries and scan tasks out;
- `plan_stats`: what planning read and what pruning saved (`meltwater plan`'s counters);
- `splitting`: big files split at row groups, small ones packed into even groups;
- `scan`: `TableScan`, a user's choices (snapshot, columns, filter) resolved and planned.
"""
