"""The changelog archive and the console: Spark's own streaming sinks, set up for change rows.

The archive is Spark's file sink (Parquet or JSON) with the change metadata columns kept and
the files partitioned by commit (`_commit_snapshot_id` unless `partition-by` says otherwise).
Exactly once comes from Spark itself: the file sink writes a `_spark_metadata` log next to
the files and readers of the directory see only files of committed batches, so a batch
replayed after a crash never shows twice. Nothing here needs a ledger.

JSON archives write every column on every line, `null` included (`ignoreNullFields` is
false; Spark's JSON writer leaves null fields out by default). A change log whose lines
lose keys is hard to consume: a reader cannot tell a null from a column it does not know,
and tools that take their schema from the first line (`pyarrow.Table.from_pylist`, many
JSON-lines loaders) drop a column whenever that line's value was null. The partition
column is the exception, as for every file sink: it is in the directory name.

The console sink prints each micro-batch; it is for trying a pipeline out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from meltwater.planner.str_enum import StrEnum
from meltwater.sinks.errors import SinkError
from meltwater.sinks.kinds import SinkKind, SinkOption, SinkPlacement, register_sink_kind

DEFAULT_PARTITIONING = ("_commit_snapshot_id",)


class ArchiveFormat(StrEnum):
    """The archive's file formats: each is a sink kind of its name, written by Spark's file
    sink of that format."""

    PARQUET = "parquet"
    JSON = "json"


# Spark's options of each format's writer (see the module doc for JSON's)
FORMAT_OPTIONS: dict[ArchiveFormat, dict[str, str]] = {
    ArchiveFormat.JSON: {"ignoreNullFields": "false"}, ArchiveFormat.PARQUET: {}}


def archive_writer(frame: Any, kind: ArchiveFormat, options: Mapping[str, Any]) -> Any:
    """A DataStreamWriter writing `frame` (change rows) as `kind` files under `path`."""
    partitioning = list(options.get("partition-by") or DEFAULT_PARTITIONING)
    unknown = [c for c in partitioning if c not in frame.columns]
    if unknown:
        raise SinkError(f"archive sink: partition-by column {unknown[0]!r} is not a "
                             f"column of the change stream ({', '.join(frame.columns)})")
    return (frame.writeStream.format(kind.value).outputMode("append")
            .options(**FORMAT_OPTIONS[kind])
            .option("path", str(options["path"])).partitionBy(*partitioning))


def console_writer(frame: Any, options: Mapping[str, Any]) -> Any:
    """A DataStreamWriter printing each micro-batch's change rows."""
    return (frame.writeStream.format("console").outputMode("append")
            .option("numRows", int(options.get("rows", 20)))
            .option("truncate", str(bool(options.get("truncate", False))).lower()))


def _archive_kind(file_format: ArchiveFormat) -> SinkKind:
    def writer(frame: Any, options: Mapping[str, Any], _placement: SinkPlacement) -> Any:
        return archive_writer(frame, file_format, options)

    return SinkKind(file_format.value, {"path": SinkOption(str, required=True),
                                        "partition-by": SinkOption(list, names=True)}, writer)


def _console(frame: Any, options: Mapping[str, Any], _placement: SinkPlacement) -> Any:
    return console_writer(frame, options)


for _kind in (*map(_archive_kind, ArchiveFormat),
              SinkKind("console", {"rows": SinkOption(int, minimum=1),
                                   "truncate": SinkOption(bool)}, _console)):
    register_sink_kind(_kind)
