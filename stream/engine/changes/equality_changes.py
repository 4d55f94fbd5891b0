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
   (`read_rows_at`): DELETEs, or INSERTs for a row a removed delete had deleted.

Worked example: F1 (sequence 1) holds ids 1..4; E2 (sequence 2) deletes id 2; the commit
at sequence 3 adds E3 deleting ids 2 and 3. The changed keys are {2, 3}; F1's key column
matches positions 1 and 2; id 2 was already deleted by E2 (2 > 1), so only id 3 (position
2) was live before and is not after: one DELETE, read from F1's row group holding
position 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import EqualityChange, EqualityDeletedRowsTask
from meltwater.planner.scans.tasks import DataFileRef, DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.changes.change_schema import DELETE, INSERT
from meltwater.stream.engine.decode.remote_reads import each_in_order
from meltwater.stream.engine.deletes.equality_keys import EqualityKeySet, common_type
from meltwater.stream.engine.deletes.equality_lookup import (
    EqualityLookup,
    equality_lookup,
    extended_lookup,
    for_set,
    is_known,
    restricted_lookup,
)
from meltwater.stream.engine.deletes.key_columns import key_names, key_table
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.scans.reader import DEFAULT_BATCH_SIZE, read_rows_at


class KeyShare:
    """One share of a commit's changed keys, for reading an upsert commit on several
    executors (`meltwater.planner.changes.micro_batch.CommitPart.key_shares`).

    The expensive part of an upsert commit is reading whole the rows its keys had: random
    keys land in every row group of every older file, so shares of keys chosen by rank
    would each decode every file. Keys are shared by where their rows are instead: the
    candidate files are dealt to the shares by size (largest first, each to the share
    with the fewest bytes so far), and a key belongs to the share of the largest
    candidate holding it (ties: the earlier candidate), so each big file is decoded by
    one share. A key no candidate holds (an upsert inserting a new id) goes by its code
    modulo the shares; rows of keys no changed delete holds, to share 0. Every reader
    sees the same candidates and key columns, so each key's rows, deleted and added,
    are in one share, where carry-over removal and update pairing compare them."""

    def __init__(self, change: EqualityChange, loader: DeleteLoader, names: dict[int, str],
                 index: int, count: int, candidates: Sequence[DataFileRef],
                 key_columns: Callable[[DataFileRef], pa.Table]) -> None:
        refs = change.added + change.removed
        (key_set,) = _key_sets(refs, loader)  # shareable commits key on one set of ids
        self.key_set, self.names = key_set, names
        self.index, self.count = index, count
        self._candidates = [ref for ref in candidates if change.changed_for(ref)]
        self._key_columns = key_columns
        self._owners: tuple[pa.Array, pa.Array] | None = None

    def _owned(self) -> tuple[pa.Array, pa.Array]:
        """(key codes some candidate holds, the share each belongs to), by the rule above."""
        if self._owners is not None:
            return self._owners
        order = sorted(range(len(self._candidates)),
                       key=lambda i: (-self._candidates[i].file.file_size_in_bytes, i))
        loads = [0] * self.count
        share_of: dict[int, int] = {}
        for i in order:
            share = min(range(self.count), key=lambda s: (loads[s], s))
            share_of[i] = share
            loads[share] += self._candidates[i].file.file_size_in_bytes
        rank = {i: r for r, i in enumerate(order)}
        found = each_in_order(self._candidates, self._key_columns)
        codes, ranks = [], []
        for i, keys in enumerate(found):
            batch = _aliased(keys, self.names)
            matched = batch.filter(self.key_set.matches(batch))
            held = pc.unique(pc.drop_null(self.key_set.codes_of(matched)))
            codes.append(held)
            ranks.append(pa.array([rank[i]] * len(held), pa.int64()))
        if not codes:
            self._owners = (pa.array([], pa.int64()), pa.array([], pa.int64()))
            return self._owners
        first = (pa.table({"code": pa.concat_arrays(codes), "rank": pa.concat_arrays(ranks)})
                 .group_by("code", use_threads=False).aggregate([("rank", "min")]))
        shares = pa.array([share_of[order[r]] for r in first["rank_min"].to_pylist()],
                          pa.int64())
        self._owners = (first["code"].combine_chunks(), shares)
        return self._owners

    def keeps(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """Which rows of a batch (its key columns named as `names` says) are the share's."""
        codes = self.key_set.codes_of(_aliased(pa.Table.from_batches([batch]), self.names))
        owned, shares = self._owned()
        owner = pc.take(shares, pc.index_in(codes, value_set=owned))
        owner = pc.coalesce(owner, _modulo(codes, self.count))
        mine = pc.equal(owner, pa.scalar(self.index, pa.int64()))
        if self.index == 0:
            mine = pc.or_kleene(mine, pc.is_null(codes))
        return pc.fill_null(mine, False)


class EqualityRows:
    """One commit's equality change, ready to find the rows it changed in data files."""

    def __init__(self, change: EqualityChange, projection: Schema, io: FileIO,
                 loader: DeleteLoader, batch_size: int = DEFAULT_BATCH_SIZE,
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
        self._sets = _key_sets(changed, loader)
        self.share = share
        self._lookups: tuple[EqualityLookup | None, EqualityLookup | None] | None = None
        self._liveness: tuple[EqualityLookup | None, EqualityLookup | None] | None = None
        self._types: dict[int, pa.DataType] | None = None

    # -- keys -----------------------------------------------------------------------------

    def key_columns(self, ref: DataFileRef) -> pa.Table:
        """The data file's key columns (cached)."""
        table = key_table(ref.file, self.projection, self.key_ids, self.io, self.loader)
        if self._types is None:
            self._types = {fid: table.schema.field(self.names[fid]).type
                           for fid in self.key_ids}
        return table

    def matching(self, keys: pa.Table) -> pa.Array:
        """Positions of the rows whose key a changed delete holds (sorted; of the share's
        keys only, when reading a share)."""
        batch = _aliased(keys, self.names)
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

    def lookups(self) -> tuple[EqualityLookup | None, EqualityLookup | None]:
        """The equality deletes live before and after the commit, looked up by key (after
        `key_columns`, which learns the key types)."""
        if self._lookups is None:
            assert self._types is not None, "key_columns first: it learns the key types"
            paths = {fid: (name,) for fid, name in self.names.items()}
            change = self.change
            before = (None if change.before is None else equality_lookup(
                change.before, self.loader, *for_set(change.before, self._types, paths)))
            if change.after is None:
                after = None
            elif before is not None and not change.removed:
                after = extended_lookup(before, _as_set(change), change.after, self.loader,
                                        *for_set(change.after, self._types, paths))
            else:
                after = equality_lookup(change.after, self.loader,
                                        *for_set(change.after, self._types, paths))
            self._lookups = (before, after)
        return self._lookups

    def liveness_lookups(self) -> tuple[EqualityLookup | None, EqualityLookup | None]:
        """The lookups `changed_rows` decides with, for rows `matching` found: `lookups`,
        unless neither is known to the reader and it has not looked at an equality change
        before (a one-commit read), when lookups of the changed keys only do
        (`restricted_lookup`): all such rows have those keys. A range's or a stream's
        later commits build the whole lookups once and extend them from then on."""
        if self._liveness is None:
            assert self._types is not None, "key_columns first: it learns the key types"
            paths = {fid: (name,) for fid, name in self.names.items()}
            change = self.change
            sets = [s for s in (change.before, change.after) if s is not None]
            # with deletes of two sets of fields changed, a row one set matched may have
            # any key on the other's fields: restricted only by a single set
            if self._lookups is not None or not sets or len(self._sets) != 1 or any(
                    is_known(s, self.loader, *for_set(s, self._types, paths)) for s in sets
                    ) or not self.loader.first_time("equality-change"):
                self._liveness = self.lookups()
            else:
                self._liveness = (self._restricted(change.before, paths),
                                  self._restricted(change.after, paths))
        return self._liveness

    def _restricted(self, equality: EqualityDeleteSet | None,
                    paths: Mapping[int, tuple[str, ...]]) -> EqualityLookup | None:
        if equality is None:
            return None
        assert self._types is not None
        return restricted_lookup(equality, self.loader, *for_set(equality, self._types, paths),
                                 within=self._changed_keys)

    def _changed_keys(self, ids: tuple[int, ...], keys: pa.Table) -> pa.BooleanArray | None:
        """Which delete keys (columns named by field id) a changed delete holds; None when
        no changed delete keys on the same fields (then all are kept)."""
        for key_set in self._sets:
            if key_set.field_ids == ids:
                return key_set.matches(pa.RecordBatch.from_arrays(
                    [keys.column(str(fid)).combine_chunks() for fid in ids],
                    names=[_alias(fid) for fid in ids]))
        return None

    def changed_rows(self, ref: DataFileRef, positions: pa.Array, keys: pa.Table,
                     positional_before: pa.Array | None, positional_after: pa.Array | None
                     ) -> tuple[pa.Array, pa.Array]:
        """Of the rows at `positions` (their keys `keys`; rows `matching` found), those
        live before and not after the commit, and those live after and not before:
        position arrays. `positional_*` are the positions the position deletes and DVs
        delete, before and after."""
        if len(positions) == 0:
            empty = pa.array([], pa.int64())
            return empty, empty
        batch = _aliased(keys.take(positions), self.names)
        before, after = self.liveness_lookups()
        live_before = self._live(batch, ref, positions, before, positional_before)
        live_after = self._live(batch, ref, positions, after, positional_after)
        leaving = pc.and_not(live_before, live_after)
        arriving = pc.and_not(live_after, live_before)
        if self.excluded:  # what trusted deletes delete, their own rows say
            trusted = self._trusted(batch)
            leaving, arriving = pc.and_not(leaving, trusted), pc.and_not(arriving, trusted)
        return positions.filter(leaving), positions.filter(arriving)

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
        for key_set in _key_sets(trusted, self.loader):
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
            _, after = self.lookups()
            if after is not None:
                first = after.first_after(_aliased(keys.take(positions), self.names),
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
        self.key_columns(reached[0])  # learns the key types the lookups are built with
        self.liveness_lookups()

        def resolve(ref: DataFileRef) -> tuple[DataFileRef, pa.Array, pa.Array] | None:
            keys = self.key_columns(ref)
            positions = self.matching(keys)
            if len(positions) == 0:
                return None
            deleted = self._positional(task, ref)
            left, arrived = self.changed_rows(ref, positions, keys, deleted, deleted)
            return ref, left, arrived

        changed = [found for found in each_in_order(reached, resolve, ahead=len(reached))
                   if found is not None]

        leaving = [(ref, left) for ref, left, _ in changed if len(left)]
        arriving = [(ref, arrived) for ref, _, arrived in changed if len(arrived)]
        for change_type, wanted in ((DELETE, leaving), (INSERT, arriving)):
            departing = change_type == DELETE

            def read(item: tuple[DataFileRef, pa.Array], departing: bool = departing
                     ) -> list[pa.RecordBatch] | None:
                """A file's few changed rows, read ahead; None for many: read where
                taken, a batch at a time."""
                return (list(self.rows(*item, departing=departing))
                        if len(item[1]) <= self.batch_size else None)

            for (ref, positions), read_ahead in zip(wanted, each_in_order(wanted, read),
                                                    strict=True):
                batches = (read_ahead if read_ahead is not None
                           else self.rows(ref, positions, departing=departing))
                seqs = (self.first_deleted(ref, positions)
                        if deaths and change_type == DELETE else None)
                start = 0
                for batch in batches:
                    yield (change_type, batch,
                           None if seqs is None else seqs.slice(start, batch.num_rows))
                    start += batch.num_rows

    def _positional(self, task: EqualityDeletedRowsTask, ref: DataFileRef) -> pa.Array | None:
        """The positions the position deletes and DVs live before the commit delete."""
        refs = task.positional_for(ref)
        mask = self.loader.deletion_mask([r.file for r in refs], ref.file.file_path)
        return None if mask is None else mask.positions

    def rows(self, ref: DataFileRef, positions: pa.Array, *, departing: bool = False
             ) -> Iterator[pa.RecordBatch]:
        """The projected rows at `positions` of a data file (`departing`: as the DELETE
        rows are read, see `departing` in the constructor)."""
        projection, widen = self.projection, None
        if departing and self.departing is not None:
            projection, widen = self.departing
        batches = read_rows_at(ref.file, projection, self.io, positions,
                               sequence_number=ref.sequence_number, deletes=self.loader,
                               batch_size=self.batch_size)
        yield from batches if widen is None else map(widen, batches)


def _key_sets(refs: Sequence[DeleteFileRef], loader: DeleteLoader) -> list[EqualityKeySet]:
    """Equality delete files' distinct keys, one set per equality field ids, looked up in
    batches under `_alias(field id)`."""
    groups: dict[tuple[int, ...], list[pa.Table]] = {}
    for ref in refs:
        ids = tuple(ref.file.equality_ids or ())
        groups.setdefault(ids, []).append(loader.equality_keys(ref.file))
    sets = []
    for ids, tables in groups.items():
        names = [str(fid) for fid in ids]
        types = [tables[0].schema.field(n).type for n in names]
        for table in tables[1:]:
            types = [common_type(t, table.schema.field(n).type)
                     for t, n in zip(types, names, strict=True)]
        schema = pa.schema([pa.field(n, t) for n, t in zip(names, types, strict=True)])
        keys = pa.concat_tables([t.select(names).cast(schema) for t in tables])
        if keys.num_rows:
            sets.append(EqualityKeySet(ids, keys, {fid: (_alias(fid),) for fid in ids}))
    return sets


def _modulo(codes: pa.Array, count: int) -> pa.Array:
    whole = pc.multiply(pc.divide(codes, pa.scalar(count, pa.int64())),
                        pa.scalar(count, pa.int64()))
    return pc.subtract(codes, whole)


def positional_deaths(loader: DeleteLoader, ref: DataFileRef, positions: pa.Array,
                      deletes: Sequence[DeleteFileRef], seqs: pa.Array | None = None
                      ) -> pa.Array:
    """`seqs` (or nulls) with each still-null row at `positions` given the sequence number
    of the first of `deletes` (position deletes and DVs) that deletes it."""
    found = seqs if seqs is not None else pa.nulls(len(positions), pa.int64())
    for delete in sorted(deletes, key=lambda r: r.sequence_number):
        mask = loader.deletion_mask([delete.file], ref.file.file_path)
        if mask is None:
            continue
        hit = pc.and_(pc.is_in(positions, value_set=mask.positions), pc.is_null(found))
        found = pc.if_else(hit, pa.scalar(delete.sequence_number, pa.int64()), found)
    return found


def _alias(fid: int) -> str:
    return f"__meltwater_key_{fid}"


def _aliased(keys: pa.Table, names: dict[int, str]) -> pa.RecordBatch:
    """The key columns as one batch, each also under `_alias(field id)`, where the changed
    deletes' key sets look for it."""
    keys = keys.combine_chunks()
    arrays = [keys.column(i).combine_chunks() for i in range(keys.num_columns)]
    fields = list(keys.schema)
    for fid, name in names.items():
        if keys.schema.get_field_index(_alias(fid)) >= 0:
            continue  # aliased already
        arrays.append(keys.column(name).combine_chunks())
        fields.append(pa.field(_alias(fid), keys.schema.field(name).type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _as_set(change: EqualityChange) -> EqualityDeleteSet:
    """The deletes a commit added, global and scoped apart, as a set of their own."""
    return EqualityDeleteSet(
        tuple(r for r in change.added if r.key in change.global_keys),
        tuple(r for r in change.added if r.key not in change.global_keys))
