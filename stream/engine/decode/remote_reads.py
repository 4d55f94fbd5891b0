"""Reads of many files, several at a time: small reads from an object store, and the files
of a change read.

A scan opens every Parquet footer (`bulk_groups.partition`) and reads every position delete
file (`DeleteLoader.read_positions`) before its rows: a few KiB each, one file after
another. On local disk each takes microseconds; on S3 each is a round trip (a footer's GET;
a delete file's HEAD and two GETs), so a reader thread of a table of hundreds of files
waited on them in a row with the cores idle. Iceberg Java's readers open files on a worker
pool for the same reason. Locations on this machine keep the plain loop: a pool only costs
there.

A change read is different: it decodes the key columns of every file an equality delete
may reach, and then the rows that changed, from tens or hundreds of files. Decoding
releases the GIL, so those reads run on a few threads even locally (`each_in_order`), in
order and with a bounded number of results waiting, so memory stays bounded.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from meltwater.planner.table.fileio import FileIO

T = TypeVar("T")
R = TypeVar("R")

# Requests in flight at once per reader thread: enough to hide a round trip behind the
# others, few enough not to look like a flood to a store's rate limits (S3 allows thousands
# of GETs a second per prefix).
REMOTE_READS = 8


def waits_on_network(io: FileIO, location: str) -> bool:
    """Whether reading `location` through `io` goes over a network (one the FileIO cannot
    resolve is taken to be local: the plain loop is right either way, only slower)."""
    try:
        return not io.is_local(location)
    except Exception:  # noqa: BLE001  (the read itself reports what is wrong with it)
        return False


def read_each(items: Sequence[T], read: Callable[[T], R], *, concurrently: bool) -> list[R]:
    """`read(item)` for each item, in the items' order; `concurrently`, up to
    `REMOTE_READS` at a time on a pool that is gone when this returns. An exception from
    `read` is raised here, as the plain loop would raise it."""
    if not concurrently or len(items) < 2:
        return [read(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(REMOTE_READS, len(items)),
                            thread_name_prefix="meltwater-remote-read") as pool:
        return list(pool.map(read, items))


DECODING_THREADS_VARIABLE = "MELTWATER_DECODING_THREADS"


def decoding_threads() -> int:
    """Threads for decoding many files at once: `MELTWATER_DECODING_THREADS` when set (on
    Spark executors sharing a machine, the executor's cores: `spark.executorEnv.` passes
    it), else one per core, at least two."""
    given = os.environ.get(DECODING_THREADS_VARIABLE, "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    return max(2, os.cpu_count() or 2)


def each_in_order(items: Sequence[T], read: Callable[[T], R], *, threads: int | None = None,
                  ahead: int | None = None) -> Iterator[R]:
    """`read(item)` for each item, yielded in the items' order, up to `threads` at once
    (default `decoding_threads()`) and at most `ahead` results (default `threads`) done
    and not yet taken. An exception from `read` is raised where its result would be."""
    threads = threads or decoding_threads()
    ahead = max(1, ahead or threads)
    if threads < 2 or len(items) < 2:
        for item in items:
            yield read(item)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(items)),
                            thread_name_prefix="meltwater-file-read") as pool:
        pending: deque[Future[R]] = deque()
        queued = iter(items)
        for item in queued:
            pending.append(pool.submit(read, item))
            if len(pending) >= ahead:
                break
        while pending:
            result = pending.popleft().result()
            for item in queued:
                pending.append(pool.submit(read, item))
                break
            yield result
