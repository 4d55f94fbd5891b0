"""A table state's equality deletes as one lookup: key -> the newest delete sequence number.

A row is deleted by equality deletes when some delete file of its scope (global, or its own
partition) with a greater data sequence number than the row's file holds the row's key. So
per scope and set of equality field ids, all that matters of the delete files is, for each
key, the greatest sequence number of a delete file holding it: the row is deleted exactly
when that number exceeds its data file's. `EqualityLookup` keeps that, built once from
every delete file of an `EqualityDeleteSet` (the one a scan's tasks share), and answers
per batch with one hash lookup per key column: the cost of a scan is its rows plus the
delete files' keys, where matching every data file against the union of the delete files
that apply to it costs (data files x deleted keys).

Keys are matched null-safely and across type promotions as `EqualityKeySet` matches them
(`meltwater.stream.engine.deletes.loader`).

Worked example: deletes E1 (sequence 5, keys {1, 2}) and E2 (sequence 8, keys {2, 3}),
both global. The lookup holds 1 -> 5, 2 -> 8, 3 -> 8. In a data file of sequence 6, key 1
is live (5 < 6), keys 2 and 3 are deleted (8 > 6); in one of sequence 9, all are live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import DataFile, PartitionKey
from meltwater.stream.engine.decode.remote_reads import each_in_order
from meltwater.stream.engine.deletes.cache import DeleteCache, Shelf
from meltwater.stream.engine.deletes.equality_keys import EqualityKeySet, common_type
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.errors import CorruptDeleteFileError

_SEQ = "__meltwater_sequence_number"

Scope = PartitionKey | None  # None for global deletes
# which rows of a group's delete keys (columns named by field id) a lookup keeps; None: all
KeyFilter = Callable[[tuple[int, ...], pa.Table], pa.BooleanArray | None]


@dataclass
class _Group:
    """The delete files of one scope over one set of equality field ids: distinct keys,
    the greatest sequence number holding each (`max_seqs[code]`), and every (key, sequence
    number) pair, sorted, for the first delete after a given one (`history`: each pair as
    `code * stride + sequence number`, `stride` above every sequence number; sorted on
    first use)."""

    scope: Scope
    field_ids: tuple[int, ...]
    keys: EqualityKeySet
    max_seqs: pa.Array  # int64, indexed by the key set's codes
    pairs: pa.Array  # int64, `code * stride + sequence number` per key row, unsorted
    stride: int
    newest: int  # the greatest sequence number of the group's delete files
    _history: pa.Array | None = None

    @property
    def history(self) -> pa.Array:
        """The distinct pairs, ascending."""
        if self._history is None:
            history = pc.unique(self.pairs)
            self._history = history.take(pc.array_sort_indices(history))
        return self._history

    def deleted(self, batch: pa.RecordBatch, data_seq: int) -> pa.BooleanArray | None:
        """Which rows a delete of the group newer than `data_seq` holds the key of."""
        if self.newest <= data_seq:
            return None
        codes = self.keys.codes_of(batch)
        newest = pc.take(self.max_seqs, codes)
        return pc.fill_null(pc.greater(newest, pa.scalar(data_seq, pa.int64())), False)

    def first_after(self, batch: pa.RecordBatch, data_seq: int) -> pa.Array | None:
        """Per row, the least sequence number above `data_seq` of a delete of the group
        holding its key (null: none); None when no delete of the group is that new."""
        if self.newest <= data_seq:
            return None
        codes = self.keys.codes_of(batch)
        stride = pa.scalar(self.stride, pa.int64())
        needles = pc.add(pc.multiply(codes, stride), pa.scalar(data_seq + 1, pa.int64()))
        index = pc.search_sorted(self.history, needles).cast(pa.int64())
        last = pa.scalar(len(self.history) - 1, pa.int64())
        found = pc.take(self.history, pc.min_element_wise(index, last))
        same_key = pc.and_(pc.less(index, pa.scalar(len(self.history), pa.int64())),
                           pc.equal(pc.divide(found, stride), codes))
        seqs = pc.subtract(found, pc.multiply(pc.divide(found, stride), stride))
        return pc.if_else(same_key, seqs, pa.scalar(None, pa.int64()))


class _Layer:
    """The groups built from some of a set's delete files."""

    def __init__(self, equality: EqualityDeleteSet, groups: Sequence[_Group]) -> None:
        self.equality = equality  # the delete files the layer holds
        self.globals = [g for g in groups if g.scope is None]
        self.scoped: dict[Scope, list[_Group]] = {}
        for group in groups:
            if group.scope is not None:
                self.scoped.setdefault(group.scope, []).append(group)
        self.size = sum(g.keys.size for g in groups)
        self.nbytes = sum(g.keys.nbytes + g.max_seqs.nbytes + 2 * g.pairs.nbytes
                          for g in groups)

    def groups_for(self, data_file: DataFile) -> list[_Group]:
        return self.globals + self.scoped.get(data_file.partition_key, [])


class EqualityLookup:
    """Every equality delete of a set, grouped by scope and equality field ids (see the
    module doc). Built by `equality_lookup`, which caches it in the reader's
    `DeleteLoader` so every task of a scan shares one.

    A lookup is a few layers, each built from some of the set's delete files: a change
    read over many commits extends the lookup of the deletes live before a commit by the
    ones it added (`extended`) instead of building the next commit's anew, and merges
    layers of like size, so each delete key is merged a logarithmic number of times."""

    def __init__(self, layers: Sequence[_Layer]) -> None:
        self.layers = tuple(layers)
        self.nbytes = sum(layer.nbytes for layer in self.layers)

    def groups_for(self, data_file: DataFile) -> list[_Group]:
        """The groups whose deletes may apply to rows of `data_file`."""
        return [g for layer in self.layers for g in layer.groups_for(data_file)]

    def deleted(self, batch: pa.RecordBatch, data_file: DataFile, data_seq: int
                ) -> pa.BooleanArray | None:
        """Which rows of a batch of `data_file` (data sequence number `data_seq`) equality
        deletes remove; None when none can. The batch holds every key column at the
        paths the lookup was built with."""
        result = None
        for group in self.groups_for(data_file):
            hit = group.deleted(batch, data_seq)
            if hit is not None:
                result = hit if result is None else pc.or_(result, hit)
        return result

    def first_after(self, batch: pa.RecordBatch, data_file: DataFile, data_seq: int
                    ) -> pa.Array | None:
        """Per row of a batch of `data_file`, the sequence number of the first equality
        delete to remove it (null: none does); None when no delete can. A row is deleted
        in the table state of sequence number s exactly when that number is <= s, as long
        as no delete file of the lookup was removed before s."""
        result = None
        for group in self.groups_for(data_file):
            first = group.first_after(batch, data_seq)
            if first is not None:
                result = first if result is None else pc.min_element_wise(result, first)
        return result

    def extended(self, added: EqualityDeleteSet, loader: DeleteLoader,
                 key_types: Mapping[int, pa.DataType],
                 key_paths: Mapping[int, tuple[str, ...]]) -> EqualityLookup:
        """This lookup with `added`'s delete files too (a new lookup; this one stays)."""
        layers = [*self.layers, _layer(added, loader, key_types, key_paths)]
        while len(layers) > 1 and layers[-2].size <= 2 * layers[-1].size:
            upper, lower = layers.pop(), layers.pop()
            merged = EqualityDeleteSet(
                lower.equality.global_refs + upper.equality.global_refs,
                lower.equality.scoped_refs + upper.equality.scoped_refs)
            layers.append(_layer(merged, loader, key_types, key_paths))
        return EqualityLookup(layers)


@dataclass(frozen=True)
class KeyTyping:
    """The key columns a lookup matches rows by: per field id, its Arrow type (as text)
    and its path in the batches. Readers of the same columns share one lookup."""

    columns: tuple[tuple[int, str, tuple[str, ...]], ...]

    @classmethod
    def of(cls, key_types: Mapping[int, pa.DataType],
           key_paths: Mapping[int, tuple[str, ...]]) -> KeyTyping:
        """The typing of key columns of `key_types` at `key_paths` (by field id)."""
        return cls(tuple(sorted((fid, str(t), key_paths[fid]) for fid, t in key_types.items())))


@dataclass(frozen=True)
class LookupKey:
    """A lookup of one set of equality delete files for one key typing."""

    deletes: tuple[tuple[str, int | None], ...]  # the set's files (`EqualityDeleteSet.key`)
    typing: KeyTyping

    @classmethod
    def of(cls, equality: EqualityDeleteSet, key_types: Mapping[int, pa.DataType],
           key_paths: Mapping[int, tuple[str, ...]]) -> LookupKey:
        """The key of `equality`'s lookup for those key columns."""
        return cls(equality.key, KeyTyping.of(key_types, key_paths))


class Lookups(Shelf[LookupKey, EqualityLookup]):
    """Equality lookups, and per key typing the newest one built or extended: the one a
    reader of a later commit (whose set holds that one's files and more) extends."""

    def __init__(self, cache: DeleteCache) -> None:
        super().__init__(cache)
        self._newest: dict[KeyTyping, LookupKey] = {}
        self._lock = threading.Lock()

    @staticmethod
    def size_of(value: EqualityLookup) -> int:
        """The lookup's Arrow buffers' bytes."""
        return value.nbytes

    def note_newest(self, key: LookupKey) -> None:
        """Remember `key` as its typing's newest lookup."""
        with self._lock:
            self._newest[key.typing] = key

    def newest(self, typing: KeyTyping) -> tuple[LookupKey, EqualityLookup] | None:
        """(key, lookup) of the typing's newest lookup, while the cache still holds it."""
        with self._lock:
            key = self._newest.get(typing)
        found = None if key is None else self.peek(key)
        return None if key is None or found is None else (key, found)


def set_field_ids(equality: EqualityDeleteSet) -> set[int]:
    """Every field id the set's delete files key on."""
    return {fid for ref in equality.global_refs + equality.scoped_refs
            for fid in ref.file.equality_ids or ()}


def for_set(equality: EqualityDeleteSet, key_types: Mapping[int, pa.DataType],
            key_paths: Mapping[int, tuple[str, ...]]
            ) -> tuple[dict[int, pa.DataType], dict[int, tuple[str, ...]]]:
    """The key types and paths of the fields the set keys on: what its lookup is built
    and cached with, so readers of the same columns share one."""
    ids = set_field_ids(equality)
    return ({fid: t for fid, t in key_types.items() if fid in ids},
            {fid: p for fid, p in key_paths.items() if fid in ids})


def key_field_ids(equality: EqualityDeleteSet, data_seq: int, data_file: DataFile
                  ) -> set[int]:
    """The field ids a reader needs to apply the set to rows of one data file."""
    return {fid for ref in equality.applying_to(data_seq, data_file)
            for fid in ref.file.equality_ids or ()}


def equality_lookup(equality: EqualityDeleteSet, loader: DeleteLoader,
                    key_types: Mapping[int, pa.DataType],
                    key_paths: Mapping[int, tuple[str, ...]]) -> EqualityLookup:
    """The set's lookup for batches whose key columns have `key_types` at `key_paths`
    (field id -> type, path), cached in `loader`: built once per scan and key typing.

    When it is not cached but the newest lookup of the same key typing is of a subset of
    the set (an executor of a stream that read an earlier commit of the table, not the
    one just before), that one is extended by the rest instead of building the whole
    backlog's anew."""
    lookups = loader.shelf(Lookups)
    key = LookupKey.of(equality, key_types, key_paths)
    found = lookups.peek(key)
    if found is None:
        base = _extendable(equality, lookups, key)
        if base is not None:
            have = set(base[0].deletes)
            added = EqualityDeleteSet(
                tuple(r for r in equality.global_refs if r.key not in have),
                tuple(r for r in equality.scoped_refs if r.key not in have))
            found = extended_lookup(base[1], added, equality, loader, key_types, key_paths)
        else:
            found = lookups.get(key, lambda: _build(equality, loader, key_types, key_paths))
    lookups.note_newest(key)
    return found


def _extendable(equality: EqualityDeleteSet, lookups: Lookups, key: LookupKey
                ) -> tuple[LookupKey, EqualityLookup] | None:
    """(key, lookup) of the newest lookup of the same key typing, if it is of a subset of
    the set's delete files."""
    base = lookups.newest(key.typing)
    return base if base is not None and set(base[0].deletes) <= set(equality.key) else None


def restricted_lookup(equality: EqualityDeleteSet, loader: DeleteLoader,
                      key_types: Mapping[int, pa.DataType],
                      key_paths: Mapping[int, tuple[str, ...]], within: KeyFilter
                      ) -> EqualityLookup:
    """The set's lookup for rows of some keys only: each group keeps the delete rows
    `within` keeps (`within(field ids, keys)`: a mask, or None for all of them).

    For one look at one commit: the rows whose liveness a commit's equality change
    decides are those its changed deletes hold the keys of, so the lookup they need is
    that of those keys, a hash probe of each backlog key where the whole lookup groups
    and sorts them all. Answers for other keys are wrong, so it is never cached: a
    reader of one commit only asks for it (`equality_liveness`)."""
    return EqualityLookup([_layer(equality, loader, key_types, key_paths, within)])


def extended_lookup(base: EqualityLookup, added: EqualityDeleteSet, after: EqualityDeleteSet,
                    loader: DeleteLoader, key_types: Mapping[int, pa.DataType],
                    key_paths: Mapping[int, tuple[str, ...]]) -> EqualityLookup:
    """The lookup of `after`, which is `base`'s set plus `added`: `base` extended, and
    cached as `after`'s, so the next commit of a range finds the deletes live before it
    already looked up."""
    lookups = loader.shelf(Lookups)
    key = LookupKey.of(after, key_types, key_paths)
    found = lookups.get(key, lambda: base.extended(added, loader, key_types, key_paths))
    lookups.note_newest(key)
    return found


def _build(equality: EqualityDeleteSet, loader: DeleteLoader,
           key_types: Mapping[int, pa.DataType], key_paths: Mapping[int, tuple[str, ...]]
           ) -> EqualityLookup:
    """The whole set's lookup, built anew."""
    return EqualityLookup([_layer(equality, loader, key_types, key_paths)])


def _layer(equality: EqualityDeleteSet, loader: DeleteLoader,
           key_types: Mapping[int, pa.DataType], key_paths: Mapping[int, tuple[str, ...]],
           within: KeyFilter | None = None) -> _Layer:
    members: dict[tuple[Scope, tuple[int, ...]], list[DeleteFileRef]] = {}
    for scope, refs in ((None, equality.global_refs), (True, equality.scoped_refs)):
        for ref in refs:
            ids = tuple(ref.file.equality_ids or ())
            if not ids:
                raise CorruptDeleteFileError(f"{ref.file.file_path}: equality delete file "
                                             "without equality field ids")
            if any(fid not in key_types for fid in ids):
                continue  # the caller reads rows no delete of these ids can reach
            key = None if scope is None else ref.file.partition_key
            members.setdefault((key, ids), []).append(ref)
    groups = [group for (scope, ids), refs in members.items()
              if (group := _group(scope, ids, refs, loader, key_types, key_paths, within))
              is not None]
    return _Layer(equality, groups)


def _group(scope: Scope, ids: tuple[int, ...], refs: list[DeleteFileRef],
           loader: DeleteLoader, key_types: Mapping[int, pa.DataType],
           key_paths: Mapping[int, tuple[str, ...]], within: KeyFilter | None = None
           ) -> _Group | None:
    names = [str(fid) for fid in ids]
    # a backlog is hundreds of small files: decoded a few at a time
    tables = list(each_in_order(refs, lambda ref: (ref.sequence_number,
                                                   loader.equality_keys(ref.file)),
                                ahead=len(refs)))
    types = [key_types[fid] for fid in ids]
    for _, table in tables:
        types = [common_type(type_, table.schema.field(name).type)
                 for type_, name in zip(types, names, strict=True)]
    schema = pa.schema([pa.field(n, t) for n, t in zip(names, types, strict=True)])
    parts = [table.select(names).cast(schema).append_column(
                 _SEQ, pa.repeat(pa.scalar(seq, pa.int64()), table.num_rows))
             for seq, table in tables if table.num_rows]
    if not parts:
        return None
    keyed = pa.concat_tables(parts).combine_chunks()
    kept = None if within is None else within(ids, keyed.select(names))
    if kept is not None:
        keyed = keyed.filter(kept)
        if not keyed.num_rows:
            return None
    keys = EqualityKeySet(ids, keyed.select(names), dict(key_paths))
    codes = keys.row_codes
    seqs = keyed.column(_SEQ).combine_chunks()
    newest = pa.table({"code": codes, "seq": seqs}).group_by(
        "code", use_threads=False).aggregate([("seq", "max")])
    max_seqs = pc.scatter(newest.column("seq_max").combine_chunks(),
                          newest.column("code").combine_chunks(),
                          max_index=keys.code_count - 1)
    top = max(seq for seq, _ in tables)
    stride = top + 1
    if keys.code_count * stride >= 1 << 62:
        raise CorruptDeleteFileError(f"equality deletes of sequence numbers up to {top} over "
                                     f"{keys.code_count} keys: beyond what the lookup indexes")
    pairs = pc.add(pc.multiply(codes, pa.scalar(stride, pa.int64())), seqs)
    return _Group(scope, ids, keys, max_seqs, pairs, stride, top)
