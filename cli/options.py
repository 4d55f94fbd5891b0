"""What several commands' parsers share: the table argument, `--output`, times, and the
refusal of a malformed value.

It imports nothing that reads a table or loads Arrow: the parsers are built in every
process, `meltwater --help` and `--version` included, so what they need must cost
little to import (`tests/cli_tests/test_cli_imports.py`).
"""

from __future__ import annotations

import argparse
import datetime as dt

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.table.table_source import TableSource, parse_table_source


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


def column_names(text: str | None, option: str = "--columns") -> list[str] | None:
    """A comma-separated list of column names, or None when the option was not given; an
    option given with no name in it is refused."""
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise UsageError(f"{option}: give at least one column name")
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
