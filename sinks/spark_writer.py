"""Sinks on Spark: a `foreachBatch` function that applies each micro-batch exactly once.

    writer = foreach_batch(lambda: open_sink("postgresql://app@db/analytics",
                                             table="orders", source=T))
    (spark.readStream.format("meltwater").load(T)
          .writeStream.foreachBatch(writer)
          .option("checkpointLocation", ckpt).start())

Spark gives each micro-batch an id and, after a crash, replays the last one with the same
id and the same rows; the sink's ledger skips it if it was applied, so the destination sees
every batch once. The sink is opened on the first batch, in the process running the
function (the driver; under Spark Connect, the server's Python worker, which is why the
writer takes a factory and pickles without its open connection).

The collecting is `meltwater.stream.spark.foreach_batch`'s: each micro-batch is collected
to that process once, as one Arrow table, and applied whole in one transaction (bound the
batch with the source's limits: `streaming-max-rows-per-micro-batch`, `-files-`,
`-bytes-`). Give the writer `field_ids` (the stream's column name -> field id, as the
table's schema had them when the query started) and each batch carries them, so that a
mirror tells a renamed column from a dropped one re-added under the old name (`meltwater
serve` does this for its mirrors). Give it the query's `checkpoint` location too and each
batch's sink learns where the batch ends, from the checkpoint's `offsets/N`: its position
then moves on over commits that change no rows, and stops at the parent of a commit the
batch ends inside (`Sink.apply`'s `end`). The service's mirrors do this, so the ledger,
the sink's log line and the service's own line about a batch name one snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from meltwater.sinks.base import BatchResult, Sink
from meltwater.stream.spark.foreach_batch import ArrowForeachBatch
from meltwater.stream.watch.stream_offsets import StreamOffset

log = logging.getLogger(__name__)


class SinkBatches:
    """Applies micro-batches to a sink opened on first use; pickles without it."""

    def __init__(self, open_sink: Callable[[], Sink] | None = None,
                 sink: Sink | None = None) -> None:
        if open_sink is None and sink is None:
            raise ValueError("give open_sink or sink")
        self._open_sink = open_sink
        self._sink = sink
        self.last_result: BatchResult | None = None

    @property
    def sink(self) -> Sink:
        """The sink, opened on first use (on the driver, where `foreachBatch` runs)."""
        if self._sink is None:
            if self._open_sink is None:
                raise RuntimeError("this writer was pickled with an open sink and no factory; "
                                   "build it with foreach_batch(<function opening the sink>)")
            self._sink = self._open_sink()
        return self._sink

    @property
    def opened(self) -> bool:
        """Whether the sink is open in this process."""
        return self._sink is not None

    def __call__(self, batch_id: int, batch: pa.Table, end: StreamOffset | None) -> None:
        """Apply one micro-batch to the sink exactly once."""
        result = (self.sink.apply(batch_id, batch) if end is None
                  else self.sink.apply(batch_id, batch, end=end))
        self.last_result = result
        snapshot = result.position.snapshot_id if result.position else None
        log.info("batch %d %s: %d change rows, %d upserted, %d deleted, at snapshot %s",
                 batch_id, "skipped (applied before)" if result.skipped else "applied",
                 result.rows, result.upserted, result.deleted, snapshot)

    def close(self) -> None:
        """Close the sink, if it was opened; the next batch opens it again."""
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sink"] = None  # connections do not travel; the factory reopens
        return state


class ForeachBatchWriter(ArrowForeachBatch):
    """A picklable `foreachBatch` function over a sink opened on first use."""

    apply: SinkBatches

    def __init__(self, open_sink: Callable[[], Sink] | None = None,
                 sink: Sink | None = None, field_ids: Mapping[str, int] | None = None,
                 checkpoint: str | None = None) -> None:
        super().__init__(SinkBatches(open_sink, sink), field_ids, checkpoint)

    @property
    def sink(self) -> Sink:
        """The sink, opened on first use."""
        return self.apply.sink

    @property
    def last_result(self) -> BatchResult | None:
        """What the last batch did to the sink."""
        return self.apply.last_result

    def close(self) -> None:
        """Close the sink, if it was opened; the next batch opens it again."""
        self.apply.close()


def foreach_batch(sink: Sink | Callable[[], Sink],
                  field_ids: Mapping[str, int] | None = None,
                  checkpoint: str | None = None) -> ForeachBatchWriter:
    """A function for `df.writeStream.foreachBatch(...)` applying batches to a sink.

    Pass a function that opens the sink (picklable: works under Spark Connect too), or an
    open sink (classic Spark, where the function runs in the driver's own process), and
    optionally the stream's field ids by column name and the query's checkpoint location
    (see the module doc).
    """
    if isinstance(sink, Sink):
        return ForeachBatchWriter(sink=sink, field_ids=field_ids, checkpoint=checkpoint)
    return ForeachBatchWriter(open_sink=sink, field_ids=field_ids, checkpoint=checkpoint)
