"""How many rows an Arrow batch the engine makes holds at most: one number for scans, change
reads and the Python API's readers; a stream of batches cut to its first rows; and small
batches gathered up to it.

Memory follows it (a reader holds a few batches at a time), and Arrow's kernels run at
full speed well below it. A module of its own so that what plans without reading (a
stream's driver, the change feed, `meltwater changes --limit`) can name it without loading
the decoders or the scan planner.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_BATCH_SIZE = 131_072


def limited(batches: Iterable[pa.RecordBatch], limit: int) -> Iterator[pa.RecordBatch]:
    """The first `limit` rows of a stream of batches; then the stream is closed (a reader or
    generator with `close`), unread beyond them."""
    remaining = limit
    try:
        for batch in batches:
            if remaining <= 0:
                return
            if batch.num_rows > remaining:
                batch = batch.slice(0, remaining)
            remaining -= batch.num_rows
            yield batch
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def gathered(items: Iterable[tuple[str, pa.RecordBatch, pa.Array | None]],
             batch_size: int = DEFAULT_BATCH_SIZE
             ) -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
    """(kind, batch, a per-row array or None) items with consecutive batches of one kind
    and schema joined up to `batch_size` rows (their arrays too: all or none of them given), empty
    ones dropped; a batch already that large passes alone. A change read of 1,000 rows
    over 1,000 files gives a batch, not 1,000 that every step after it pays for one by one.
    """
    import pyarrow as pa

    pending: list[tuple[pa.RecordBatch, pa.Array | None]] = []
    kind = ""
    rows = 0

    def joined() -> tuple[str, pa.RecordBatch, pa.Array | None]:
        if len(pending) == 1:
            return kind, *pending[0]
        arrays = [a for _, a in pending if a is not None]
        return (kind, pa.concat_batches([b for b, _ in pending]),
                pa.concat_arrays(arrays) if len(arrays) == len(pending) else None)

    for item_kind, batch, array in items:
        if batch.num_rows == 0:
            continue
        if pending and (item_kind != kind or rows + batch.num_rows > batch_size
                        or not batch.schema.equals(pending[0][0].schema,
                                                   check_metadata=True)):
            yield joined()
            pending, rows = [], 0
        kind = item_kind
        pending.append((batch, array))
        rows += batch.num_rows
    if pending:
        yield joined()
