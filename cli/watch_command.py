"""`meltwater watch`: a table's new snapshots, one line each as they are committed.

    $ meltwater watch /warehouse/db/orders
    2026-11-01T10:00:00.120Z 5140426932827412781 seq=3 append rows=+20/-0 files=+1/-0 deletes=+0/-0
    2026-11-01T10:00:02.410Z 5142685350174599025 seq=4 delete rows=+0/-6 files=+0/-1 deletes=+0/-0

Counts are the snapshot summary's: rows and data files added/deleted, delete files
added/removed, then, for commits adding delete files, the row positions and keys they
delete: `(+7 positions, +0 keys)`. Iceberg leaves out zero counts: they print as 0 here and
as null in `--format jsonl`, which also has the total row count, parent and metadata file.
Lines are flushed one by one, so the output can be piped. Ctrl-C or SIGTERM end it with
status 0; a table that is not there is one line and status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from meltwater.cli.options import UsageError, add_table_argument, table_source_of
from meltwater.cli.signals import Terminated, signals_raise
from meltwater.planner.str_enum import StrEnum

if TYPE_CHECKING:  # the watcher (and `meltwater.stream`) load only when `watch` runs
    from meltwater.stream.watch.snapshot_events import SnapshotEvent


class WatchFormat(StrEnum):
    """What `meltwater watch` prints for each commit (`--format`)."""

    TEXT = "text"  # a line per commit, for people
    JSONL = "jsonl"  # an object per commit, every count of its summary


def _n(value: int | None) -> int:
    return 0 if value is None else value


def format_text(event: SnapshotEvent) -> str:
    """One line describing a new snapshot, as `meltwater watch` prints it."""
    line = (f"{event.committed_at} {event.snapshot_id} seq={event.sequence_number} "
            f"{event.operation or '?'} "
            f"rows=+{_n(event.added_records)}/-{_n(event.deleted_records)} "
            f"files=+{_n(event.added_data_files)}/-{_n(event.deleted_data_files)} "
            f"deletes=+{_n(event.added_delete_files)}/-{_n(event.removed_delete_files)}")
    if event.added_position_deletes or event.added_equality_deletes:
        line += (f" (+{_n(event.added_position_deletes)} positions, "
                 f"+{_n(event.added_equality_deletes)} keys)")
    if event.reset:
        line += f" reset (main left the previous lineage; parent {event.parent_id})"
    return line


def cmd_watch(args: argparse.Namespace) -> int:
    """`meltwater watch`: print a table's snapshots as they are committed, until interrupted."""
    from meltwater.stream.watch.watcher import MAX_INTERVAL, SnapshotWatcher

    if args.interval is not None and not 0 < args.interval < MAX_INTERVAL:
        raise UsageError(f"--interval {args.interval}: expected a positive number of seconds "
                         f"below {MAX_INTERVAL:g}")
    watcher = SnapshotWatcher(table_source_of(args), after=args.after,
                              poll=True if args.poll else None, interval=args.interval)
    render = (lambda e: json.dumps(e.to_json())) if args.format == WatchFormat.JSONL \
        else format_text
    with signals_raise():
        try:
            with watcher:
                latest = watcher.latest
                print(f"watching {args.table} ({watcher.mode}) at snapshot "
                      f"{latest.snapshot_id if latest else None}; Ctrl-C to stop",
                      file=sys.stderr, flush=True)
                while True:
                    for event in watcher.wait(timeout=1.0):
                        print(render(event), flush=True)
        except (KeyboardInterrupt, Terminated):
            return 0
        except BrokenPipeError:  # the reader of our output went away: we are done too
            sys.stdout = None  # nothing left to flush at exit
            return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `watch` command to the CLI."""
    watch = commands.add_parser(
        "watch", help="print a table's new snapshots as they are committed")
    add_table_argument(watch)
    watch.add_argument("--poll", action="store_true",
                       help="poll instead of file events (the default for s3://, gs://, ...)")
    watch.add_argument("--interval", type=float, metavar="S",
                       help="seconds: the longest wait between two polls (default 2), "
                            "between two catalog requests (default 1), or between safety "
                            "looks with file events (default 30)")
    watch.add_argument("--after", type=int, metavar="SNAPSHOT_ID",
                       help="first print the commits after this snapshot (resume)")
    watch.add_argument("--format", choices=WatchFormat.texts(), default="text",
                       help="text (default: a line per commit, for people) or jsonl (an "
                            "object per commit, every count of its summary)")
    watch.set_defaults(handler=cmd_watch)
