"""The modes of a change stream: where a new one starts, and what a schema change does.

Parsed from the Spark source's options (`meltwater.stream.spark.options.stream_read`) into
`StreamRead`, and selected on by the stream (`change_stream`).
"""

from __future__ import annotations

from meltwater.planner.str_enum import StrEnum


class Starting(StrEnum):
    """Where a stream without a start snapshot or time starts (option `starting`)."""

    EARLIEST = "earliest"  # the oldest retained commit: the whole retained history
    LATEST = "latest"  # after the current snapshot: only commits after the query starts


class SchemaChange(StrEnum):
    """What the stream does when the table's schema changes under it (option
    `schema-change`)."""

    PROJECT = "project"  # keep the schema it started with: new columns projected away
    FAIL = "fail"  # stop with SchemaChangedError, for a restart in the new schema
