"""Writing output on a worker thread while the scan goes on reading: a bounded hand-off.

`meltwater scan T --format parquet --output F` used to read a batch, encode it as a row
group on the main thread, then read the next: reading and encoding took turns although
pyarrow releases the GIL for both. `BackgroundWriter` runs the writes (Parquet row groups,
CSV or JSON text) in order on one thread of its own, so encoding overlaps the reading. Its
queue holds at most `depth` items, so memory stays bounded whatever the table's size: the
reader blocks when the writer falls behind.

A failure on either side ends both. A write that raises is re-raised in the caller's
thread at its next `put` or at `close`; an exception in the caller (a read error, Ctrl-C,
SIGTERM) goes through `abort`, which drops what is queued and waits for the write under
way to end, so no thread writes into a file the caller is about to remove. The thread is
a daemon, and `abort` waits for it only a bounded time: a write blocked forever (a FIFO no
one reads) cannot keep the process from exiting on a signal.

`ordered_map` is the other half for text formats: it renders batches on a few threads
(Arrow's compute kernels release the GIL) and yields the results in the input's order,
holding at most a few in flight.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_DONE = object()
# How long `abort` waits for a write under way (an encode of one row group takes well under
# a second; a write blocked on a FIFO would take forever).
ABORT_WAIT_SECONDS = 10.0


class BackgroundWriter(Generic[T]):
    """Calls `write(item)` for each `put` item, in order, on one daemon thread; see the
    module doc. Use `close()` after the last item and `abort()` on any exception."""

    def __init__(self, write: Callable[[T], None], *, depth: int = 1,
                 name: str = "meltwater-output") -> None:
        self._write = write
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max(1, depth))
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _DONE or self._stop.is_set():
                return
            try:
                self._write(item)  # type: ignore[arg-type]
            except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = error
                self._stop.set()
                return

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, item: T) -> None:
        """Queue an item, waiting while the queue is full; raises the writer's error if it
        failed (then nothing more is written)."""
        while True:
            self._raise_if_failed()
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                if not self._thread.is_alive():
                    self._raise_if_failed()
                    raise RuntimeError("the output writer thread ended early") from None

    def close(self) -> None:
        """Wait until every queued item is written; raises the writer's error, if any."""
        self.put(_DONE)  # type: ignore[arg-type]
        self._thread.join()
        self._raise_if_failed()

    def abort(self) -> bool:
        """Drop the queued items and wait (bounded) for the write under way; True if the
        thread has ended, so whatever it wrote to is no longer in use."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        with contextlib.suppress(queue.Full):  # emptied above; only the thread takes
            self._queue.put_nowait(_DONE)
        self._thread.join(ABORT_WAIT_SECONDS)
        return not self._thread.is_alive()


@contextlib.contextmanager
def writing_behind(write: Callable[[T], None], *, depth: int = 1
                   ) -> Generator[Callable[[T], None], None, None]:
    """A `BackgroundWriter`'s `put`, for the block's items: closed when the block ends (every
    item written, a write's failure raised), aborted when it raises."""
    writer: BackgroundWriter[T] = BackgroundWriter(write, depth=depth)
    try:
        yield writer.put
        writer.close()
    except BaseException:
        # A write still under way (a FIFO no one reads) keeps its thread; the output is not
        # finished, so nothing more is written to it.
        writer.abort()
        raise


def ordered_map(function: Callable[[T], R], items: Iterable[T], *, workers: int = 2,
                ahead: int = 2) -> Generator[R, None, None]:
    """`map(function, items)` on `workers` threads, results in the items' order, with at
    most `workers + ahead` items taken from `items` and not yet yielded.

    A result is yielded as soon as it and those before it are done, not only once the
    look-ahead is full: the first Parquet row group used to wait in memory until two more
    had been read, and the writer idled meanwhile."""
    pending: deque[Future[R]] = deque()
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="meltwater-render")
    try:
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) > workers + ahead:
                yield pending.popleft().result()
            while pending and pending[0].done():
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:  # the renders under way end soon: they work in memory
        pool.shutdown(wait=True, cancel_futures=True)
