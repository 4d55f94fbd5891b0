"""The formats the `meltwater` command writes (`--format`), as one enum.

Kept apart from the writers, which load the encoders: the command line takes its choices
from here when it builds its parser, before it knows whether it will write anything.
"""

from __future__ import annotations

from meltwater.planner.str_enum import StrEnum


class OutputFormat(StrEnum):
    """What the `meltwater` command writes (`--format`)."""

    TABLE = "table"  # aligned columns, for a terminal
    JSONL = "jsonl"  # one JSON object per row
    CSV = "csv"
    PARQUET = "parquet"  # to a file only
    DEBEZIUM_JSONL = "debezium-jsonl"  # change rows as Debezium events (`change_events`)


# What `writers.write_stream` writes: any stream of rows.
ROW_FORMATS = (OutputFormat.TABLE, OutputFormat.JSONL, OutputFormat.CSV, OutputFormat.PARQUET)
# What a table's listing (`meltwater snapshots`) is written as: rows of counts, not a file.
LISTING_FORMATS = (OutputFormat.TABLE, OutputFormat.JSONL, OutputFormat.CSV)
# What a change read is written as: its rows, or Debezium change events.
CHANGE_FORMATS = (*ROW_FORMATS, OutputFormat.DEBEZIUM_JSONL)


def choices(formats: tuple[OutputFormat, ...]) -> tuple[str, ...]:
    """The formats' texts, for argparse (which shows choices by `repr`)."""
    return tuple(str(format_) for format_ in formats)
