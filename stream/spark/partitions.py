"""What one Spark task of the `meltwater` source reads, as plain picklable data, and reading it.

Spark plans partitions on the driver and pickles each to the executor that reads it, so
a partition carries everything its read needs and nothing of the driver's state:

- `SnapshotPartition`: a group of planner scan tasks (a snapshot read);
- `ChangePartition`: commit parts (`meltwater.planner.changes.micro_batch.CommitPart`) with the
  change options; a batch change read makes one of a whole commit (or, for net changes,
  of every commit of the range), a stream one of a micro-batch's packed parts.

Every partition is a `ReadPartition`, and `read_partition` opens the files of every kind
through `ReadPartition.open_io`: what an executor needs to reach the table's storage (an
object store's endpoint and credentials) belongs on that one class.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.expressions.tree import TRUE, Expression
from meltwater.planner.scans.tasks import FileScanTask
from meltwater.planner.spec.types import Schema
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import ChangeOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from meltwater.planner.table.fileio import FileIO
    from meltwater.planner.table.table_loading import Table
    from meltwater.stream.engine.keys.index_location import TableIndexes


@dataclass(frozen=True)
class ReadPartition(InputPartition):
    """What every partition shares: how its executor opens the table's files.

    `io_properties` are the FileIO properties the driver read the table with (a catalog's
    endpoint and vended credentials, the user's `io.*` options): an executor has no
    catalog and no configuration of its own. They may hold secrets: `repr` leaves them
    out, and Spark only pickles partitions to the executors that read them."""

    io_properties: tuple[tuple[str, str], ...] = field(default=(), kw_only=True, repr=False)

    def open_io(self) -> FileIO:
        """The FileIO an executor reads the partition's files with."""
        from meltwater.planner.table.fileio import shared_file_io  # executors only

        return shared_file_io(dict(self.io_properties))


def io_properties_of(table: Table) -> tuple[tuple[str, str], ...]:
    """A table's FileIO properties as a partition carries them."""
    return tuple(sorted(table.io_properties.items()))


@dataclass(frozen=True)
class SnapshotPartition(ReadPartition):
    """One planner task group of a snapshot scan."""

    tasks: tuple[FileScanTask, ...]
    read_schema: Schema  # the projection plus columns only the filter needs
    projection: Schema


@dataclass(frozen=True)
class ChangePartition(ReadPartition):
    """Commit parts read in order, with the read's change options.

    `row_filter` (bound to the parts' projection) keeps the changes of matching rows; only
    reads without update pairing or net changes take one (see `batch_reader`). With
    `options.net` the parts are a whole range, collapsed to each row's net effect.
    `scope` is what the read as a whole reads (`ReadScope`): ONE_COMMIT for a batch read
    of one commit, COMMITS for longer ranges and for streams, whose executors keep their
    loaders from partition to partition.
    """

    parts: tuple[CommitPart, ...]
    options: ChangeOptions
    row_filter: Expression = TRUE
    scope: ReadScope = field(default=ReadScope.COMMITS, kw_only=True)
    # where the executor keeps the table's key index (option `key-index-dir`); None: none
    key_indexes: TableIndexes | None = field(default=None, kw_only=True)


def read_partition(partition: ReadPartition, batch_size: int | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """The engine's batches of one partition (before they are made to fit Spark's schema,
    `arrow_types.conform`)."""
    from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE

    size = batch_size or DEFAULT_BATCH_SIZE
    io = partition.open_io()
    from meltwater.stream.engine.deletes.loader import shared_loader

    loader = shared_loader(io)  # what earlier partitions in this process read, kept
    if isinstance(partition, ChangePartition):
        # the executor's index of the table, opened once a process (`key_index`); should two
        # tables' reads share the loader, one may look in the other's index, whose entries
        # name other files, never found: that would cost reads, never rows
        loader.key_indexes = partition.key_indexes
    if isinstance(partition, SnapshotPartition):
        from meltwater.stream.engine.scans.scan import read_tasks

        yield from read_tasks(partition.tasks, partition.read_schema, partition.projection, io,
                              batch_size=size, threads=1, deletes=loader)
    elif isinstance(partition, ChangePartition):
        if partition.options.net:
            from meltwater.stream.engine.changes.reconstruction import (
                reconstruct_net,
                reconstruct_range,
            )

            parts = partition.parts
            if len(parts) == 1 and parts[0].changes.spanned:  # the range as one set of tasks
                yield from reconstruct_net(parts[0].changes, parts[0].projection, io,
                                           options=partition.options, deletes=loader,
                                           batch_size=size, row_filter=partition.row_filter)
                return
            yield from reconstruct_range([p.changes for p in parts], parts[0].projection, io,
                                         options=partition.options, deletes=loader,
                                         batch_size=size, row_filter=partition.row_filter,
                                         scope=partition.scope)
            return
        from meltwater.stream.engine.changes.held_changes import read_parts

        yield from read_parts(partition.parts, io, partition.options, loader,
                              batch_size=size, row_filter=partition.row_filter,
                              scope=partition.scope)
    else:
        raise TypeError(f"not a meltwater partition: {partition!r}")
