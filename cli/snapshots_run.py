"""`meltwater snapshots` as it runs: a table's snapshots, with their summaries' counts and
the refs pointing at each, as rows (its parser is in `table_commands`)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

import pyarrow as pa

from meltwater.cli.options import table_source_of
from meltwater.output.formats import OutputFormat
from meltwater.output.writers import write_stream
from meltwater.planner.table.table_loading import load_table

# A snapshot summary's counts, by the column names `snapshots` gives them. Iceberg Java
# leaves a count out of a summary when it is zero, so in a summary that records counts at
# all (any of these keys) a missing one is 0; a summary with none of them (a writer that
# records no counts) leaves them unknown, null.
SUMMARY_COUNTS = {
    "added_records": "added-records",
    "deleted_records": "deleted-records",
    "added_data_files": "added-data-files",
    "deleted_data_files": "deleted-data-files",
    "added_delete_files": "added-delete-files",
    "removed_delete_files": "removed-delete-files",
    "added_position_deletes": "added-position-deletes",
    "added_equality_deletes": "added-equality-deletes",
    "total_records": "total-records",
    "total_data_files": "total-data-files",
    "total_delete_files": "total-delete-files",
}
# What Iceberg Java writes in every summary of a commit that changed files (the totals,
# and the counts of what it added and removed): the mark of a summary that counts.
_COUNTING_KEYS = {*SUMMARY_COUNTS.values(), "added-files-size", "removed-files-size",
                  "total-files-size", "total-position-deletes", "total-equality-deletes"}


def summary_counts(summary: dict[str, str]) -> dict[str, int | None]:
    """A snapshot summary's counts by `SUMMARY_COUNTS` name: 0 where Iceberg left a zero out,
    None where the summary records no counts (or the value is not a number)."""
    counting = not _COUNTING_KEYS.isdisjoint(summary)
    counts: dict[str, int | None] = {}
    for name, key in SUMMARY_COUNTS.items():
        value = summary.get(key)
        if value is None:
            counts[name] = 0 if counting else None
        else:
            counts[name] = int(value) if value.lstrip("-").isdigit() else None
    return counts


def _snapshot_rows(metadata: Any) -> list[dict[str, Any]]:
    refs: dict[int, list[str]] = {}
    for ref in metadata.refs.values():
        refs.setdefault(ref.snapshot_id, []).append(ref.name)
    rows = []
    for snapshot in sorted(metadata.snapshots.values(),
                           key=lambda s: (s.sequence_number, s.timestamp_ms)):
        rows.append({
            "snapshot_id": snapshot.snapshot_id,
            "parent_id": snapshot.parent_id,
            "sequence_number": snapshot.sequence_number,
            "operation": snapshot.operation,
            "committed_at": dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000,
                                                      dt.timezone.utc).isoformat(),
            **summary_counts(snapshot.summary),
            "refs": ",".join(sorted(refs.get(snapshot.snapshot_id, []))) or None,
        })
    return rows


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _short_time(iso: str) -> str:
    """`2026-11-01T10:00:00.120000+00:00` as `2026-11-01T10:00:00.120Z`."""
    moment = dt.datetime.fromisoformat(iso)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


def _compact(row: dict[str, Any]) -> dict[str, Any]:
    """A `snapshots` row as the table format shows it: counts paired as +added/-removed."""
    return {
        "snapshot_id": row["snapshot_id"], "parent_id": row["parent_id"],
        "seq": row["sequence_number"], "operation": row["operation"],
        "committed_at": _short_time(row["committed_at"]),
        "records": f"+{_n(row['added_records'])}/-{_n(row['deleted_records'])}",
        "data_files": f"+{_n(row['added_data_files'])}/-{_n(row['deleted_data_files'])}",
        "delete_files": f"+{_n(row['added_delete_files'])}/-{_n(row['removed_delete_files'])}",
        "added_deletes": (f"{_n(row['added_position_deletes'])} pos, "
                          f"{_n(row['added_equality_deletes'])} eq"),
        "total_records": _n(row["total_records"]),
        "refs": row["refs"] or "",
    }


def cmd_snapshots(args: argparse.Namespace) -> int:
    """`meltwater snapshots`: list a table's snapshots, with the refs that point at each."""
    rows = _snapshot_rows(load_table(table_source_of(args)).metadata)
    if args.format == OutputFormat.TABLE:
        rows, schema = [_compact(row) for row in rows], _COMPACT_SCHEMA
    else:
        schema = _SNAPSHOT_SCHEMA
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    write_stream(pa.RecordBatchReader.from_batches(schema, [batch]), args.format, args.output)
    return 0


_SNAPSHOT_SCHEMA = pa.schema([
    ("snapshot_id", pa.int64()), ("parent_id", pa.int64()), ("sequence_number", pa.int64()),
    ("operation", pa.string()), ("committed_at", pa.string()),
    *((name, pa.int64()) for name in SUMMARY_COUNTS), ("refs", pa.string())])
_COMPACT_SCHEMA = pa.schema([
    ("snapshot_id", pa.int64()), ("parent_id", pa.int64()), ("seq", pa.int64()),
    *((name, pa.string()) for name in ("operation", "committed_at", "records", "data_files",
                                       "delete_files", "added_deletes", "total_records",
                                       "refs"))])
