"""`meltwater changes` as it runs: the row-level changes of a range of commits, without
Spark (its parser is in `change_commands`)."""

from __future__ import annotations

import argparse
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.cli.options import UsageError, column_names, parse_timestamp_ms, table_source_of
from meltwater.cli.progress import Progress, wanted
from meltwater.output.formats import OutputFormat
from meltwater.output.writers import write_stream
from meltwater.planner.changes.change_range import BoundKind, RangeRequest, given_bounds
from meltwater.planner.expressions.tree import TRUE
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.changes.change_feed import change_feed
from meltwater.stream.engine.changes.change_schema import RowOptions
from meltwater.stream.engine.decode.batch_size import limited
from meltwater.stream.engine.keys.index_location import default_index_root


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
    """The row-level options the command line asks for."""
    return RowOptions(
        filter=args.filter if args.filter else TRUE,
        columns=column_names(args.columns, "--columns"), net=args.net,
        compute_updates=True if args.compute_updates else None,
        identifier_columns=column_names(args.identifier_columns, "--identifier-columns"),
        keep_carryover=args.keep_carryover, appends_only=args.appends_only,
        equality_deletes=args.equality_deletes, change_type_names=args.change_type_names,
        before_images=args.before_images,
        updates_option="--compute-updates", identifiers_option="--identifier-columns")


def cmd_changes(args: argparse.Namespace) -> int:
    """`meltwater changes`: write a table's change rows in a range, in the format asked for."""
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be zero or more")
    if args.key_index_dir and os.path.exists(args.key_index_dir) \
            and not os.path.isdir(args.key_index_dir):
        raise UsageError(f"--key-index-dir {args.key_index_dir}: not a directory")
    feed = change_feed(load_table(table_source_of(args)), range_request(args), row_options(args),
                       key_index_dir=None if args.no_key_index
                       else args.key_index_dir or default_index_root())
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
        if args.format == OutputFormat.DEBEZIUM_JSONL:  # its envelope, loaded for it alone
            from meltwater.output.change_events import write_debezium_jsonl

            count = write_debezium_jsonl(reader, args.output, feed.table.location)
        else:
            count = write_stream(reader, args.format, args.output)
    if args.output:
        rows = "change row" if count == 1 else "change rows"
        print(f"wrote {count:,} {rows} to {args.output}", file=sys.stderr)
    return 0
