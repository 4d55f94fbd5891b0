"""`meltwater snapshots`, `scan` and `plan`: reading a table without Spark."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

import pyarrow as pa

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.expressions import TRUE
from meltwater.planner.metadata import load_table
from meltwater.planner.table_source import TableSource, parse_table_source


class UsageError(MeltwaterError):
    """A command-line value is malformed."""


def parse_timestamp_ms(text: str, option: str = "--as-of") -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC unless it names a zone);
    `option` names the command-line option in the error."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected milliseconds or an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def _columns(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise UsageError("--columns: give at least one column name")
    return names


TABLE_HELP = ("the table: catalog.namespace.table (a catalog pyiceberg's configuration "
              "defines, ~/.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__<KEY>), or a location: "
              "a directory holding metadata/ (local, s3://, gs://, ...) or a metadata file")


def add_table_argument(parser: argparse.ArgumentParser) -> None:
    """TABLE and --catalog, the same for every command that reads a table."""
    parser.add_argument("table", metavar="TABLE", help=TABLE_HELP)
    parser.add_argument("--catalog", metavar="NAME",
                        help="the catalog TABLE is in; then TABLE is namespace.table")


def table_source_of(args: argparse.Namespace) -> TableSource:
    """The table the command line names (see `meltwater.planner.table_source`)."""
    return parse_table_source(args.table, catalog=args.catalog)


def add_table_selection(parser: argparse.ArgumentParser) -> None:
    """Add the table argument and the options choosing its snapshot (and filter and columns) to a
    command."""
    add_table_argument(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--snapshot", type=int, metavar="ID", help="read this snapshot")
    which.add_argument("--as-of", metavar="TIMESTAMP",
                       help="read the snapshot current at this time (ms or ISO-8601)")
    which.add_argument("--ref", metavar="NAME", help="read the head of this branch or tag")
    parser.add_argument("--filter", metavar="EXPR", default=None,
                        help="row filter, e.g. \"id > 10 and name is not null\"")
    parser.add_argument("--columns", metavar="A,B", help="columns to return")


def _plan_args(args: argparse.Namespace) -> dict[str, Any]:
    return dict(snapshot_id=args.snapshot, ref=args.ref,
                as_of_ms=parse_timestamp_ms(args.as_of) if args.as_of else None,
                filter=args.filter if args.filter else TRUE, columns=_columns(args.columns))


def cmd_snapshots(args: argparse.Namespace) -> int:
    """`meltwater snapshots`: list a table's snapshots, with the refs that point at each."""
    from meltwater.stream.engine.output import write_stream

    table = load_table(table_source_of(args))
    metadata = table.metadata
    refs: dict[int, list[str]] = {}
    for ref in metadata.refs.values():
        refs.setdefault(ref.snapshot_id, []).append(ref.name)
    rows = []
    for snapshot in sorted(metadata.snapshots.values(),
                           key=lambda s: (s.sequence_number, s.timestamp_ms)):
        summary = snapshot.summary
        rows.append({
            "snapshot_id": snapshot.snapshot_id,
            "parent_id": snapshot.parent_id,
            "sequence_number": snapshot.sequence_number,
            "operation": snapshot.operation,
            "committed_at": dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000,
                                                      dt.timezone.utc).isoformat(),
            "added_records": _int(summary.get("added-records")),
            "deleted_records": _int(summary.get("deleted-records")),
            "added_data_files": _int(summary.get("added-data-files")),
            "added_delete_files": _int(summary.get("added-delete-files")),
            "total_records": _int(summary.get("total-records")),
            "refs": ",".join(sorted(refs.get(snapshot.snapshot_id, []))) or None,
        })
    schema = pa.schema([("snapshot_id", pa.int64()), ("parent_id", pa.int64()),
                        ("sequence_number", pa.int64()), ("operation", pa.string()),
                        ("committed_at", pa.string()), ("added_records", pa.int64()),
                        ("deleted_records", pa.int64()), ("added_data_files", pa.int64()),
                        ("added_delete_files", pa.int64()), ("total_records", pa.int64()),
                        ("refs", pa.string())])
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    write_stream(pa.RecordBatchReader.from_batches(schema, [batch]), args.format, args.output)
    return 0


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def cmd_scan(args: argparse.Namespace) -> int:
    """`meltwater scan`: write a table's rows at a snapshot, deletes applied."""
    from meltwater.stream.engine.output import write_stream
    from meltwater.stream.engine.scan import scan

    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be zero or more")
    reader = scan(load_table(table_source_of(args)), limit=args.limit, **_plan_args(args))
    count = write_stream(reader, args.format, args.output)
    if args.output:
        print(f"wrote {count} rows to {args.output}", file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """`meltwater plan`: show how a scan is planned (pruning counts and task groups) without
    reading data."""
    from meltwater.stream.engine.scan import plan

    planned = plan(load_table(table_source_of(args)), **_plan_args(args))
    scan = planned.scan
    snapshot = scan.snapshot
    report: dict[str, Any] = {
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "schema_id": scan.schema.schema_id,
        "filter": str(scan.bound_filter),
        "stats": planned.stats.as_dict(),
        "groups": [
            [{"file": t.data_file.file_path, "format": t.data_file.file_format,
              "records": t.data_file.record_count, "start": t.start, "length": t.length,
              "deletes": [{"file": d.file.file_path, "content": int(d.file.content),
                           "dv": d.file.is_deletion_vector, "sequence_number": d.sequence_number}
                          for d in t.deletes],
              "residual": str(t.residual)} for t in group.tasks]
            for group in planned.groups],
    }
    if args.format == "json":
        print(json.dumps(report, indent=2))
        return 0
    stats = report["stats"]
    print(f"snapshot {report['snapshot_id']} (schema {report['schema_id']}), "
          f"filter: {report['filter']}")
    print(f"manifests: {stats['data_manifests']} data + {stats['delete_manifests']} delete; "
          f"read {stats['manifests_read']}, skipped {stats['manifests_skipped_by_partition']} "
          f"by partition summaries and {stats['manifests_skipped_by_counts']} by file counts")
    print(f"data files: {stats['data_files_considered']} considered, "
          f"{stats['data_files_skipped_by_partition']} skipped by partition, "
          f"{stats['data_files_skipped_by_metrics']} by metrics")
    print(f"delete files: {stats['delete_files_considered']} considered, "
          f"{stats['delete_files_skipped_by_partition']} skipped by partition, "
          f"{stats['delete_files_skipped_by_metrics']} by metrics, "
          f"{stats['delete_files_matched']} matched to data files")
    print(f"tasks: {stats['tasks']} in {len(planned.groups)} groups")
    for i, group in enumerate(report["groups"]):
        print(f"group {i}:")
        for task in group:
            span = "" if task["length"] is None else f" [{task['start']}+{task['length']}]"
            print(f"  {task['file']}{span} ({task['records']} records, "
                  f"{len(task['deletes'])} deletes, residual {task['residual']})")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `snapshots`, `scan` and `plan` commands to the CLI."""
    snapshots = commands.add_parser("snapshots", help="list a table's snapshots")
    add_table_argument(snapshots)
    snapshots.add_argument("--format", choices=("table", "jsonl", "csv"), default="table")
    snapshots.add_argument("--output", metavar="PATH")
    snapshots.set_defaults(handler=cmd_snapshots)

    scan = commands.add_parser("scan", help="read a table at a snapshot, deletes applied")
    add_table_selection(scan)
    scan.add_argument("--format", choices=("table", "jsonl", "csv", "parquet"),
                      default="table")
    scan.add_argument("--output", metavar="PATH", help="write here instead of stdout")
    scan.add_argument("--limit", type=int, metavar="N", help="return at most N rows")
    scan.set_defaults(handler=cmd_scan)

    plan = commands.add_parser("plan", help="show the scan tasks and what pruning did")
    add_table_selection(plan)
    plan.add_argument("--format", choices=("table", "json"), default="table")
    plan.set_defaults(handler=cmd_plan)
