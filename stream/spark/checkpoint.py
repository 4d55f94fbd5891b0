"""A streaming query's checkpoint as Spark wrote it: the last batch committed, and where the
meltwater source's read ended in each batch.

Spark writes `offsets/N` when it plans batch N (a version line, the batch's metadata, then
one line per source: its end offset, `-` for none) and `commits/N` once the batch's sink
has committed it. The newest id in `commits/` is therefore the last batch the sink holds,
and the source line of its `offsets/N` is where that batch's read ended, a `StreamOffset`
(`held_snapshot` turns it into the snapshot the sink holds whole). A batch that is running
already has its `offsets/N`, which is how a `foreachBatch` function learns where its own
batch ends (`meltwater.sinks.spark_writer`).

The files are read through the JVM's Hadoop FileSystem, the one Spark writes them with: a
checkpoint on HDFS, on S3 (s3a://) or on any file system Spark's configuration reaches is
read as Spark reads it, and a path without a scheme resolves as Spark resolves it (against
fs.defaultFS). That needs a classic SparkSession's JVM; `open_checkpoint` gives None where
there is none (Spark Connect). A checkpoint Spark cannot have written (no such directory,
a format other than Spark's `v1`) reads as no batch, never as a wrong one.

A running query's checkpoint is also read as the query itself keeps it, its offset and
commit logs (`running_batches`): a batch is planned once the first holds its id, and done
once the second does, which is how a stop can let the batch in flight finish.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from meltwater.planner.errors import OffsetError
from meltwater.stream.watch.stream_offsets import StreamOffset

log = logging.getLogger(__name__)

OFFSET_LOG_VERSION = "v1"


def parse_offset_file(text: str) -> StreamOffset | None:
    """The meltwater source's end offset in the text of an `offsets/N` file (a query of one
    source); None when the file holds no offset for it or is not in Spark's v1 format."""
    lines = text.splitlines()
    if len(lines) < 3 or lines[0].strip() != OFFSET_LOG_VERSION:
        return None
    source = lines[2].strip()
    if source in ("", "-"):
        return None
    try:
        return StreamOffset.from_json(json.loads(source))
    except (ValueError, OffsetError):
        return None


class Checkpoint:
    """A query's checkpoint directory, read through the JVM's Hadoop FileSystem."""

    def __init__(self, spark: Any, location: str) -> None:
        jvm = spark._jvm
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self._path = jvm.org.apache.hadoop.fs.Path
        self._io = jvm.org.apache.hadoop.io.IOUtils
        self._root = self._path(location)
        self._fs = self._root.getFileSystem(conf)
        self.location = location

    def committed_batch(self) -> int | None:
        """The id of the newest batch Spark committed (`commits/N`); None before the first."""
        directory = self._path(self._root, "commits")
        if not self._fs.exists(directory):
            return None
        ids = [int(name) for status in self._fs.listStatus(directory)
               if (name := str(status.getPath().getName())).isdigit()]
        return max(ids) if ids else None

    def end_offset(self, batch_id: int) -> StreamOffset | None:
        """Where batch `batch_id`'s read of the meltwater source ends (`offsets/N`); None if
        the checkpoint has no such batch (purged, or never planned)."""
        path = self._path(self._root, f"offsets/{batch_id}")
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            data = bytes(self._io.readFullyToByteArray(stream))
        finally:
            stream.close()
        return parse_offset_file(data.decode("utf-8", errors="replace"))

    def committed_offset(self) -> tuple[int, StreamOffset] | None:
        """The newest committed batch and where its read ended; None before the first."""
        batch = self.committed_batch()
        if batch is None:
            return None
        offset = self.end_offset(batch)
        return None if offset is None else (batch, offset)


def open_checkpoint(spark: Any, location: str) -> Checkpoint | None:
    """The checkpoint at `location` as `spark`'s JVM sees it; None without a JVM (Spark
    Connect) or when Hadoop cannot open its file system (logged: the caller goes on
    without the checkpoint's position)."""
    if getattr(spark, "_jvm", None) is None:
        return None
    try:
        return Checkpoint(spark, location)
    # Blind on purpose: py4j raises whatever the JVM threw (an unknown scheme, a missing
    # connector); the position is a report, and the query's own start says what is wrong.
    except Exception as error:  # noqa: BLE001
        log.warning("checkpoint %s: cannot open it to read its position (%s)", location,
                    str(error).splitlines()[0] if str(error) else type(error).__name__)
        return None


class RunningBatches:
    """A running query's offset and commit logs (Spark's `StreamExecution.offsetLog` and
    `commitLog`, through py4j)."""

    def __init__(self, offset_log: Any, commit_log: Any) -> None:
        self._offset_log = offset_log
        self._commit_log = commit_log

    def planned(self) -> int:
        """The newest batch planned (its offsets written); -1 before the first."""
        return _latest(self._offset_log)

    def committed(self) -> int:
        """The newest batch committed; -1 before the first."""
        return _latest(self._commit_log)


def _latest(batch_log: Any) -> int:
    latest = batch_log.getLatestBatchId()
    return int(latest.get()) if latest.isDefined() else -1


def running_batches(query: Any) -> RunningBatches | None:
    """The batch logs of a running `StreamingQuery`; None where Spark does not expose them
    (Spark Connect, a Spark without these members: its status then says whether a trigger
    is active, less precisely)."""
    try:
        execution = query._jsq.streamingQuery()
        return RunningBatches(execution.offsetLog(), execution.commitLog())
    # Blind on purpose: whatever py4j or a Spark without these members raises, the caller
    # falls back on the query's status.
    except Exception:  # noqa: BLE001
        return None
