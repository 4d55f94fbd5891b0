"""The parsers of `meltwater snapshots`, `scan` and `plan`: reading a table without Spark.

What each runs is in `snapshots_run` and `scan_run`, loaded only when the command runs
(`main.resolve_handler`): building these parsers loads no Arrow.
"""

from __future__ import annotations

import argparse

from meltwater.cli.options import (
    TEXT_VALUES_HELP,
    add_output_argument,
    add_table_argument,
    add_table_selection,
)
from meltwater.output.formats import LISTING_FORMATS, ROW_FORMATS, choices
from meltwater.planner.str_enum import StrEnum


class PlanFormat(StrEnum):
    """What `meltwater plan` writes (`--format`)."""

    TABLE = "table"  # the tasks and the pruning counts, for people
    JSON = "json"  # one JSON document: groups of tasks and the counts


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
    snapshots.set_defaults(handler="meltwater.cli.snapshots_run:cmd_snapshots", one_shot=True)

    scan = commands.add_parser("scan", help="read a table at a snapshot, deletes applied")
    add_table_selection(scan)
    scan.add_argument("--format", choices=choices(ROW_FORMATS),
                      default="table",
                      help=f"table (default, for people), jsonl, csv, or parquet (needs "
                           f"--output); {TEXT_VALUES_HELP}")
    add_output_argument(scan)
    scan.add_argument("--limit", type=int, metavar="N", help="return at most N rows")
    scan.set_defaults(handler="meltwater.cli.scan_run:cmd_scan", one_shot=True)

    plan = commands.add_parser("plan", help="show the scan tasks and what pruning did")
    add_table_selection(plan)
    plan.add_argument("--format", choices=PlanFormat.texts(), default="table",
                      help="table (default, for people) or json")
    plan.add_argument("--summary", action="store_true",
                      help="only the counts: what pruning skipped and what is left to read, "
                           "without a line per task")
    plan.set_defaults(handler="meltwater.cli.scan_run:cmd_plan", one_shot=True)
