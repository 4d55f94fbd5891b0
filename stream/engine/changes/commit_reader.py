"""One commit's change rows: its tasks' rows, filtered, compared and given their columns.

`CommitReader` runs `reconstruction`'s pipeline for one commit: the rows each task changed
(`task_rows`), the row filter, a share of the keys and key images applied to them
(`_filtered`), carry-over removal and update pairing where the commit's rows must be held
and compared (`compared`), and the metadata columns (`change_columns`). A commit whose rows
need no comparing streams batch by batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeTask,
    CommitChanges,
    DeletedRowsTask,
    EqualityDeletedRowsTask,
)
from meltwater.planner.expressions.tree import TRUE, AlwaysTrue, Expression
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.changes.change_columns import ChangeColumns, metadata_fields
from meltwater.stream.engine.changes.change_modes import EqualityDeletes, ReadScope
from meltwater.stream.engine.changes.change_schema import CHANGE_TYPE, DELETE, INSERT, ChangeOptions
from meltwater.stream.engine.changes.delete_payloads import DeletePayloads
from meltwater.stream.engine.changes.key_images import KeyImages
from meltwater.stream.engine.changes.task_rows import TaskRows
from meltwater.stream.engine.changes.updates import deletes_first, pair_updates, remove_carryover
from meltwater.stream.engine.decode.arrow_constants import constant_array
from meltwater.stream.engine.decode.arrow_filter import to_arrow_filter
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE, gathered
from meltwater.stream.engine.decode.remote_reads import each_in_order
from meltwater.stream.engine.deletes.loader import DeleteLoader

if TYPE_CHECKING:
    from meltwater.stream.engine.changes.key_shares import KeyShare


class CommitReader:
    """Reconstructs one commit (see the module doc). `scope` is what the caller reads, one
    commit or commits after commits (`ReadScope`); `share`, a share of the commit's keys
    (`CommitPart.key_shares`)."""

    def __init__(self, commit: CommitChanges, projection: Schema, io: FileIO,
                 options: ChangeOptions, loader: DeleteLoader, scope: ReadScope, *,
                 batch_size: int = DEFAULT_BATCH_SIZE, row_filter: Expression = TRUE,
                 share: tuple[int, int] | None = None) -> None:
        self.commit = commit
        self.projection = projection
        self.io = io
        self.options = options
        self.loader = loader
        self.batch_size = batch_size
        self.table_schema = to_arrow_schema(projection)
        self.filter = (None if isinstance(row_filter, AlwaysTrue)
                       else to_arrow_filter(row_filter, projection))
        payloads = DeletePayloads(projection, io, loader, batch_size)
        self.payloads = payloads
        # equality delete files whose rows are emitted as they are: only with trust-payload
        self.trusted = ({} if options.equality_deletes != EqualityDeletes.TRUST_PAYLOAD
                        else payloads.trusted_files(commit))
        self.share = self._key_share(share)
        # before-images=key: departing rows carry their key only, and are read so
        self.key_images = KeyImages.of(projection, options, row_filter,
                                       self.share.key_set.field_ids if self.share else ())
        if self.key_images is not None:
            self.table_schema = self.key_images.table_schema
        self.columns = ChangeColumns(commit, options.change_type_names,
                                     pa.schema(list(self.table_schema) + metadata_fields()))
        self.net = self.columns.net
        self.rows = TaskRows(projection, io, loader, batch_size, scope, net=self.net,
                             payloads=payloads, trusted=self.trusted, share=self.share,
                             key_images=self.key_images)

    # -- orchestration ---------------------------------------------------------------------

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The commit's change rows with their metadata columns: compared first where the
        commit both removes and adds rows (or may undelete some), streamed otherwise."""
        tasks = self.commit.tasks
        leaving = [t for t in tasks if not isinstance(t, AddedRowsTask)]
        arriving = [t for t in tasks if isinstance(t, AddedRowsTask)]
        compare = (not self.options.keep_carryover or self.options.pairs_updates) \
            and not self.net  # net changes collapse the range's rows afterwards
        may_undelete = any(isinstance(t, (DeletedRowsTask, EqualityDeletedRowsTask))
                           and t.may_undelete for t in leaving)
        if compare and leaving and (arriving or may_undelete):
            yield from self._compared(self._raw(leaving, arriving))
            return
        raw = ((change_type, batch, None) for change_type, batch in self._raw(leaving, arriving))
        for change_type, batch, _ in gathered(raw, self.batch_size):
            yield self.columns.finish(batch, change_type)

    def _raw(self, leaving: Sequence[ChangeTask], arriving: list[AddedRowsTask]
             ) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(change type, table-column batch) for every task: rows that left, then rows
        that arrived (a DeletedRowsTask's rare INSERTs are held back until the DELETEs are
        out, so the order rule holds even when streaming). For net changes each batch
        also carries the ordinal of the commit each row's change belongs to."""
        undeleted: list[pa.RecordBatch] = []
        last = self.commit.commit.ordinal
        for path in sorted(self.trusted):
            yield from self._filtered(DELETE, (self.columns.tagged(b, last) for b in
                                               self.payloads.trusted_rows(self.trusted[path])))
        for task, changes in zip(leaving, each_in_order(leaving, self._leaving_rows),
                                 strict=True):
            constant = task.commit.ordinal
            for change_type, batch, seqs in changes:
                batch = self.columns.tagged(batch, constant if seqs is None else seqs)
                if change_type == INSERT:
                    undeleted.append(batch)
                else:
                    yield from self._filtered(change_type, [batch])
        for batch in undeleted:
            yield from self._filtered(INSERT, [batch])
        def arrived(task: AddedRowsTask) -> Iterator[pa.RecordBatch]:
            return (self.columns.tagged(b, task.commit.ordinal)
                    for b in self.rows.read(task.data_file, task.sequence_number, task.deletes,
                                        task.equality))

        if self.net:  # a range's added files, held anyway: a few decoded at a time
            for batches in each_in_order(arriving, lambda task: list(arrived(task))):
                yield from self._filtered(INSERT, batches)
            return
        for task in arriving:  # one batch at a time, however large the file
            yield from self._filtered(INSERT, arrived(task))

    def _leaving_rows(self, task: ChangeTask
                      ) -> Iterable[tuple[str, pa.RecordBatch, pa.Array | None]]:
        """A leaving task's rows: read now (on a reading thread, a few tasks at a time)
        when the task is a file's position deletes changing at most a batch of rows, so a
        deletion-vector commit over many files reads them on every core; otherwise as a
        stream for the caller to pull (one batch at a time, however large the file)."""
        rows = self.rows.changes(task)
        if isinstance(task, DeletedRowsTask) and task.equality is None \
                and _changed_rows_bound(task) <= self.batch_size:
            return list(rows)
        return rows

    def _filtered(self, change_type: str, batches: Iterable[pa.RecordBatch]
                  ) -> Iterator[tuple[str, pa.RecordBatch]]:
        for batch in batches:
            if self.filter is not None and batch.num_rows:
                batch = batch.filter(self.filter)
            if self.share is not None and batch.num_rows:
                batch = batch.filter(self.share.keeps(batch))
            if change_type == DELETE and self.key_images is not None:
                batch = self.key_images.imaged(batch)
            if batch.num_rows:
                yield change_type, batch

    def _key_share(self, share: tuple[int, int] | None) -> KeyShare | None:
        """The share of the commit's keys this run reads (None: all of them)."""
        if share is None:
            return None
        from meltwater.stream.engine.changes.key_shares import KeyShare  # for shares alone
        from meltwater.stream.engine.deletes.key_columns import key_names, key_table

        (task,) = [t for t in self.commit.tasks if isinstance(t, EqualityDeletedRowsTask)]
        change = task.equality
        ids = sorted({fid for r in change.added + change.removed
                      for fid in r.file.equality_ids or ()})
        index, count = share
        return KeyShare(change, self.loader, key_names(self.projection, ids), index, count,
                        task.candidates,
                        lambda ref: key_table(ref.file, self.projection, ids, self.io,
                                              self.loader))

    def _compared(self, raw: Iterator[tuple[str, pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
        """Hold the commit's changes, drop carry-over, pair updates, then emit."""
        yield from self.compared(self._held(raw))

    def raw_table(self) -> pa.Table:
        """Every raw change row of the tasks (table columns and `_change_type`), in the
        order they are compared: rows that left, then rows that arrived, by task."""
        tasks = self.commit.tasks
        leaving = [t for t in tasks if not isinstance(t, AddedRowsTask)]
        arriving = [t for t in tasks if isinstance(t, AddedRowsTask)]
        return self._held(self._raw(leaving, arriving))

    def _held(self, raw: Iterator[tuple[str, pa.RecordBatch]]) -> pa.Table:
        schema = self.table_schema.append(pa.field(CHANGE_TYPE, pa.string(), nullable=False))
        batches = [pa.RecordBatch.from_arrays(
            [*batch.columns, constant_array(pa.scalar(change_type), batch.num_rows)],
            schema=schema) for change_type, batch in raw]
        return pa.Table.from_batches(batches, schema=schema)

    def compared(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """Raw change rows (`raw_table`'s) without carry-over, updates paired, as batches
        with the metadata columns."""
        if not self.options.keep_carryover:
            table = remove_carryover(table)
        if self.options.pairs_updates:
            table = pair_updates(table, self.options.identifier_field_ids or ())
        else:
            table = deletes_first(table)
        for batch in table.combine_chunks().to_batches(max_chunksize=self.batch_size):
            if batch.num_rows:
                yield self.columns.finish(batch.select(self.table_schema.names),
                                   batch.column(CHANGE_TYPE))


def _changed_rows_bound(task: DeletedRowsTask) -> int:
    """At most how many rows a file's position delete change can yield: the rows named by
    the delete files on one side of the commit only (a deletion vector names all of a
    file's deleted positions, so a replaced one counts whole)."""
    before = {ref.key for ref in task.deletes_before}
    after = {ref.key for ref in task.deletes_after}
    return sum(ref.file.record_count for ref in (*task.deletes_before, *task.deletes_after)
               if (ref.key in before) != (ref.key in after))
