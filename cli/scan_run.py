"""`meltwater scan` and `meltwater plan` as they run: a table's rows at a snapshot, or how
their read is planned (their parsers are in `table_commands`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from meltwater.cli.options import UsageError, column_names, parse_timestamp_ms, table_source_of
from meltwater.cli.progress import Progress, wanted
from meltwater.cli.table_commands import PlanFormat
from meltwater.output.files import output_destination
from meltwater.output.writers import write_stream
from meltwater.planner.errors import NoSuchSnapshotError
from meltwater.planner.expressions.tree import TRUE
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.scans.scan import Plan, plan, read_plan


def _plan_args(args: argparse.Namespace) -> dict[str, Any]:
    return dict(snapshot_id=args.snapshot, ref=args.ref,
                as_of_ms=parse_timestamp_ms(args.as_of) if args.as_of is not None else None,
                filter=args.filter if args.filter else TRUE, columns=column_names(args.columns))


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


def _planned(args: argparse.Namespace) -> Plan:
    """The scan the command line asks for, planned; a snapshot it names that is not there
    is refused naming the option as given (the planner speaks of ids and milliseconds)."""
    table = load_table(table_source_of(args))
    try:
        return plan(table, **_plan_args(args))
    except NoSuchSnapshotError as error:
        option = _snapshot_option(args)
        if option is None:
            raise
        raise NoSuchSnapshotError(f"{option}: {error}") from error



def cmd_scan(args: argparse.Namespace) -> int:
    """`meltwater scan`: write a table's rows at a snapshot, deletes applied."""
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
