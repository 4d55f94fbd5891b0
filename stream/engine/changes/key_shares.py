"""One share of a commit's changed keys: an upsert commit read on several executors.

`KeyShare` decides which keys (and so which rows, deleted and added) a share reads; see
its docstring for the rule and why keys go with the files holding them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import EqualityChange
from meltwater.planner.scans.tasks import DataFileRef
from meltwater.stream.engine.changes.changed_keys import aliased, key_sets, modulo
from meltwater.stream.engine.decode.remote_reads import each_in_order
from meltwater.stream.engine.deletes.loader import DeleteLoader


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
        (key_set,) = key_sets(refs, loader)  # shareable commits key on one set of ids
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
            batch = aliased(keys, self.names)
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
        codes = self.key_set.codes_of(aliased(pa.Table.from_batches([batch]), self.names))
        owned, shares = self._owned()
        owner = pc.take(shares, pc.index_in(codes, value_set=owned))
        owner = pc.coalesce(owner, modulo(codes, self.count))
        mine = pc.equal(owner, pa.scalar(self.index, pa.int64()))
        if self.index == 0:
            mine = pc.or_kleene(mine, pc.is_null(codes))
        return pc.fill_null(mine, False)
