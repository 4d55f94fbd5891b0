"""Running a planned scan: task groups in, one stream of Arrow record batches out.

Worker threads read tasks (pyarrow releases the GIL while decoding) and hand batches to a
bounded queue, so memory holds at most a few batches per worker however big the table is.
Batches arrive in no particular order, as from any parallel Iceberg reader.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from meltwater.planner.expressions.tree import TRUE, Expression
from meltwater.planner.scans.plan_stats import PlanStats
from meltwater.planner.scans.scan import TableScan
from meltwater.planner.scans.tasks import FileScanTask, ScanTaskGroup
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.planner.table.table_loading import Table, load_table
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE, limited

if TYPE_CHECKING:
    from meltwater.stream.engine.deletes.loader import DeleteLoader

# Arrow decodes a bulk scan on its own thread pool; the thread consuming the scan only
# masks and filters, about a fifth of the decoding work. One consumer per this many reader
# threads keeps the consumers from falling behind without taking cores from decoding.
THREADS_PER_BULK_SHARE = 4
_DONE = object()


def default_threads() -> int:
    """Reader threads for a scan: one per core, at least two so reading overlaps decoding."""
    return max(2, os.cpu_count() or 2)


def _project(batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    if batch.schema.names == names:
        return batch
    return pa.RecordBatch.from_arrays([batch.column(n) for n in names], names=names)


def read_tasks(tasks: Iterable[FileScanTask], read_schema: Schema, projection: Schema,
               io: FileIO, *, batch_size: int = DEFAULT_BATCH_SIZE,
               threads: int | None = None, bulk: bool = True,
               deletes: DeleteLoader | None = None) -> Iterator[pa.RecordBatch]:
    """Batches of every task, in `projection` columns, read by a pool of threads.

    With `bulk` (the default), the Parquet tasks are cut into shares (one per
    `THREADS_PER_BULK_SHARE` threads), each
    read by Arrow dataset scans (`meltwater.stream.engine.scans.bulk_scan.read_chunk`), which keeps
    Python's per-file work off the hot path; the others, and all of them without `bulk`,
    are read task by task with `read_task`. Both give the same rows.
    """
    # The readers are imported here, not with the module: `meltwater.stream` exports
    # `plan` and `scan`, and Spark's driver-side Python processes import the package
    # without reading a row.
    from meltwater.stream.engine.deletes.loader import DeleteLoader
    from meltwater.stream.engine.scans.bulk_groups import candidates
    from meltwater.stream.engine.scans.bulk_scan import read_chunk
    from meltwater.stream.engine.scans.reader import read_task

    names = [f.name for f in projection.fields]
    tasks = list(tasks)
    threads = threads or default_threads()
    deletes = deletes if deletes is not None else DeleteLoader(io)
    jobs: list[Callable[[], Iterator[pa.RecordBatch]]] = []
    if bulk:
        maybe, rest = candidates(tasks, read_schema)
        jobs += [functools.partial(read_chunk, chunk, read_schema, io, deletes,
                                   batch_size=batch_size)
                 for chunk in _shares(maybe, max(1, threads // THREADS_PER_BULK_SHARE))]
    else:
        rest = tasks
    jobs += [functools.partial(read_task, task, read_schema, io, batch_size=batch_size,
                               deletes=deletes) for task in rest]
    threads = max(1, min(threads, len(jobs) or 1))
    if threads == 1:
        for job in jobs:
            for batch in job():
                yield _project(batch, names)
        return
    todo: queue.Queue = queue.Queue()
    for job in jobs:
        todo.put(job)
    out: queue.Queue = queue.Queue(maxsize=threads * 2)
    stop = threading.Event()

    def work() -> None:
        try:
            while not stop.is_set():
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    return
                for batch in job():
                    if stop.is_set():
                        return
                    out.put(_project(batch, names))
        except BaseException as error:  # noqa: BLE001  (handed to the consumer, re-raised there)
            out.put(error)
        finally:
            out.put(_DONE)

    workers = [threading.Thread(target=work, daemon=True, name=f"meltwater-read-{i}")
               for i in range(threads)]
    for worker in workers:
        worker.start()
    running = len(workers)
    try:
        while running:
            item = out.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        while running:  # unblock producers waiting on a full queue
            try:
                if out.get(timeout=0.1) is _DONE:
                    running -= 1
            except queue.Empty:
                if not any(w.is_alive() for w in workers):
                    break


def _shares(tasks: list[FileScanTask], parts: int) -> list[list[FileScanTask]]:
    """Tasks cut into at most `parts` runs of about equal bytes, one per reader thread.

    Arrow decodes a scan on its own threads, but masking and filtering the batches happens
    in the thread consuming it; more than one share lets that work run in parallel too,
    at the price of scans competing for Arrow's threads (on 2 cores, two shares cost 5-10%
    more CPU than one: each scan's read-ahead evicts the other's batches from the cache
    before they are filtered). Each share is a run of consecutive tasks, so a task's
    pieces stay in one scan.
    """
    if not tasks:
        return []
    total = sum(max(1, task.size_in_bytes) for task in tasks)
    shares: list[list[FileScanTask]] = [[]]
    done = 0
    for task in tasks:
        if shares[-1] and done >= total * len(shares) / parts:
            shares.append([])
        shares[-1].append(task)
        done += max(1, task.size_in_bytes)
    return shares


@dataclass
class Plan:
    """A planned scan as data: the task groups, what they return, and pruning counts."""

    scan: TableScan
    groups: list[ScanTaskGroup]

    @property
    def tasks(self) -> list[FileScanTask]:
        """Every file task of every group, in group order."""
        return [t for g in self.groups for t in g.tasks]

    @property
    def stats(self) -> PlanStats:
        """What planning read and pruned."""
        return self.scan.stats


def _table(table: Table | TableSource | str, io: FileIO | None) -> Table:
    return table if isinstance(table, Table) else load_table(table, io)


def plan(table: Table | TableSource | str, *, snapshot_id: int | None = None,
         ref: str | None = None, as_of_ms: int | None = None, filter: Expression | str = TRUE,
         columns: list[str] | None = None, case_sensitive: bool = True,
         io: FileIO | None = None) -> Plan:
    """Plan a scan of a table: a catalog identifier (`lake.db.events`), a location, a
    metadata file, a `TableSource` or a loaded `Table`."""
    scan = TableScan(_table(table, io), snapshot_id=snapshot_id, ref=ref, as_of_ms=as_of_ms,
                     row_filter=filter, columns=columns, case_sensitive=case_sensitive)
    return Plan(scan, scan.plan_tasks())


def scan(table: Table | TableSource | str, *, snapshot_id: int | None = None,
         ref: str | None = None, as_of_ms: int | None = None, filter: Expression | str = TRUE,
         columns: list[str] | None = None, case_sensitive: bool = True,
         limit: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
         threads: int | None = None, io: FileIO | None = None) -> pa.RecordBatchReader:
    """Read a table at a snapshot, merge-on-read applied, as a stream of Arrow batches.

    Example::

        reader = meltwater.stream.scan("/warehouse/db/events", filter="id > 100",
                                       columns=["id", "ts"])
        table = reader.read_all()
    """
    planned = plan(table, snapshot_id=snapshot_id, ref=ref, as_of_ms=as_of_ms, filter=filter,
                   columns=columns, case_sensitive=case_sensitive, io=io)
    return read_plan(planned, limit=limit, batch_size=batch_size, threads=threads)


def read_plan(planned: Plan, *, limit: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
              threads: int | None = None) -> pa.RecordBatchReader:
    """Read a planned scan's tasks on `threads` threads as one RecordBatchReader, stopping after
    `limit` rows if given."""
    s = planned.scan
    schema = to_arrow_schema(s.projection)
    batches = read_tasks(planned.tasks, s.read_schema, s.projection, s.table.io,
                         batch_size=batch_size, threads=threads)
    if limit is not None:
        batches = limited(batches, limit)
    return pa.RecordBatchReader.from_batches(schema, batches)
