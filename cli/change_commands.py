"""The parser of `meltwater changes`: the row-level changes of a range of commits, without
Spark.

What it runs is in `changes_run`, loaded only when the command runs (`main.resolve_handler`):
building this parser loads no Arrow.
"""

from __future__ import annotations

import argparse

from meltwater.cli.options import (
    TEXT_VALUES_HELP,
    TIME_HELP,
    add_output_argument,
    add_table_argument,
)
from meltwater.output.formats import CHANGE_FORMATS, choices
from meltwater.stream.engine.changes.change_modes import (
    BeforeImages,
    ChangeTypeNames,
    EqualityDeletes,
)


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
    index = changes.add_mutually_exclusive_group()
    index.add_argument("--key-index-dir", metavar="DIR",
                       help="where the table's key index is kept, so upsert commits find "
                            "the rows they replaced by lookups and the next command starts "
                            "warm (default: $MELTWATER_KEY_INDEX_DIR, else key-index/ under "
                            "$MELTWATER_CACHE or ~/.cache/meltwater)")
    index.add_argument("--no-key-index", action="store_true",
                       help="keep no key index: find replaced rows by reading key columns")
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
    changes.set_defaults(handler="meltwater.cli.changes_run:cmd_changes", one_shot=True)
