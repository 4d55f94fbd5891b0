"""`meltwater snapshots`, `scan` and `plan`: reading a table without Spark."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from meltwater.output.formats import LISTING_FORMATS, ROW_FORMATS, OutputFormat, choices
from meltwater.planner.errors import MeltwaterError, NoSuchSnapshotError
from meltwater.planner.expressions.tree import TRUE
from meltwater.planner.str_enum import StrEnum
from meltwater.planner.table.table_loading import load_table
from meltwater.planner.table.table_source import TableSource, parse_table_source


class PlanFormat(StrEnum):
    """What `meltwater plan` writes (`--format`)."""

    TABLE = "table"  # the tasks and the pruning counts, for people
    JSON = "json"  # one JSON document: groups of tasks and the counts


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


TIME_HELP = ("milliseconds since the epoch, or an ISO-8601 time such as 2026-11-01T10:00:00Z "
             "(UTC unless it names a zone)")
OUTPUT_HELP = ("write to this file instead of stdout; it is written beside PATH and renamed "
               "into place once complete, so an error leaves an existing file as it was")

TEXT_VALUES_HELP = ("jsonl and csv write bytes (binary, fixed, uuid) in base64, and csv "
                    "writes struct, list and map values as JSON text")

TABLE_HELP = ("the table: catalog.namespace.table (a catalog pyiceberg's configuration "
              "defines, ~/.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__<KEY>), or a location: "
              "a directory holding metadata/ (local, s3://, gs://, ...) or a metadata file")


def output_path(text: str) -> str:
    """An `--output` value: a path, never empty (an empty one, `--output "$UNSET"`, was
    taken for no --output and the rows went to stdout)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty value")
    return text


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """`--output PATH`, the same for every command that writes rows."""
    parser.add_argument("--output", metavar="PATH", type=output_path, help=OUTPUT_HELP)


def add_table_argument(parser: argparse.ArgumentParser) -> None:
    """TABLE and --catalog, the same for every command that reads a table."""
    parser.add_argument("table", metavar="TABLE", help=TABLE_HELP)
    parser.add_argument("--catalog", metavar="NAME",
                        help="the catalog TABLE is in; then TABLE is namespace.table")


def table_source_of(args: argparse.Namespace) -> TableSource:
    """The table the command line names (see `meltwater.planner.table.table_source`)."""
    return parse_table_source(args.table, catalog=args.catalog)


def add_table_selection(parser: argparse.ArgumentParser) -> None:
    """Add the table argument and the options choosing its snapshot (and filter and columns) to a
    command."""
    add_table_argument(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--snapshot", type=int, metavar="ID", help="read this snapshot")
    which.add_argument("--as-of", metavar="TIME",
                       help=f"read the snapshot current at this time: {TIME_HELP}")
    which.add_argument("--ref", metavar="NAME", help="read the head of this branch or tag")
    parser.add_argument("--filter", metavar="EXPR", default=None,
                        help="row filter, e.g. \"id > 10 and name is not null\"")
    parser.add_argument("--columns", metavar="A,B", help="columns to return, comma-separated")


def _plan_args(args: argparse.Namespace) -> dict[str, Any]:
    return dict(snapshot_id=args.snapshot, ref=args.ref,
                as_of_ms=parse_timestamp_ms(args.as_of) if args.as_of is not None else None,
                filter=args.filter if args.filter else TRUE, columns=_columns(args.columns))


def _snapshot_option(args: argparse.Namespace) -> str | None:
    """The option choosing the snapshot, as the user wrote it (`--as-of 2026-11-01T00:00:00Z`),
    or None for the current snapshot."""
    if args.snapshot is not None:
        return f"--snapshot {args.snapshot}"
    if args.as_of is not None:
        return f"--as-of {args.as_of}"
    if args.ref is not None:
        return f"--ref {args.ref!r}"
    return None


def _planned(args: argparse.Namespace) -> Any:
    """The scan the command line asks for, planned; a snapshot it names that is not there
    is refused naming the option as given (the planner speaks of ids and milliseconds)."""
    from meltwater.stream.engine.scans.scan import plan

    table = load_table(table_source_of(args))
    try:
        return plan(table, **_plan_args(args))
    except NoSuchSnapshotError as error:
        option = _snapshot_option(args)
        if option is None:
            raise
        raise NoSuchSnapshotError(f"{option}: {error}") from error


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
    from meltwater.output.writers import write_stream

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


def cmd_scan(args: argparse.Namespace) -> int:
    """`meltwater scan`: write a table's rows at a snapshot, deletes applied."""
    from meltwater.cli.progress import Progress, wanted
    from meltwater.output.writers import write_stream
    from meltwater.stream.engine.scans.scan import read_plan

    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be zero or more")
    planned = _planned(args)
    files = len({t.data_file.file_path for t in planned.tasks})
    with Progress("scan", args.table, enabled=wanted(args.output),
                  details=lambda: [_plural(files, "file")]) as progress:
        reader = progress.count(read_plan(planned, limit=args.limit))
        count = write_stream(reader, args.format, args.output)
    if args.output:
        print(f"wrote {_plural(count, 'row')} to {args.output}", file=sys.stderr)
    return 0


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def cmd_plan(args: argparse.Namespace) -> int:
    """`meltwater plan`: show how a scan is planned (pruning counts and task groups) without
    reading data."""
    from meltwater.output.files import output_destination

    planned = _planned(args)
    scan = planned.scan
    snapshot = scan.snapshot
    report: dict[str, Any] = {
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "schema_id": scan.schema.schema_id,
        "filter": str(scan.bound_filter),
        "stats": planned.stats.as_dict(),
    }
    tasks = planned.tasks
    report["summary"] = {
        "groups": len(planned.groups), "tasks": len(tasks),
        "data_files": len({t.data_file.file_path for t in tasks}),
        "delete_files": len({d.file.file_path for t in tasks
                             for d in t.deletes + t.equality_deletes}),
        "records": sum({t.data_file.file_path: t.data_file.record_count
                        for t in tasks}.values()),
        "bytes": sum(t.length if t.length is not None else t.data_file.file_size_in_bytes
                     for t in tasks),
    }
    if not args.summary:
        report["groups"] = [
            [{"file": t.data_file.file_path, "format": t.data_file.file_format,
              "records": t.data_file.record_count, "start": t.start, "length": t.length,
              "deletes": [{"file": d.file.file_path, "content": int(d.file.content),
                           "dv": d.file.is_deletion_vector,
                           "sequence_number": d.sequence_number}
                          for d in t.deletes + t.equality_deletes],
              "residual": str(t.residual)} for t in group.tasks]
            for group in planned.groups]
    with output_destination(None, text=True) as out:
        if args.format == PlanFormat.JSON:
            out.write(json.dumps(report, indent=2) + "\n")
        else:
            out.writelines(line + "\n" for line in _plan_lines(report))
    return 0


def _plan_lines(report: dict[str, Any]) -> Iterator[str]:
    stats, summary = report["stats"], report["summary"]
    yield (f"snapshot {report['snapshot_id']} (schema {report['schema_id']}), "
           f"filter: {report['filter']}")
    yield (f"manifests: {stats['data_manifests']} data + {stats['delete_manifests']} delete; "
           f"read {stats['manifests_read']}, skipped {stats['manifests_skipped_by_partition']} "
           f"by partition summaries and {stats['manifests_skipped_by_counts']} by file counts")
    yield (f"data files: {stats['data_files_considered']} considered, "
           f"{stats['data_files_skipped_by_partition']} skipped by partition, "
           f"{stats['data_files_skipped_by_metrics']} by metrics")
    yield (f"delete files: {stats['delete_files_considered']} considered, "
           f"{stats['delete_files_skipped_by_partition']} skipped by partition, "
           f"{stats['delete_files_skipped_by_metrics']} by metrics, "
           f"{stats['delete_files_matched']} matched to data files")
    yield (f"to read: {_plural(summary['data_files'], 'data file')} "
           f"({_plural(summary['records'], 'record')}, {_plural(summary['bytes'], 'byte')}) "
           f"with {_plural(summary['delete_files'], 'delete file')}, as "
           f"{_plural(summary['tasks'], 'task')} in {_plural(summary['groups'], 'group')}")
    for i, group in enumerate(report.get("groups", [])):
        yield f"group {i}:"
        for task in group:
            span = "" if task["length"] is None else f" [{task['start']}+{task['length']}]"
            yield (f"  {task['file']}{span} ({_plural(task['records'], 'record')}, "
                   f"{_plural(len(task['deletes']), 'delete file')}, "
                   f"residual {task['residual']})")


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `snapshots`, `scan` and `plan` commands to the CLI."""
    snapshots = commands.add_parser(
        "snapshots", help="list a table's snapshots",
        description="List a table's snapshots, oldest first, with the counts of their "
                    "summaries and the branches and tags that point at each. Iceberg leaves "
                    "zero counts out of a summary: they show as 0 (unknown counts as ? or "
                    "null).")
    add_table_argument(snapshots)
    snapshots.add_argument("--format", choices=choices(LISTING_FORMATS), default="table",
                           help="table (default: counts paired as +added/-removed, for "
                                "people), or jsonl or csv (a column per count)")
    add_output_argument(snapshots)
    snapshots.set_defaults(handler=cmd_snapshots, one_shot=True)

    scan = commands.add_parser("scan", help="read a table at a snapshot, deletes applied")
    add_table_selection(scan)
    scan.add_argument("--format", choices=choices(ROW_FORMATS),
                      default="table",
                      help=f"table (default, for people), jsonl, csv, or parquet (needs "
                           f"--output); {TEXT_VALUES_HELP}")
    add_output_argument(scan)
    scan.add_argument("--limit", type=int, metavar="N", help="return at most N rows")
    scan.set_defaults(handler=cmd_scan, one_shot=True)

    plan = commands.add_parser("plan", help="show the scan tasks and what pruning did")
    add_table_selection(plan)
    plan.add_argument("--format", choices=PlanFormat.texts(), default="table",
                      help="table (default, for people) or json")
    plan.add_argument("--summary", action="store_true",
                      help="only the counts: what pruning skipped and what is left to read, "
                           "without a line per task")
    plan.set_defaults(handler=cmd_plan, one_shot=True)
