"""`meltwater changes`: the row-level changes of a range of commits, without Spark."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.cli.table_commands import (
    TEXT_VALUES_HELP,
    TIME_HELP,
    UsageError,
    add_output_argument,
    add_table_argument,
    parse_timestamp_ms,
    table_source_of,
)
from meltwater.output.formats import CHANGE_FORMATS, OutputFormat, choices
from meltwater.planner.changes.change_range import BoundKind, RangeRequest, given_bounds
from meltwater.planner.expressions.tree import TRUE
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.changes.change_modes import (
    BeforeImages,
    ChangeTypeNames,
    EqualityDeletes,
)

if TYPE_CHECKING:
    from meltwater.stream.engine.changes.change_schema import RowOptions


def _names(text: str | None, option: str) -> list[str] | None:
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise UsageError(f"{option}: give at least one column name")
    return names


def _ms(text: str | None, option: str) -> int | None:
    return None if text is None else parse_timestamp_ms(text, option)


def range_request(args: argparse.Namespace) -> RangeRequest:
    """The range the options ask for, each bound named by its option in refusals."""
    starts = {"--from-snapshot": (BoundKind.SNAPSHOT, args.from_snapshot),
              "--from-sequence": (BoundKind.SEQUENCE, args.from_sequence),
              "--from-timestamp": (BoundKind.TIMESTAMP,
                                   _ms(args.from_timestamp, "--from-timestamp")),
              "--from-ref": (BoundKind.REF, args.from_ref)}
    ends = {"--to-snapshot": (BoundKind.SNAPSHOT, args.to_snapshot),
            "--to-sequence": (BoundKind.SEQUENCE, args.to_sequence),
            "--to-timestamp": (BoundKind.TIMESTAMP, _ms(args.to_timestamp, "--to-timestamp")),
            "--to-ref": (BoundKind.REF, args.to_ref)}
    times = {"--from-timestamp": args.from_timestamp, "--to-timestamp": args.to_timestamp}
    return RangeRequest.of(given_bounds(starts, inclusive=False, given=times),
                           given_bounds(ends, inclusive=True, given=times),
                           skip_expired=args.skip_expired, skip_option="--skip-expired")


def row_options(args: argparse.Namespace) -> RowOptions:
    """The row-level options (imported here: `meltwater.stream` loads pyarrow)."""
    from meltwater.stream.engine.changes.change_schema import RowOptions

    return RowOptions(
        filter=args.filter if args.filter else TRUE,
        columns=_names(args.columns, "--columns"), net=args.net,
        compute_updates=True if args.compute_updates else None,
        identifier_columns=_names(args.identifier_columns, "--identifier-columns"),
        keep_carryover=args.keep_carryover, appends_only=args.appends_only,
        equality_deletes=args.equality_deletes, change_type_names=args.change_type_names,
        before_images=args.before_images,
        updates_option="--compute-updates", identifiers_option="--identifier-columns")


def cmd_changes(args: argparse.Namespace) -> int:
    """`meltwater changes`: write a table's change rows in a range, in the format asked for."""
    from meltwater.cli.progress import Progress, wanted
    from meltwater.output.writers import write_stream
    from meltwater.stream.engine.changes.change_feed import change_feed
    from meltwater.stream.engine.scans.scan import limited

    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be zero or more")
    feed = change_feed(load_table(table_source_of(args)), range_request(args), row_options(args))
    reader = feed.reader()
    if args.limit is not None:
        reader = pa.RecordBatchReader.from_batches(reader.schema, limited(reader, args.limit))
    commits = {c.sequence_number: i for i, c in enumerate(feed.change_range.commits, 1)}
    done = [0]

    def seen(batch: pa.RecordBatch) -> None:
        last = pc.max(batch.column("_commit_sequence_number")).as_py()
        done[0] = max(done[0], commits.get(last, 0))

    def details() -> list[str]:
        planned = feed.stats.data_files_considered + feed.stats.delete_files_considered
        return [f"commit {done[0]:,} of {len(commits):,}", f"{planned:,} files"]

    with Progress("changes", args.table, enabled=wanted(args.output),
                  details=details) as progress:
        reader = progress.count(reader, seen)
        if args.format == OutputFormat.DEBEZIUM_JSONL:
            from meltwater.output.change_events import write_debezium_jsonl

            count = write_debezium_jsonl(reader, args.output, feed.table.location)
        else:
            count = write_stream(reader, args.format, args.output)
    if args.output:
        rows = "change row" if count == 1 else "change rows"
        print(f"wrote {count:,} {rows} to {args.output}", file=sys.stderr)
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `changes` command to the CLI."""
    changes = commands.add_parser(
        "changes", help="row-level changes between two snapshots (from exclusive, to inclusive)",
        description="The row-level changes of the commits in (from, to]: after the start, "
                    "up to and including the end. No start means the table's whole retained "
                    "history; no end, its current snapshot.")
    add_table_argument(changes)
    start = changes.add_mutually_exclusive_group()
    start.add_argument("--from-snapshot", type=int, metavar="ID",
                       help="changes after this snapshot (exclusive)")
    start.add_argument("--from-sequence", type=int, metavar="N",
                       help="changes committed with a sequence number above N")
    start.add_argument("--from-timestamp", metavar="TIME",
                       help=f"changes committed after this time: {TIME_HELP}")
    start.add_argument("--from-ref", metavar="NAME",
                       help="changes after the snapshot this branch or tag points at")
    end = changes.add_mutually_exclusive_group()
    end.add_argument("--to-snapshot", type=int, metavar="ID",
                     help="changes up to and including this snapshot (default: the current one)")
    end.add_argument("--to-sequence", type=int, metavar="N",
                     help="changes up to and including sequence number N")
    end.add_argument("--to-timestamp", metavar="TIME",
                     help=f"changes committed up to and including this time: {TIME_HELP}")
    end.add_argument("--to-ref", metavar="NAME",
                     help="changes up to the snapshot this branch or tag points at")
    changes.add_argument("--net", action="store_true",
                         help="collapse each row's changes to its net effect")
    changes.add_argument("--compute-updates", action="store_true",
                         help="pair DELETE/INSERT of one key as UPDATE_BEFORE/UPDATE_AFTER "
                              "(default when the table has identifier fields)")
    changes.add_argument("--identifier-columns", metavar="A,B",
                         help="row key columns (default: the table's identifier fields)")
    changes.add_argument("--keep-carryover", action="store_true",
                         help="keep rows a commit deleted and re-inserted unchanged")
    changes.add_argument("--appends-only", action="store_true",
                         help="only rows appended by append commits")
    changes.add_argument("--equality-deletes", choices=EqualityDeletes.texts(),
                         default="resolve",
                         help="resolve equality deletes against live rows (default) or trust "
                              "full-row payloads (CDC writers that delete only existing rows)")
    changes.add_argument("--change-type-names", choices=ChangeTypeNames.texts(),
                         default="iceberg",
                         help="_change_type values: iceberg's (default: INSERT, DELETE, "
                              "UPDATE_BEFORE, UPDATE_AFTER) or Delta's (insert, delete, "
                              "update_preimage, update_postimage)")
    changes.add_argument("--before-images", choices=BeforeImages.texts(), default="full",
                         help="what DELETE and UPDATE_BEFORE rows carry: the whole row "
                              "(default) or its identifier columns only, the rest null "
                              "(enough to apply changes by key, and not read whole)")
    changes.add_argument("--skip-expired", action="store_true",
                         help="skip expired history with a warning instead of failing")
    changes.add_argument("--filter", metavar="EXPR",
                         help="row filter, e.g. \"id > 10 and name is not null\"")
    changes.add_argument("--columns", metavar="A,B",
                         help="table columns to return, comma-separated (the change columns "
                              "always come)")
    changes.add_argument("--limit", type=int, metavar="N", help="return at most N change rows")
    changes.add_argument("--format", default="table",
                         choices=choices(CHANGE_FORMATS),
                         help="table (default, for people), jsonl, csv, parquet (needs "
                              "--output), or debezium-jsonl (one Debezium event a line); "
                              f"{TEXT_VALUES_HELP}")
    add_output_argument(changes)
    changes.set_defaults(handler=cmd_changes, one_shot=True)
