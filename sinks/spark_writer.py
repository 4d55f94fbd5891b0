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

Memory: each micro-batch is collected to that process once, as one Arrow table
(`DataFrame.toArrow()`), and applied whole in one transaction; bound the batch with the
source's limits (`streaming-max-rows-per-micro-batch`, `-files-`, `-bytes-`). Nothing
here imports pyspark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from meltwater.sinks.base import BatchResult, Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class ForeachBatchWriter:
    """A picklable `foreachBatch` function over a sink opened on first use."""

    def __init__(self, open_sink: Callable[[], Sink] | None = None,
                 sink: Sink | None = None) -> None:
        if open_sink is None and sink is None:
            raise ValueError("give open_sink or sink")
        self._open_sink = open_sink
        self._sink = sink
        self.last_result: BatchResult | None = None

    @property
    def sink(self) -> Sink:
        if self._sink is None:
            if self._open_sink is None:
                raise RuntimeError("this writer was pickled with an open sink and no factory; "
                                   "build it with foreach_batch(<function opening the sink>)")
            self._sink = self._open_sink()
        return self._sink

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        result = self.sink.apply(batch_id, df.toArrow())  # the one collect of the batch
        self.last_result = result
        log.info("batch %d %s: %d change rows, %d upserted, %d deleted, at snapshot %s",
                 batch_id, "skipped (applied before)" if result.skipped else "applied",
                 result.rows, result.upserted, result.deleted,
                 result.position.snapshot_id if result.position else None)

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sink"] = None  # connections do not travel; the factory reopens
        return state


def foreach_batch(sink: Sink | Callable[[], Sink]) -> ForeachBatchWriter:
    """A function for `df.writeStream.foreachBatch(...)` applying batches to a sink.

    Pass a function that opens the sink (picklable: works under Spark Connect too), or an
    open sink (classic Spark, where the function runs in the driver's own process).
    """
    if isinstance(sink, Sink):
        return ForeachBatchWriter(sink=sink)
    return ForeachBatchWriter(open_sink=sink)
