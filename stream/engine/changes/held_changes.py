"""Reading one part of a commit split across micro-batches, exactly as the whole commit.

A rate-limited stream cuts a huge commit only between its units
(`meltwater.planner.changes.commit_units`), so carry-over removal sees both copies of every row
in one part. Update pairing matches rows by key, and a key can cross units (an UPDATE
moving a row to another partition, or pairing by `_row_id`). So a part holds back the
rows that may pair with a row of another unit, and the commit's last part emits them all,
paired over the whole commit. Nothing is kept between micro-batches: every part recomputes
what it needs from the commit's immutable files, so a replayed or restarted micro-batch
emits exactly the same rows and the checkpoint stays as small as an offset.

- A key is *shared* when the raw change rows of two units of one key group hold it; each
  part reads the key columns (only) of the units in its units' key groups to know.
- A row is *held* when its key is shared, or, transitively, when it has the content of a
  held row or the key of one: carry-over removal compares content without v3 row
  lineage, so with `_row_id` keys a held row's content twin is held with it.
- Each part emits its other rows, carry-over removed and pairs made among them: all rows
  of their keys and content are in the part, so this is what the whole commit gives them.
- The last part also reads the full rows of every unit holding a shared key (in planner
  order, as reconstructing the whole commit would) and emits their held rows, compared.

Costs: every part of such a commit reads the key columns of its key groups, and the last
part also the held units' rows; memory holds those keys and the held rows, at most what
reading the commit whole holds. Without update pairing, or when identifier fields decide
the partition (bucket(id), identity(id): each unit its own key group), nothing is held.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import CommitChanges
from meltwater.planner.changes.commit_units import CommitSplit
from meltwater.planner.expressions.tree import TRUE, AlwaysTrue, Expression
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import ChangeOptions, key_schema
from meltwater.stream.engine.changes.commit_reader import CommitReader
from meltwater.stream.engine.changes.reconstruction import reconstruct
from meltwater.stream.engine.changes.updates import column_by_id, content_columns, row_codes
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.errors import ChangeOptionError, MissingIdentifierColumnError

if TYPE_CHECKING:
    from meltwater.planner.changes.micro_batch import CommitPart


def read_parts(parts: Iterable[CommitPart], io: FileIO, options: ChangeOptions,
               deletes: DeleteLoader | None = None, *, batch_size: int = DEFAULT_BATCH_SIZE,
               row_filter: Expression = TRUE,
               scope: ReadScope = ReadScope.COMMITS) -> Iterator[pa.RecordBatch]:
    """The change rows of commit parts, in order: what one Spark partition of a stream or
    a batch change read emits (before conforming to the Spark schema). `row_filter` is
    for reads without update pairing (`reconstruct`'s, applied before it). `scope`: a
    stream's parts are COMMITS (its executors keep their loaders from micro-batch to
    micro-batch); a batch read of one commit says ONE_COMMIT."""
    loader = deletes if deletes is not None else DeleteLoader(io)
    for part in parts:
        if part.share is not None:  # one share of a commit's keys (`CommitPart.key_shares`)
            yield from reconstruct(part.changes, part.projection, io, options=options,
                                   deletes=loader, batch_size=batch_size,
                                   row_filter=row_filter, share=part.share, scope=scope)
            continue
        yield from part_changes(part.changes, part.projection, part.pairing, io,
                                options=options, deletes=loader, batch_size=batch_size,
                                row_filter=row_filter, scope=scope)


def part_changes(changes: CommitChanges, projection: Schema, split: CommitSplit | None,
                 io: FileIO, *, options: ChangeOptions, deletes: DeleteLoader,
                 batch_size: int = DEFAULT_BATCH_SIZE, row_filter: Expression = TRUE,
                 scope: ReadScope = ReadScope.COMMITS) -> Iterator[pa.RecordBatch]:
    """The change rows one part of a commit contributes (see the module doc); a part
    without `split` (a whole commit, or one nothing can pair across) is read as is."""
    if split is None or not options.pairs_updates:
        yield from reconstruct(changes, projection, io, options=options, deletes=deletes,
                               batch_size=batch_size, row_filter=row_filter, scope=scope)
        return
    if not isinstance(row_filter, AlwaysTrue):
        raise ChangeOptionError("a row filter cannot apply before update pairing: it would "
                                "turn an update leaving the filter into a DELETE")
    ids = tuple(options.identifier_field_ids or ())

    def reader(units: Sequence[int], schema: Schema):
        indices = sorted(i for u in units for i in split.units[u])
        commit = CommitChanges(changes.commit, tuple(split.tasks[i] for i in indices))
        return CommitReader(commit, schema, io, options, deletes, scope,
                            batch_size=batch_size)

    shared, holders = _shared_keys(
        {u: reader([u], key_schema(projection, ids)).raw_table()
         for u in split.units_to_compare()}, ids)
    own = reader(split.own, projection)
    table = own.raw_table()
    held = _held(table, shared, ids)
    yield from own.compared(table.filter(pc.invert(held)))
    if split.last and holders:
        rest = reader(holders, projection)
        table = rest.raw_table()
        yield from rest.compared(table.filter(_held(table, shared, ids)))


def _key_columns(table: pa.Table, ids: Sequence[int]) -> list[pa.Array]:
    columns = []
    for fid in ids:
        column = column_by_id(table, fid)
        if column is None:
            raise MissingIdentifierColumnError(f"identifier field id {fid} is not among the "
                                          "stream's columns: select it or turn update "
                                          "pairing off")
        columns.append(column)
    return columns


def _shared_keys(keys_by_unit: dict[int, pa.Table], ids: Sequence[int]
                 ) -> tuple[list[pa.Array], list[int]]:
    """The keys found in the rows of two units or more (as key columns, one row per key),
    and the units holding any of them."""
    units = [u for u, t in keys_by_unit.items() if t.num_rows]
    if len(units) < 2:
        return [], []
    tables = [keys_by_unit[u] for u in units]
    per_table = [_key_columns(t, ids) for t in tables]
    columns = [pa.concat_arrays([keys[k] for keys in per_table]) for k in range(len(ids))]
    owner = pa.concat_arrays([pa.repeat(pa.scalar(u, pa.int64()), t.num_rows)
                              for u, t in zip(units, tables, strict=True)])
    codes = row_codes(columns)
    pairs = pa.table({"code": codes, "unit": owner}).group_by(
        ["code", "unit"], use_threads=False).aggregate([])
    counted = pairs.group_by("code", use_threads=False).aggregate([("unit", "count")])
    shared_codes = counted.column("code").filter(
        pc.greater(counted.column("unit_count"), 1))
    if not len(shared_codes):
        return [], []
    is_shared = pc.is_in(codes, value_set=shared_codes.combine_chunks())
    holders = sorted(set(owner.filter(is_shared).to_pylist()))
    return [c.filter(is_shared) for c in columns], holders


def _held(table: pa.Table, shared: list[pa.Array], ids: Sequence[int]) -> pa.Array:
    """Which raw change rows wait for the commit's last part: rows of a shared key, then,
    until nothing changes, rows sharing a key or a content with a held row."""
    n = table.num_rows
    if n == 0 or not shared:
        return pa.repeat(pa.scalar(False), n)
    own = _key_columns(table, ids)
    joint = row_codes([pa.concat_arrays([a, b]) for a, b in zip(own, shared, strict=True)])
    keys, shared_codes = joint.slice(0, n), joint.slice(n)
    held = pc.is_in(keys, value_set=shared_codes)
    content = row_codes([table.column(c) for c in content_columns(table)], n)
    count = pc.sum(held.cast(pa.int64())).as_py() or 0
    while 0 < count < n:
        grown = pc.or_(pc.is_in(keys, value_set=keys.filter(held)),
                       pc.is_in(content, value_set=content.filter(held)))
        grown_count = pc.sum(grown.cast(pa.int64())).as_py() or 0
        held = grown
        if grown_count == count:
            break
        count = grown_count
    return held
