"""What each change task of a commit changed: rows that left and arrived, read from the
files the task names (`reconstruction`'s steps 1 and 2).

- `DeletedDataFileTask`: the removed file's rows live before it went;
- `DeletedRowsTask`: an older file's rows live under `deletes_before` and not under
  `deletes_after` (or the reverse), read in one pass with a live mask per set, from the
  row groups holding a changed position or a changed key only; from position deletes'
  `row` payloads where they suffice (`delete_payloads`);
- `EqualityDeletedRowsTask`: the rows the commit's equality deletes changed, found by key
  (`equality_changes`);
- `AddedRowsTask`: the added file's live rows (`read`).

Each yields (change type, table-column batch, and for net changes each DELETE's removing
sequence number or None).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import (
    ChangeTask,
    DeletedDataFileTask,
    DeletedRowsTask,
    EqualityChange,
    EqualityDeletedRowsTask,
)
from meltwater.planner.scans.tasks import (
    DataFileRef,
    DeleteFileRef,
    EqualityDeleteSet,
    FileScanTask,
)
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import DELETE, INSERT
from meltwater.stream.engine.changes.changed_keys import positional_deaths
from meltwater.stream.engine.changes.delete_payloads import DeletePayloads, delete_keys
from meltwater.stream.engine.changes.key_images import KeyImages
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.scans.reader import read_task, read_with_delete_sets

if TYPE_CHECKING:
    from meltwater.stream.engine.changes.equality_changes import EqualityRows
    from meltwater.stream.engine.changes.key_shares import KeyShare


class TaskRows:
    """Reads the rows each task of one commit changed (see the module doc)."""

    def __init__(self, projection: Schema, io: FileIO, loader: DeleteLoader,
                 batch_size: int, scope: ReadScope, *, net: bool,
                 payloads: DeletePayloads, trusted: dict[str, DataFile],
                 share: KeyShare | None, key_images: KeyImages | None) -> None:
        self.projection = projection
        self.io = io
        self.loader = loader
        self.batch_size = batch_size
        self.scope = scope
        self.net = net  # net changes: each DELETE with the sequence number that removed it
        self.payloads = payloads
        self.trusted = trusted  # trusted equality delete files (`trust-payload`), by path
        self.share = share
        self.key_images = key_images
        self._equality: EqualityRows | None = None

    def read(self, data_file: DataFile, sequence_number: int,
              deletes: tuple[DeleteFileRef, ...], equality: EqualityDeleteSet | None = None,
              *, departing: bool = False) -> Iterator[pa.RecordBatch]:
        """The file's live rows; `departing`: as departing rows (key images if asked for)."""
        task = FileScanTask(data_file, sequence_number, deletes, equality=equality)
        if departing and self.key_images is not None:
            return map(self.key_images.widened, read_task(
                task, self.key_images.read_projection, self.io, batch_size=self.batch_size,
                deletes=self.loader))
        return read_task(task, self.projection, self.io, batch_size=self.batch_size,
                         deletes=self.loader)

    def changes(self, task: ChangeTask
                      ) -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
        """(change type, rows, for net changes each DELETE's removing sequence number)."""
        if isinstance(task, DeletedDataFileTask):
            for batch in self.read(task.data_file, task.sequence_number,
                                    task.existing_deletes, task.equality, departing=True):
                yield DELETE, batch, None
        elif isinstance(task, DeletedRowsTask):
            yield from self._deleted_rows(task)
        elif isinstance(task, EqualityDeletedRowsTask):
            yield from self.equality_rows(task.equality).changes(task, deaths=self.net)
        else:
            raise TypeError(f"not a change task: {task!r}")

    def equality_rows(self, change: EqualityChange) -> EqualityRows:
        """The commit's equality change, ready to find rows by key (one per commit)."""
        if self._equality is None or self._equality.change is not change:
            # loaded for commits with equality deletes alone: a small commit's process
            # spares importing the key machinery (`bench/small.py`)
            from meltwater.stream.engine.changes.equality_changes import EqualityRows

            trusted = [r for r in change.added if r.file.file_path in self.trusted]
            images = self.key_images
            self._equality = EqualityRows(
                change, self.projection, self.io, self.loader, self.scope, self.batch_size,
                excluded=trusted, share=self.share,
                departing=None if images is None else (images.read_projection, images.widened))
        return self._equality

    def _deleted_rows(self, task: DeletedRowsTask
                      ) -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
        ref = DataFileRef(task.data_file, task.sequence_number)
        change = task.equality
        changed = change is not None and bool(change.changed_for(ref))
        before, after = task.deletes_before, task.deletes_after
        if not changed and delete_keys(after) == delete_keys(before):
            return  # nothing changed for this file
        if not changed and not self.net:
            payload = self.payloads.deleted_rows(
                ref, before, after, task.added_deletes,
                None if change is None else change.before)
            if payload is not None:
                for batch in payload:
                    yield DELETE, batch, None
                return
        yield from self._compare_sets(task, ref, changed)

    def _compare_sets(self, task: DeletedRowsTask, ref: DataFileRef, changed: bool
                      ) -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
        """Compare the liveness of the rows that may change (those at changed positions,
        and those whose key an equality delete the commit changed holds) before and after
        the commit, reading only the row groups holding them."""
        path = task.data_file.file_path
        before, after = task.deletes_before, task.deletes_after
        interest = self._changed_positions(path, before, after)
        change = task.equality
        if changed and change is not None:
            rows = self.equality_rows(change)
            matched = rows.matching(rows.key_columns(ref))
            interest = pc.unique(pa.concat_arrays([interest, matched]))
            interest = interest.take(pc.array_sort_indices(interest))
            rows.liveness.whole()  # the lookup after the commit, extended from the one before
        sets: list[Sequence[DeleteFileRef]] = [before, after]
        equality: list[EqualityDeleteSet | None] = (
            [None, None] if change is None else [change.before, change.after])
        trusted = self.trusted_set(change) if changed else None
        if trusted is not None:
            sets.append(())
            equality.append(trusted)
        was = delete_keys(before)
        new_positional = [r for r in after if r.key not in was]
        for item in read_with_delete_sets(task.data_file, self.projection, self.io, sets,
                                          batch_size=self.batch_size, deletes=self.loader,
                                          positions_of_interest=interest,
                                          sequence_number=task.sequence_number,
                                          equality=equality):
            n = item.batch.num_rows
            live_before, live_after = (_full(m, n) for m in item.live[:2])
            # Rows a trusted equality delete removes are emitted from its payload instead.
            untrusted = _full(item.live[2], n) if trusted is not None else None
            left = pc.and_not(live_before, live_after)
            arrived = pc.and_not(live_after, live_before)
            if untrusted is not None:
                left, arrived = pc.and_(left, untrusted), pc.and_(arrived, untrusted)
            for change_type, mask in ((DELETE, left), (INSERT, arrived)):
                if pc.any(mask).as_py():
                    seqs = None
                    if self.net and change_type == DELETE:
                        positions = pc.add(pc.indices_nonzero(mask).cast(pa.int64()),
                                           pa.scalar(item.first, pa.int64()))
                        seqs = self._first_deleted(ref, positions, change, new_positional)
                    yield change_type, item.batch.filter(mask), seqs

    def _first_deleted(self, ref: DataFileRef, positions: pa.Array,
                       change: EqualityChange | None,
                       new_positional: Sequence[DeleteFileRef]) -> pa.Array:
        """Net changes: the sequence number of the delete that removed each row."""
        if change is not None:
            return self.equality_rows(change).first_deleted(ref, positions, new_positional)
        return positional_deaths(self.loader, ref, positions, new_positional)

    def trusted_set(self, change: EqualityChange | None) -> EqualityDeleteSet | None:
        """The commit's trusted equality deletes (`trust-payload`) as a set, if any."""
        if change is None:
            return None
        trusted = [r for r in change.added if r.file.file_path in self.trusted]
        if not trusted:
            return None
        return EqualityDeleteSet(tuple(r for r in trusted if r.key in change.global_keys),
                                 tuple(r for r in trusted if r.key not in change.global_keys))

    def _changed_positions(self, path: str, before: Sequence[DeleteFileRef],
                           after: Sequence[DeleteFileRef]) -> pa.Array:
        """Positions deleted under exactly one of the position delete sets."""
        def positions(refs: Sequence[DeleteFileRef]) -> pa.Array:
            mask = self.loader.deletion_mask([d.file for d in refs], path)
            return mask.positions if mask is not None else pa.array([], pa.int64())

        old, new = positions(before), positions(after)
        only_old = old.filter(pc.invert(pc.is_in(old, value_set=new)))
        only_new = new.filter(pc.invert(pc.is_in(new, value_set=old)))
        changed = pa.concat_arrays([only_old, only_new])
        return pc.take(changed, pc.sort_indices(changed))


def _full(mask: pa.BooleanArray | None, n: int) -> pa.BooleanArray:
    return mask if mask is not None else pa.repeat(pa.scalar(True), n)
