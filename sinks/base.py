"""What every sink is, and the registry that opens one by URL scheme.

A sink takes a table's change stream one batch at a time, each with the batch id Spark's
`foreachBatch` gives it (or any caller's own counter), and applies it exactly once: a batch
id it has already applied is skipped, so replaying a batch after a crash changes nothing.
`reached()` says how far the destination is, for progress reports and restarts.

Sinks register under URL schemes, so a service opens one from configuration alone::

    sink = open_sink("sqlite:///var/lib/meltwater/orders.db",
                     table="orders", source="/warehouse/db/orders")
    result = sink.apply(batch_id, changes)      # BatchResult(skipped=False, upserted=...)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable
from urllib.parse import urlsplit

import pyarrow as pa

from meltwater.planner.errors import redact_url
from meltwater.sinks.errors import InvalidChangesError, InvalidSinkUrlError
from meltwater.stream.watch.stream_offsets import StreamOffset

# What `apply` accepts: one Arrow table or batch, a stream (`meltwater.stream.changes`), or
# an iterable of batches. Spark DataFrames go through `meltwater.sinks.spark_writer`.
ChangeInput: TypeAlias = (
    pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch])


@dataclass(frozen=True)
class Position:
    """Where a sink's pipeline is: its last applied batch and the newest commit it holds.

    `snapshot_id` / `sequence_number` are those of the last commit whose changes the sink
    applied (carried over by empty batches; with the batch's end offset given to `apply`,
    the newest snapshot the sink holds whole); None until a batch with rows arrives.
    """

    batch_id: int
    snapshot_id: int | None
    sequence_number: int | None
    applied_at: dt.datetime | None = None


@dataclass(frozen=True)
class BatchResult:
    """What `apply` did with one batch.

    `skipped` means the batch id was applied before and nothing was done now; `rows` is the
    number of change rows in the batch, `upserted` the keys written, `deleted` the rows the
    destination removed; `position` is where the pipeline stands afterwards.
    """

    batch_id: int
    skipped: bool
    rows: int
    upserted: int
    deleted: int
    position: Position | None


@runtime_checkable
class Sink(Protocol):
    """A destination that applies change batches exactly once, by batch id."""

    name: str

    def apply(self, batch_id: int, changes: ChangeInput, *, snapshot_id: int | None = None,
              sequence_number: int | None = None,
              end: StreamOffset | None = None) -> BatchResult:
        """Apply one batch of change rows in one transaction, or skip it if already applied.

        `snapshot_id` / `sequence_number` name the commit the batch reaches when the caller
        knows it better than the rows (an empty batch of a range); the rows say otherwise.
        `end` is the stream offset the batch ends at, when the caller knows it (a Spark
        micro-batch's, from its checkpoint): the position is then the newest snapshot the
        sink holds whole after the batch (`StreamOffset.held_snapshot`).
        """
        ...

    def reached(self) -> Position | None:
        """The last applied batch of this sink's pipeline, None before the first."""
        ...

    def close(self) -> None:
        """Release connections; the sink cannot be used afterwards."""
        ...


SinkFactory = Callable[..., Sink]
_FACTORIES: dict[str, SinkFactory] = {}


def register_sink(scheme: str, factory: SinkFactory) -> None:
    """Make `open_sink` hand URLs of `scheme` to `factory(url, **options)`."""
    _FACTORIES[scheme.lower()] = factory


def sink_schemes() -> list[str]:
    """The URL schemes sinks are registered under, sorted."""
    return sorted(_FACTORIES)


def open_sink(url: str, **options) -> Sink:
    """Open the sink the URL's scheme names, passing it the URL and `options`."""
    scheme = urlsplit(url).scheme.lower()
    factory = _FACTORIES.get(scheme)
    if factory is None:
        raise InvalidSinkUrlError(f"no sink for URL scheme {scheme!r} in {redact_url(url)} "
                             f"(known: {', '.join(sink_schemes())})")
    return factory(url, **options)


def as_table(changes: ChangeInput) -> pa.Table:
    """One Arrow table from any `ChangeInput` (the caller holds the batch whole anyway)."""
    if isinstance(changes, pa.Table):
        return changes
    if isinstance(changes, pa.RecordBatch):
        return pa.Table.from_batches([changes])
    if isinstance(changes, pa.RecordBatchReader):
        return changes.read_all()
    batches = list(changes)
    if not batches:
        raise InvalidChangesError("an empty iterable of batches has no schema: pass an empty "
                             "pa.Table or a RecordBatchReader instead")
    return pa.Table.from_batches(batches)
