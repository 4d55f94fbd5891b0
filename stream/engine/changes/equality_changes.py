"""The rows a commit's equality deletes change: found by their keys, read one by one.

An equality delete names keys, not rows, and reaches every older data file of its scope.
Reading each of those files whole under the deletes live before the commit and after it
costs one commit the table, and, with a backlog of equality deletes (what upsert jobs
leave), the backlog for every file. Here a commit costs its keys:

1. the keys of the equality delete files the commit added (and removed), one set per
   equality field ids;
2. each candidate data file's key columns (read alone and kept, `key_columns`) are matched
   against them: a row whose key no changed delete holds cannot change;
3. for the matching rows only, whether each was live before the commit and is after it:
   the position deletes and DVs live before (the same after, for a candidate), and the
   equality deletes live before and after, looked up by key and the file's data sequence
   number (`equality_lookup`; the lookup after the commit extends the one before it by
   what the commit added, and becomes the next commit's);
4. the rows whose liveness changed are read whole, from the row groups holding them only
   (`read_rows_at`): DELETEs, or INSERTs for a row a removed delete had deleted. With key
   images (`key_images`) a DELETE is its key, which step 2 found it by: nothing is read.

Worked example: F1 (sequence 1) holds ids 1..4; E2 (sequence 2) deletes id 2; the commit
at sequence 3 adds E3 deleting ids 2 and 3. The changed keys are {2, 3}; F1's key column
matches positions 1 and 2; id 2 was already deleted by E2 (2 > 1), so only id 3 (position
2) was live before and is not after: one DELETE, read from F1's row group holding
position 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import EqualityChange, EqualityDeletedRowsTask
from meltwater.planner.scans.tasks import DataFileRef, DeleteFileRef
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import DELETE, INSERT
from meltwater.stream.engine.changes.changed_keys import aliased, key_sets, positional_deaths
from meltwater.stream.engine.changes.equality_liveness import EqualityLiveness
from meltwater.stream.engine.changes.indexed_keys import (
    ADD_EVERY_ROWS,
    BackgroundAdds,
    indexed_keys,
)
from meltwater.stream.engine.changes.key_shares import KeyShare
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE, gathered
from meltwater.stream.engine.decode.remote_reads import each_in_order
from meltwater.stream.engine.deletes.equality_lookup import EqualityLookup
from meltwater.stream.engine.deletes.key_columns import key_names, key_table
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.scans.reader import read_rows_at
from meltwater.stream.errors import UnreadableFileError


@dataclass(frozen=True)
class FileChanges:
    """A reached file some row of which changed: the positions of the rows that left and
    of those that arrived, and the key columns of the rows that left, row for row (what
    the lookup found them with: what `EqualityRows.departing_rows` takes their key columns from)."""

    ref: DataFileRef
    leaving: pa.Array
    arriving: pa.Array
    leaving_keys: pa.Table


class EqualityRows:
    """One commit's equality change, ready to find the rows it changed in data files.
    `scope` is what the caller reads (one commit, or commits after commits): it decides
    the lookups liveness is judged with (`equality_liveness`)."""

    def __init__(self, change: EqualityChange, projection: Schema, io: FileIO,
                 loader: DeleteLoader, scope: ReadScope, batch_size: int = DEFAULT_BATCH_SIZE,
                 excluded: Sequence[DeleteFileRef] = (), share: KeyShare | None = None,
                 departing: tuple[Schema, Callable[[pa.RecordBatch], pa.RecordBatch]]
                 | None = None) -> None:
        self.change = change
        # (projection, widening) that DELETE rows are read with (`key_images`); None: whole
        self.departing = departing
        self.projection = projection
        self.io = io
        self.loader = loader
        self.batch_size = batch_size
        # trusted deletes (`trust-payload`) emit their own rows: the rows they delete are
        # not looked for here, and count as deleted after the commit either way
        self.excluded = {ref.key for ref in excluded}
        changed = [r for r in change.added + change.removed if r.key not in self.excluded]
        # every key a delete live before or after keys on: each decides liveness
        everything = [*change.added, *change.removed]
        for equality in (change.before, change.after):
            if equality is not None:
                everything += [*equality.global_refs, *equality.scoped_refs]
        self.key_ids = sorted({fid for ref in everything for fid in ref.file.equality_ids or ()})
        self.names = key_names(projection, self.key_ids)
        self._sets = key_sets(changed, loader)
        self.share = share
        self.liveness = EqualityLiveness(change, loader, self.names, self._sets, scope)

    # -- keys -----------------------------------------------------------------------------

    def key_columns(self, ref: DataFileRef) -> pa.Table:
        """The data file's key columns (cached)."""
        table = key_table(ref.file, self.projection, self.key_ids, self.io, self.loader)
        self.liveness.learn_types(table)
        return table

    def matching(self, keys: pa.Table) -> pa.Array:
        """Positions of the rows whose key a changed delete holds (sorted; of the share's
        keys only, when reading a share)."""
        batch = aliased(keys, self.names)
        hit = None
        for key_set in self._sets:
            found = key_set.matches(batch)
            hit = found if hit is None else pc.or_(hit, found)
        if hit is None:
            return pa.array([], pa.int64())
        positions = pc.indices_nonzero(hit).cast(pa.int64())
        if self.share is not None and len(positions):  # the share's keys among the few hits
            positions = positions.filter(self.share.keeps(batch.take(positions)))
        return positions

    # -- liveness -------------------------------------------------------------------------

    def changed_rows(self, ref: DataFileRef, positions: pa.Array, keys_at: pa.Table,
                     positional_before: pa.Array | None, positional_after: pa.Array | None
                     ) -> FileChanges:
        """Of the rows at `positions` (rows `matching` or the key index found; `keys_at`
        their key columns, row for row), those live before and not after the commit, and
        those live after and not before. `positional_*` are the positions the position
        deletes and DVs delete, before and after."""
        if len(positions) == 0:
            empty = pa.array([], pa.int64())
            return FileChanges(ref, empty, empty, keys_at.slice(0, 0))
        batch = aliased(keys_at, self.names)
        before, after = self.liveness.for_changed_rows()
        live_before = self._live(batch, ref, positions, before, positional_before)
        live_after = self._live(batch, ref, positions, after, positional_after)
        leaving = pc.and_not(live_before, live_after)
        arriving = pc.and_not(live_after, live_before)
        if self.excluded:  # what trusted deletes delete, their own rows say
            trusted = self._trusted(batch)
            leaving, arriving = pc.and_not(leaving, trusted), pc.and_not(arriving, trusted)
        return FileChanges(ref, positions.filter(leaving), positions.filter(arriving),
                           keys_at.filter(leaving))

    def _live(self, batch: pa.RecordBatch, ref: DataFileRef, positions: pa.Array,
              lookup: EqualityLookup | None, deleted_positions: pa.Array | None
              ) -> pa.BooleanArray:
        live = pa.repeat(pa.scalar(True), len(positions))
        if deleted_positions is not None and len(deleted_positions):
            live = pc.invert(pc.is_in(positions, value_set=deleted_positions))
        if lookup is not None:
            dead = lookup.deleted(batch, ref.file, ref.sequence_number)
            if dead is not None:
                live = pc.and_not(live, dead)
        return live

    def _trusted(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """Rows a trusted (excluded) delete of the commit holds the key of."""
        trusted = [r for r in self.change.added if r.key in self.excluded]
        hit = pa.repeat(pa.scalar(False), batch.num_rows)
        for key_set in key_sets(trusted, self.loader):
            hit = pc.or_(hit, key_set.matches(batch))
        return hit

    def first_deleted(self, ref: DataFileRef, positions: pa.Array,
                      new_positional: Sequence[DeleteFileRef] = ()) -> pa.Array:
        """For rows the commit (a range, for net changes) deleted, at `positions`: the
        sequence number of the delete that removed each, the least of the equality deletes
        live after it (`EqualityLookup.first_after`) and the position deletes and DVs in
        `new_positional` (null: neither, as when the file itself went)."""
        seqs = pa.nulls(len(positions), pa.int64())
        if len(positions) and self.key_ids and self.change.after is not None:
            keys = self.key_columns(ref)
            _, after = self.liveness.whole()
            if after is not None:
                first = after.first_after(aliased(keys.take(positions), self.names),
                                          ref.file, ref.sequence_number)
                if first is not None:
                    seqs = first
        return positional_deaths(self.loader, ref, positions, new_positional, seqs)

    # -- the task ---------------------------------------------------------------------------

    def changes(self, task: EqualityDeletedRowsTask, *, deaths: bool = False
                ) -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
        """(change type, rows, each DELETE's `first_deleted` sequence number when `deaths`)
        of the task's candidates: every DELETE, then every INSERT. Key columns and changed
        rows are decoded a few files at a time (`remote_reads.each_in_order`)."""
        if not self._sets:
            return  # every changed delete is trusted: its own rows are the DELETEs
        reached = [ref for ref in task.candidates if self.change.changed_for(ref)]
        if not reached:
            return
        changed = self._resolved(task, reached)

        leaving = [c for c in changed if len(c.leaving)]
        arriving = [c for c in changed if len(c.arriving)]
        yield from self._each(DELETE, leaving, deaths=deaths)
        yield from self._each(INSERT, arriving, deaths=deaths)

    def _each(self, change_type: str, wanted: list[FileChanges], *, deaths: bool
              ) -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
        """The rows of one change type of the files in `wanted`, a few files decoded at a
        time, gathered into batches of up to `batch_size` rows (a commit of 1,000 keys
        over 1,000 files is a batch, not 1,000 of one row each)."""
        departing = change_type == DELETE

        def positions_of(changes: FileChanges) -> pa.Array:
            return changes.leaving if departing else changes.arriving

        def rows_of(changes: FileChanges) -> Iterator[pa.RecordBatch]:
            return (self.departing_rows(changes) if departing
                    else self.rows(changes.ref, changes.arriving))

        def read(changes: FileChanges) -> list[pa.RecordBatch] | None:
            """A file's few changed rows, read ahead; None for many: read where taken,
            a batch at a time."""
            return (list(rows_of(changes)) if len(positions_of(changes)) <= self.batch_size
                    else None)

        def batches() -> Iterator[tuple[str, pa.RecordBatch, pa.Array | None]]:
            for changes, read_ahead in zip(wanted, each_in_order(wanted, read), strict=True):
                ref, positions = changes.ref, positions_of(changes)
                rows = read_ahead if read_ahead is not None else rows_of(changes)
                seqs = self.first_deleted(ref, positions) if deaths and departing else None
                start = 0
                for batch in rows:
                    yield (change_type, batch,
                           None if seqs is None else seqs.slice(start, batch.num_rows))
                    start += batch.num_rows

        yield from gathered(batches(), self.batch_size)

    def _resolved(self, task: EqualityDeletedRowsTask, reached: list[DataFileRef]
                  ) -> list[FileChanges]:
        """(file, positions leaving, positions arriving) of each reached file some row of
        which changed, in `reached`'s order: found through the key index where the reader
        has one that serves the commit (`indexed_keys`), by the files' key columns
        otherwise (and for the files the index does not cover, then added to it)."""
        indexed = indexed_keys(self.loader, self.projection, self.key_ids, self.names,
                               self._sets)
        coverage = None
        if indexed is not None:
            self.liveness.learn_types(indexed.empty_keys())
            coverage = indexed.covering(reached)
        else:
            self.key_columns(reached[0])  # learns the key types the lookups are built with
        self.liveness.for_changed_rows()
        def resolve(ref: DataFileRef) -> tuple[FileChanges | None, pa.RecordBatch | None]:
            """The file's changed positions (searched in the index, or its key columns
            read), and its new run when the index lacked it: in the reading threads."""
            found = (None if indexed is None or coverage is None
                     else indexed.find(coverage, ref))
            run = None
            if found is not None and indexed is not None:
                positions, keys_at = found[0], indexed.keys_at(found[1])
                if self.share is not None and len(positions):
                    kept = self.share.keeps(aliased(keys_at, self.names))
                    positions, keys_at = positions.filter(kept), keys_at.filter(kept)
            else:
                keys = self.key_columns(ref)
                run = None if indexed is None else indexed.run_of(keys)
                positions = self.matching(keys)
                keys_at = keys.take(positions)
            if len(positions) == 0:
                return None, run
            deleted = self._positional(task, ref)
            return self.changed_rows(ref, positions, keys_at, deleted, deleted), run

        changed: list[FileChanges] = []
        runs: dict[str, tuple[DataFileRef, pa.RecordBatch]] = {}
        pending = 0  # the rows of `runs`
        # results are a few positions, read all ahead; while runs are built (12 bytes a
        # key), a thread's worth ahead, so what waits for a segment stays bounded
        ahead = len(reached) if coverage is None or not coverage.missing else None
        adds = None if indexed is None else BackgroundAdds(indexed)
        try:
            for ref, (found, run) in zip(reached,
                                         each_in_order(reached, resolve, ahead=ahead),
                                         strict=True):
                if found is not None:
                    changed.append(found)
                if run is not None and adds is not None:
                    runs[ref.file.file_path] = (ref, run)
                    pending += run.num_rows
                    if pending >= ADD_EVERY_ROWS:
                        adds.add(runs, reached)  # a segment at a time, written behind
                        runs, pending = {}, 0
            if runs and adds is not None:
                adds.add(runs, reached)
        finally:
            if adds is not None:
                adds.settle()
        return changed

    def _positional(self, task: EqualityDeletedRowsTask, ref: DataFileRef) -> pa.Array | None:
        """The positions the position deletes and DVs live before the commit delete."""
        refs = task.positional_for(ref)
        mask = self.loader.deletion_mask([r.file for r in refs], ref.file.file_path)
        return None if mask is None else mask.positions

    def rows(self, ref: DataFileRef, positions: pa.Array) -> Iterator[pa.RecordBatch]:
        """The projected rows at `positions` of a data file."""
        return read_rows_at(ref.file, self.projection, self.io, positions,
                            sequence_number=ref.sequence_number, deletes=self.loader,
                            batch_size=self.batch_size)

    def departing_rows(self, changes: FileChanges) -> Iterator[pa.RecordBatch]:
        """A file's DELETE rows, as `departing` in the constructor says they are read. Their
        key columns are the keys they were found by (`leaving_keys`), so only the other
        columns are read at their positions: a key column is decoded once, by the lookup
        or the index, not again for the rows; with key images nothing is read at all."""
        projection, widen = self.departing or (self.projection, None)
        schema = to_arrow_schema(projection)
        keys = changes.leaving_keys
        known = {f.name for f in schema if keys.schema.get_field_index(f.name) >= 0
                 and keys.schema.field(f.name).type == f.type}
        rest = tuple(f for f in projection.fields if f.name not in known)
        total = len(changes.leaving)

        def with_keys(start: int, count: int, other: pa.RecordBatch | None) -> pa.RecordBatch:
            """Rows [start, start + count) of the file's departing rows: the key columns
            from `keys`, the others from `other` (read for them)."""
            columns = [other.column(f.name) if other is not None and f.name not in known
                       else keys.column(f.name).slice(start, count).combine_chunks()
                       for f in schema]
            batch = pa.RecordBatch.from_arrays(columns, schema=schema)
            return batch if widen is None else widen(batch)

        if not rest:  # every column is a key column: nothing to read
            for start in range(0, total, self.batch_size):
                yield with_keys(start, min(self.batch_size, total - start), None)
            return
        start = 0
        for other in read_rows_at(changes.ref.file, Schema(rest, projection.schema_id,
                                                           projection.identifier_field_ids),
                                  self.io, changes.leaving,
                                  sequence_number=changes.ref.sequence_number,
                                  deletes=self.loader, batch_size=self.batch_size):
            yield with_keys(start, other.num_rows, other)
            start += other.num_rows
        if start != total:
            raise UnreadableFileError(f"{changes.ref.file.file_path}: holds {start} of the "
                                      f"{total} rows its key column has at the positions read")
