"""The keys a commit's changed equality deletes hold, and how rows are matched to them.

Shared by the readers of an equality change (`equality_changes`), its liveness lookups
(`equality_liveness`) and its key shares (`key_shares`): the changed deletes' distinct keys
as one `EqualityKeySet` per set of equality field ids, matched against batches whose key
columns are also present under `alias(field id)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import EqualityChange
from meltwater.planner.scans.tasks import DataFileRef, DeleteFileRef, EqualityDeleteSet
from meltwater.stream.engine.deletes.equality_keys import EqualityKeySet, common_type
from meltwater.stream.engine.deletes.loader import DeleteLoader


def key_sets(refs: Sequence[DeleteFileRef], loader: DeleteLoader) -> list[EqualityKeySet]:
    """Equality delete files' distinct keys, one set per equality field ids, looked up in
    batches under `alias(field id)`."""
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
            sets.append(EqualityKeySet(ids, keys, {fid: (alias(fid),) for fid in ids}))
    return sets


def modulo(codes: pa.Array, count: int) -> pa.Array:
    """Each code modulo `count` (Arrow has no modulo kernel)."""
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


def alias(fid: int) -> str:
    """The name a key column is also present under, where the key sets look for it."""
    return f"__meltwater_key_{fid}"


def aliased(keys: pa.Table, names: dict[int, str]) -> pa.RecordBatch:
    """The key columns as one batch, each also under `alias(field id)`, where the changed
    deletes' key sets look for it."""
    keys = keys.combine_chunks()
    arrays = [keys.column(i).combine_chunks() for i in range(keys.num_columns)]
    fields = list(keys.schema)
    for fid, name in names.items():
        if keys.schema.get_field_index(alias(fid)) >= 0:
            continue  # aliased already
        arrays.append(keys.column(name).combine_chunks())
        fields.append(pa.field(alias(fid), keys.schema.field(name).type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def as_set(change: EqualityChange) -> EqualityDeleteSet:
    """The deletes a commit added, global and scoped apart, as a set of their own."""
    return EqualityDeleteSet(
        tuple(r for r in change.added if r.key in change.global_keys),
        tuple(r for r in change.added if r.key not in change.global_keys))
