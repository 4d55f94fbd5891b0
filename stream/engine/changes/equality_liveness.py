"""Whether rows an equality change reaches were live before the commit and are after it.

Liveness under equality deletes is looked up by key and data sequence number
(`meltwater.stream.engine.deletes.equality_lookup`). Which lookups a reader builds follows
from what its caller reads (`ReadScope`), never from what its cache happens to hold:

- a reader of COMMITS (a range, a stream) builds the whole lookup of the deletes live
  before the commit once, and the one after it extends that by what the commit added; it
  becomes the next commit's "before";
- a reader of ONE_COMMIT answers for the rows its changed keys match only, so it looks up
  only those keys in the backlog (`restricted_lookup`), a hash probe of each backlog key
  where the whole lookup groups and sorts them all, whatever the reader's loader holds.

Worked example: a commit adds E3 deleting ids {2, 3} over a backlog E1 {1, 2}, E2 {2, 5}.
Read alone, the lookups hold ids 2 and 3 only (2 -> E2's sequence number before, E3's
after); in a range, all of 1, 2, 3 and 5.
"""

from __future__ import annotations

import pyarrow as pa

from meltwater.planner.changes.change_tasks import EqualityChange
from meltwater.planner.scans.tasks import EqualityDeleteSet
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.changed_keys import alias, as_set
from meltwater.stream.engine.deletes.equality_keys import EqualityKeySet
from meltwater.stream.engine.deletes.equality_lookup import (
    EqualityLookup,
    equality_lookup,
    extended_lookup,
    for_set,
    restricted_lookup,
)
from meltwater.stream.engine.deletes.loader import DeleteLoader

Lookups = tuple[EqualityLookup | None, EqualityLookup | None]  # before, after the commit


class EqualityLiveness:
    """The lookups of one commit's equality change, built once its key types are known
    (`learn_types`, from the first key columns read)."""

    def __init__(self, change: EqualityChange, loader: DeleteLoader, names: dict[int, str],
                 changed: list[EqualityKeySet], scope: ReadScope) -> None:
        self.change = change
        self.loader = loader
        self.names = names  # field id -> the key column's name in the batches
        self.changed = changed  # the changed deletes' key sets
        self.scope = scope
        self.types: dict[int, pa.DataType] | None = None
        self._whole: Lookups | None = None
        self._for_changed: Lookups | None = None

    def learn_types(self, keys: pa.Table) -> None:
        """Take the key columns' types from the first key columns read."""
        if self.types is None:
            self.types = {fid: keys.schema.field(name).type for fid, name in self.names.items()}

    def _paths(self) -> dict[int, tuple[str, ...]]:
        return {fid: (name,) for fid, name in self.names.items()}

    def whole(self) -> Lookups:
        """The equality deletes live before and after the commit, every key of them."""
        if self._whole is None:
            assert self.types is not None, "key columns first: they give the key types"
            paths, change = self._paths(), self.change
            before = (None if change.before is None else equality_lookup(
                change.before, self.loader, *for_set(change.before, self.types, paths)))
            if change.after is None:
                after = None
            elif before is not None and not change.removed:
                after = extended_lookup(before, as_set(change), change.after, self.loader,
                                        *for_set(change.after, self.types, paths))
            else:
                after = equality_lookup(change.after, self.loader,
                                        *for_set(change.after, self.types, paths))
            self._whole = (before, after)
        return self._whole

    def for_changed_rows(self) -> Lookups:
        """The lookups that decide the liveness of rows the changed keys match (see the
        module doc): of those keys only for a reader of ONE_COMMIT, the whole ones
        otherwise."""
        if self._for_changed is None:
            assert self.types is not None, "key columns first: they give the key types"
            sets = [s for s in (self.change.before, self.change.after) if s is not None]
            # with deletes of two sets of fields changed, a row one set matched may have
            # any key on the other's fields: restricted only by a single set
            if (self.scope is ReadScope.COMMITS or self._whole is not None or not sets
                    or len(self.changed) != 1):
                self._for_changed = self.whole()
            else:
                self._for_changed = (self._restricted(self.change.before),
                                     self._restricted(self.change.after))
        return self._for_changed

    def _restricted(self, equality: EqualityDeleteSet | None) -> EqualityLookup | None:
        if equality is None:
            return None
        assert self.types is not None
        return restricted_lookup(equality, self.loader,
                                 *for_set(equality, self.types, self._paths()),
                                 within=self._changed_keys)

    def _changed_keys(self, ids: tuple[int, ...], keys: pa.Table) -> pa.BooleanArray | None:
        """Which delete keys (columns named by field id) a changed delete holds; None when
        no changed delete keys on the same fields (then all are kept)."""
        for key_set in self.changed:
            if key_set.field_ids == ids:
                return key_set.matches(pa.RecordBatch.from_arrays(
                    [keys.column(str(fid)).combine_chunks() for fid in ids],
                    names=[alias(fid) for fid in ids]))
        return None


