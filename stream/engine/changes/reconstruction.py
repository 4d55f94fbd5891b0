"""Change tasks -> change rows: what one commit inserted, deleted and updated.

The planner (`meltwater.planner.changes.incremental`) describes each commit of a range as a
`CommitChanges` of tasks in Iceberg's vocabulary (`meltwater.planner.changes.change_tasks`); this
module reads the files those tasks name and produces Arrow batches of the table columns
plus the change metadata columns (`change_schema`). The pipeline per commit:

1. **rows that left**, first: `DeletedDataFileTask` -> the removed file's rows that were
   live before (file minus `existing_deletes`); `DeletedRowsTask` -> the rows of an older
   file live under `deletes_before` and not under `deletes_after`, read in one pass with a
   live mask per set (`read_with_delete_sets`), and only the row groups where a deleted
   position changed when only position deletes / DVs changed (a new DV replacing an old
   one: its DELETEs are the new positions minus the old);
2. **rows that arrived**: `AddedRowsTask` -> the added file minus its same-commit position
   deletes and DVs;
3. **carry-over removal** and **update pairing** (`meltwater.stream.engine.changes.updates`),
   which need the whole commit's changes at once, so only then is the commit held in memory;
4. the **metadata columns**, in Iceberg's or Delta's change type names.

Some DELETEs come from delete files instead of data files: position deletes' `row`
payloads (the payload fast path) and, with `equality_deletes="trust-payload"`, equality
delete files as written (`meltwater.stream.engine.changes.delete_payloads`).

Worked example, Iceberg's `DeletedRowsScanTask` javadoc case: S1 adds F1 with rows r1..r3,
S2 adds position delete D1 of r1, S3 adds D2 of r2. S3's one task,
`DeletedRowsTask(F1, deletes_before=(D1,), deletes_after=(D1, D2), added_deletes=(D2,))`,
yields DELETE r2: r1 was gone already, r3 is live before and after.

Memory: a commit whose changes need comparing (both rows that left and rows that arrived,
with carry-over removal or update pairing on) is held whole, so it is bounded by the
commit's change size; every other commit streams batch by batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import (
    AddedRowsTask,
    ChangeCommit,
    ChangeTask,
    CommitChanges,
    DeletedDataFileTask,
    DeletedRowsTask,
    EqualityChange,
    EqualityDeletedRowsTask,
)
from meltwater.planner.expressions.tree import TRUE, AlwaysTrue, Expression
from meltwater.planner.scans.tasks import (
    DataFileRef,
    DeleteFileRef,
    EqualityDeleteSet,
    FileScanTask,
)
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.reserved_field_ids import (
    CHANGE_ORDINAL_ID,
    CHANGE_TYPE_ID,
    COMMIT_SNAPSHOT_ID_ID,
)
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.changes.change_schema import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    CHANGE_TYPE_NAMES,
    COMMIT_SEQUENCE_NUMBER,
    COMMIT_SNAPSHOT_ID,
    COMMIT_TIMESTAMP,
    DELETE,
    INSERT,
    ChangeOptions,
    ChangeTypeNames,
    EqualityDeletes,
)
from meltwater.stream.engine.changes.delete_payloads import DeletePayloads, delete_keys
from meltwater.stream.engine.changes.equality_changes import (
    EqualityRows,
    KeyShare,
    positional_deaths,
)
from meltwater.stream.engine.changes.key_images import KeyImages
from meltwater.stream.engine.changes.updates import (
    deletes_first,
    net_changes,
    pair_updates,
    remove_carryover,
)
from meltwater.stream.engine.decode.arrow_constants import constant_array
from meltwater.stream.engine.decode.arrow_filter import to_arrow_filter
from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY, to_arrow_schema
from meltwater.stream.engine.decode.remote_reads import each_in_order
from meltwater.stream.engine.deletes.key_columns import key_names, key_table
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.scans.reader import (
    DEFAULT_BATCH_SIZE,
    read_task,
    read_with_delete_sets,
)


def _meta_field(name: str, type_: pa.DataType, fid: int | None) -> pa.Field:
    metadata = {FIELD_ID_KEY: str(fid).encode()} if fid is not None else None
    return pa.field(name, type_, nullable=False, metadata=metadata)


METADATA_FIELDS = (
    _meta_field(CHANGE_TYPE, pa.string(), CHANGE_TYPE_ID),
    _meta_field(CHANGE_ORDINAL, pa.int32(), CHANGE_ORDINAL_ID),
    _meta_field(COMMIT_SNAPSHOT_ID, pa.int64(), COMMIT_SNAPSHOT_ID_ID),
    _meta_field(COMMIT_SEQUENCE_NUMBER, pa.int64(), None),
    _meta_field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), None),
)


def change_schema(projection: Schema) -> pa.Schema:
    """The Arrow schema of change batches: the projected table columns, then the change
    metadata columns (with Iceberg's reserved field ids where it has them)."""
    return pa.schema(list(to_arrow_schema(projection)) + list(METADATA_FIELDS))


# -- the public entry points ---------------------------------------------------------------


def reconstruct(commit: CommitChanges, projection: Schema, io: FileIO, *,
                options: ChangeOptions | None = None, deletes: DeleteLoader | None = None,
                batch_size: int = DEFAULT_BATCH_SIZE, row_filter: Expression = TRUE,
                share: tuple[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """The change rows of one commit, as batches of `change_schema(projection)`.

    `projection` is the schema of the range's end snapshot (or its selected columns);
    older files are projected by field id. `row_filter`, bound to `projection`, keeps the
    changes whose row matches it (applied before carry-over removal and pairing, so an
    update moving a row out of the filter is seen as a DELETE). Within a commit, DELETE
    and UPDATE_BEFORE rows come before INSERT and UPDATE_AFTER rows. Pass one
    `DeleteLoader` for a whole range so delete files are read once. With `share`, only
    the rows of that share of the commit's keys (`CommitPart.key_shares`).
    """
    options = options or ChangeOptions()
    run = _CommitRun(commit, projection, io, options,
                     deletes if deletes is not None else DeleteLoader(io), batch_size,
                     row_filter, share)
    yield from run.batches()


def commit_reader(commit: CommitChanges, projection: Schema, io: FileIO, *,
                  options: ChangeOptions, deletes: DeleteLoader,
                  batch_size: int = DEFAULT_BATCH_SIZE) -> _CommitRun:
    """The reader `reconstruct` uses, for callers that compare rows of several task sets
    of one commit themselves (`raw_table`, then `compared`): the parts of a split commit
    (`meltwater.stream.engine.changes.held_changes`)."""
    return _CommitRun(commit, projection, io, options, deletes, batch_size, TRUE)


def reconstruct_range(commits: Iterable[CommitChanges], projection: Schema, io: FileIO, *,
                      options: ChangeOptions | None = None,
                      deletes: DeleteLoader | None = None,
                      batch_size: int = DEFAULT_BATCH_SIZE,
                      row_filter: Expression = TRUE) -> Iterator[pa.RecordBatch]:
    """The change rows of a range's commits (oldest first), or with `options.net` their
    net effect (`meltwater.stream.engine.changes.updates.net_changes`, holding the range's
    changes in memory). Per-commit changes stream one commit at a time."""
    options = options or ChangeOptions()
    loader = deletes if deletes is not None else DeleteLoader(io)
    if not options.net:
        for commit in commits:
            yield from reconstruct(commit, projection, io, options=options, deletes=loader,
                                   batch_size=batch_size, row_filter=row_filter)
        return
    # Pairing happens on the net rows, not per commit; carry-over removal per commit only
    # shrinks what net changes must hold (it cancels anyway).
    per_commit = dataclasses.replace(options, compute_updates=False, net=False)
    batches = (b for commit in commits
               for b in reconstruct(commit, projection, io, options=per_commit,
                                    deletes=loader, batch_size=batch_size,
                                    row_filter=row_filter))
    net = net_changes(batches, identifier_field_ids=options.identifier_field_ids,
                      compute_updates=options.compute_updates,
                      change_type_names=options.change_type_names,
                      schema=change_schema(projection))
    yield from net.to_batches(max_chunksize=batch_size)


def reconstruct_net(net: CommitChanges, projection: Schema, io: FileIO, *,
                    options: ChangeOptions, deletes: DeleteLoader | None = None,
                    batch_size: int = DEFAULT_BATCH_SIZE,
                    row_filter: Expression = TRUE) -> Iterator[pa.RecordBatch]:
    """The net effect of a range planned as one set of tasks comparing the table before
    and after it (`IncrementalPlanner.plan_net`): its rows, then collapsed
    (`net_changes`). Each net row carries the commit that made its change: the one that
    added or removed its file, or whose delete removed it (among rows of equal content,
    the latest)."""
    per_row = dataclasses.replace(options, compute_updates=False, net=False)
    loader = deletes if deletes is not None else DeleteLoader(io)
    batches = list(_CommitRun(net, projection, io, per_row, loader, batch_size,
                              row_filter).batches())
    schema = change_schema(projection)
    if batches:  # in the order of their commits, as `net_changes` wants them
        table = pa.Table.from_batches(batches, schema=schema)
        order = pc.sort_indices(table.column(CHANGE_ORDINAL))
        batches = table.take(order).combine_chunks().to_batches()
    net_rows = net_changes(batches, identifier_field_ids=options.identifier_field_ids,
                           compute_updates=options.compute_updates,
                           change_type_names=options.change_type_names, schema=schema)
    yield from net_rows.to_batches(max_chunksize=batch_size)


# -- one commit ------------------------------------------------------------------------------


class _CommitRun:
    """The state of reconstructing one commit: options, caches, and the trusted files."""

    def __init__(self, commit: CommitChanges, projection: Schema, io: FileIO,
                 options: ChangeOptions, loader: DeleteLoader, batch_size: int,
                 row_filter: Expression, share: tuple[int, int] | None = None) -> None:
        self.commit = commit
        self.projection = projection
        self.io = io
        self.options = options
        self.loader = loader
        self.batch_size = batch_size
        self.schema = change_schema(projection)
        self.table_schema = to_arrow_schema(projection)
        self.filter = (None if isinstance(row_filter, AlwaysTrue)
                       else to_arrow_filter(row_filter, projection))
        self.payloads = DeletePayloads(projection, io, loader, batch_size)
        # equality delete files whose rows are emitted as they are: only with trust-payload
        self.trusted = ({} if options.equality_deletes != EqualityDeletes.TRUST_PAYLOAD
                        else self.payloads.trusted_files(commit))
        self._equality: EqualityRows | None = None
        self.share = self._key_share(share)
        # before-images=key: departing rows carry their key only, and are read so
        self.key_images = KeyImages.of(projection, options, row_filter,
                                       self.share.key_set.field_ids if self.share else ())
        if self.key_images is not None:
            self.table_schema = self.key_images.table_schema
            self.schema = pa.schema(list(self.table_schema) + list(METADATA_FIELDS))
        # net changes of a range (`CommitChanges.spanned`): each row tagged with the
        # ordinal of the commit that made it, for its metadata columns
        self.net = bool(commit.spanned)
        spanned = commit.spanned
        self._ordinals = (pa.array([c.sequence_number for c in spanned], pa.int64()),
                          pa.array([c.ordinal for c in spanned], pa.int32()))
        self._spanned_columns = (
            pa.array([c.ordinal for c in spanned], pa.int32()),
            pa.array([c.snapshot_id for c in spanned], pa.int64()),
            pa.array([c.sequence_number for c in spanned], pa.int64()),
            pa.array([c.timestamp_ms * 1000 for c in spanned], pa.timestamp("us", tz="UTC")))

    # -- orchestration ---------------------------------------------------------------------

    def batches(self) -> Iterator[pa.RecordBatch]:
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
        for change_type, batch in self._raw(leaving, arriving):
            yield self._finish(batch, change_type)

    def _raw(self, leaving: Sequence[ChangeTask], arriving: list[AddedRowsTask]
             ) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(change type, table-column batch) for every task: rows that left, then rows
        that arrived (a DeletedRowsTask's rare INSERTs are held back until the DELETEs are
        out, so the order rule holds even when streaming). For net changes each batch
        also carries the ordinal of the commit each row's change belongs to."""
        undeleted: list[pa.RecordBatch] = []
        last = self.commit.commit.ordinal
        for path in sorted(self.trusted):
            yield from self._filtered(DELETE, (self._tagged(b, last) for b in
                                               self.payloads.trusted_rows(self.trusted[path])))
        for task in leaving:
            constant = task.commit.ordinal
            for change_type, batch, seqs in self._task_changes(task):
                batch = self._tagged(batch, constant if seqs is None else seqs)
                if change_type == INSERT:
                    undeleted.append(batch)
                else:
                    yield from self._filtered(change_type, [batch])
        for batch in undeleted:
            yield from self._filtered(INSERT, [batch])
        def arrived(task: AddedRowsTask) -> Iterator[pa.RecordBatch]:
            return (self._tagged(b, task.commit.ordinal)
                    for b in self._read(task.data_file, task.sequence_number, task.deletes,
                                        task.equality))

        if self.net:  # a range's added files, held anyway: a few decoded at a time
            for batches in each_in_order(arriving, lambda task: list(arrived(task))):
                yield from self._filtered(INSERT, batches)
            return
        for task in arriving:  # one batch at a time, however large the file
            yield from self._filtered(INSERT, arrived(task))

    def _tagged(self, batch: pa.RecordBatch, commits: int | pa.Array) -> pa.RecordBatch:
        """Net changes: the batch with each row's commit ordinal (`commits` an ordinal, or
        per row the sequence number of the delete that removed it, null for the range's
        last commit); otherwise the batch as it is."""
        if not self.net:
            return batch
        if isinstance(commits, int):
            ordinals = constant_array(pa.scalar(commits, pa.int32()), batch.num_rows)
        else:
            seqs, found = self._ordinals
            ordinals = pc.fill_null(pc.take(found, pc.index_in(commits, value_set=seqs)),
                                    pa.scalar(self.commit.commit.ordinal, pa.int32()))
        return batch.append_column(pa.field(_COMMIT_TAG, pa.int32(), nullable=False),
                                   ordinals)

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
                yield self._finish(batch.select(self.table_schema.names),
                                   batch.column(CHANGE_TYPE))

    def _finish(self, batch: pa.RecordBatch, change_type: str | pa.Array) -> pa.RecordBatch:
        """Append the metadata columns, change types in the chosen vocabulary."""
        n = batch.num_rows
        names = CHANGE_TYPE_NAMES[self.options.change_type_names]
        if isinstance(change_type, str):
            types = constant_array(pa.scalar(names[change_type]), n)
        elif self.options.change_type_names == ChangeTypeNames.ICEBERG:
            types = change_type
        else:
            known = list(names)
            index = pc.index_in(change_type, value_set=pa.array(known))
            types = pc.take(pa.array([names[k] for k in known]), index)
        if self.net:  # each row's commit, by its ordinal among the range's
            ordinals = batch.column(_COMMIT_TAG)
            meta = [pc.take(column, ordinals) for column in self._spanned_columns]
            columns = [*batch.drop_columns([_COMMIT_TAG]).columns, types, *meta]
            return pa.RecordBatch.from_arrays(columns, schema=self.schema)
        commit: ChangeCommit = self.commit.commit
        columns = [
            *batch.columns, types,
            constant_array(pa.scalar(commit.ordinal, pa.int32()), n),
            constant_array(pa.scalar(commit.snapshot_id, pa.int64()), n),
            constant_array(pa.scalar(commit.sequence_number, pa.int64()), n),
            constant_array(pa.scalar(commit.timestamp_ms * 1000, pa.timestamp("us", tz="UTC")), n),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    # -- the three task kinds ------------------------------------------------------------

    def _read(self, data_file: DataFile, sequence_number: int,
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

    def _task_changes(self, task: ChangeTask
                      ) -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
        """(change type, rows, for net changes each DELETE's removing sequence number)."""
        if isinstance(task, DeletedDataFileTask):
            for batch in self._read(task.data_file, task.sequence_number,
                                    task.existing_deletes, task.equality, departing=True):
                yield DELETE, batch, None
        elif isinstance(task, DeletedRowsTask):
            yield from self._deleted_rows(task)
        elif isinstance(task, EqualityDeletedRowsTask):
            yield from self._equality_rows(task.equality).changes(task, deaths=self.net)
        else:
            raise TypeError(f"not a change task: {task!r}")

    def _equality_rows(self, change: EqualityChange) -> EqualityRows:
        """The commit's equality change, ready to find rows by key (one per commit)."""
        if self._equality is None or self._equality.change is not change:
            trusted = [r for r in change.added if r.file.file_path in self.trusted]
            images = self.key_images
            self._equality = EqualityRows(
                change, self.projection, self.io, self.loader, self.batch_size,
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
            rows = self._equality_rows(change)
            matched = rows.matching(rows.key_columns(ref))
            interest = pc.unique(pa.concat_arrays([interest, matched]))
            interest = interest.take(pc.array_sort_indices(interest))
            rows.lookups()  # the lookup after the commit, extended from the one before
        sets: list[Sequence[DeleteFileRef]] = [before, after]
        equality: list[EqualityDeleteSet | None] = (
            [None, None] if change is None else [change.before, change.after])
        trusted = self._trusted_set(change) if changed else None
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
            return self._equality_rows(change).first_deleted(ref, positions, new_positional)
        return positional_deaths(self.loader, ref, positions, new_positional)

    def _trusted_set(self, change: EqualityChange | None) -> EqualityDeleteSet | None:
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


_COMMIT_TAG = "__meltwater_commit"


def _full(mask: pa.BooleanArray | None, n: int) -> pa.BooleanArray:
    return mask if mask is not None else pa.repeat(pa.scalar(True), n)


def metadata_fields() -> list[pa.Field]:
    """The change metadata fields, in output order (a fresh list for callers to extend)."""
    return list(METADATA_FIELDS)
