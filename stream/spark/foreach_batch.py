"""Spark's `foreachBatch` in Arrow: each micro-batch collected once, as one Arrow table.

`ArrowForeachBatch(apply)` is a function for `df.writeStream.foreachBatch(...)`. Spark
calls it with each micro-batch's DataFrame and id; it collects the batch to this process
once (`DataFrame.toArrow()`), gives its columns their Iceberg field ids when told them,
learns where the batch's read ends from the query's checkpoint when told its location, and
hands the three to `apply(batch_id, batch, end)`: meltwater's sinks
(`meltwater.sinks.spark_writer`), or any function of the caller's.

Spark's rows carry column names only, no Iceberg field ids. Whoever matches columns by name
cannot tell a renamed column from a dropped one re-added under the old name; `field_ids`
(the stream's column name -> field id, as the table's schema had them when the query
started) puts them in each batch's Arrow field metadata, as `meltwater.stream` batches
carry them.

`checkpoint`: the batch's end offset is read from the checkpoint's `offsets/N`
(`meltwater.stream.spark.checkpoint`), so `apply` learns where the read ended even when
the batch holds no rows; None without a checkpoint or when it cannot be read (logged).

Memory: each micro-batch is held whole, as one Arrow table; bound it with the source's
limits (`streaming-max-rows-per-micro-batch`, `-files-`, `-bytes-`). The function pickles
(Spark Connect runs it in the server's Python worker) when `apply` does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY
from meltwater.stream.watch.stream_offsets import StreamOffset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class ApplyBatch(Protocol):
    """What a micro-batch is handed to: its id, its rows, where its read ends (if known)."""

    def __call__(self, batch_id: int, batch: pa.Table, end: StreamOffset | None) -> None:
        """Apply one micro-batch."""
        ...


class ArrowForeachBatch:
    """A `foreachBatch` function handing each micro-batch, as Arrow, to `apply`."""

    def __init__(self, apply: ApplyBatch, field_ids: Mapping[str, int] | None = None,
                 checkpoint: str | None = None) -> None:
        self.apply = apply
        self.field_ids = dict(field_ids) if field_ids else None
        self.checkpoint = checkpoint

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Collect one micro-batch and apply it, as `foreachBatch` calls it."""
        batch = df.toArrow()  # the one collect of the batch
        if self.field_ids:
            batch = with_field_ids(batch, self.field_ids)
        self.apply(batch_id, batch, self._end_offset(df, batch_id))

    def _end_offset(self, df: DataFrame, batch_id: int) -> StreamOffset | None:
        """Where this batch's read ends, from the query's checkpoint (None without one, or
        if it cannot be read)."""
        if self.checkpoint is None:
            return None
        from meltwater.stream.spark.checkpoint import open_checkpoint

        checkpoint = open_checkpoint(df.sparkSession, self.checkpoint)
        if checkpoint is None:
            return None
        try:
            return checkpoint.end_offset(batch_id)
        # Blind on purpose: whatever py4j raises reading the file, the batch is applied as
        # its rows say.
        except Exception as error:  # noqa: BLE001
            log.warning("checkpoint %s: cannot read where batch %d ends (%s)",
                        self.checkpoint, batch_id, str(error).splitlines()[0] if str(error)
                        else type(error).__name__)
            return None


def with_field_ids(batch: pa.Table, field_ids: Mapping[str, int]) -> pa.Table:
    """The batch with each named column's field id in its Arrow field metadata."""
    fields = []
    for f in batch.schema:
        fid = field_ids.get(f.name)
        fields.append(f if fid is None else
                      f.with_metadata({**(f.metadata or {}), FIELD_ID_KEY: str(fid)}))
    return batch.cast(pa.schema(fields, metadata=batch.schema.metadata))


__all__ = ["ApplyBatch", "ArrowForeachBatch", "with_field_ids"]
