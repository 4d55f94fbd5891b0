"""How many rows an Arrow batch the engine makes holds at most: one number for scans, change
reads and the Python API's readers; and a stream of batches cut to its first rows.

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
