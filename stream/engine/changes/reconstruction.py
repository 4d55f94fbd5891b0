"""Change tasks -> change rows: what one commit, or a range of them, inserted, deleted and
updated. The entry points; one commit is `commit_reader.CommitReader`'s.

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

What a caller reads, one commit or commits after commits (`ReadScope`), it says: it
decides how equality deletes are looked up (`equality_liveness`).

Memory: a commit whose changes need comparing (both rows that left and rows that arrived,
with carry-over removal or update pairing on) is held whole, so it is bounded by the
commit's change size; every other commit streams batch by batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import CommitChanges
from meltwater.planner.expressions.tree import TRUE, Expression
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.changes.change_columns import change_schema
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import CHANGE_ORDINAL, ChangeOptions
from meltwater.stream.engine.changes.commit_reader import CommitReader
from meltwater.stream.engine.changes.updates import net_changes
from meltwater.stream.engine.decode.batch_size import DEFAULT_BATCH_SIZE
from meltwater.stream.engine.deletes.loader import DeleteLoader

# -- the public entry points ---------------------------------------------------------------


def reconstruct(commit: CommitChanges, projection: Schema, io: FileIO, *,
                options: ChangeOptions | None = None, deletes: DeleteLoader | None = None,
                batch_size: int = DEFAULT_BATCH_SIZE, row_filter: Expression = TRUE,
                share: tuple[int, int] | None = None,
                scope: ReadScope = ReadScope.ONE_COMMIT) -> Iterator[pa.RecordBatch]:
    """The change rows of one commit, as batches of `change_schema(projection)`.

    `projection` is the schema of the range's end snapshot (or its selected columns);
    older files are projected by field id. `row_filter`, bound to `projection`, keeps the
    changes whose row matches it (applied before carry-over removal and pairing, so an
    update moving a row out of the filter is seen as a DELETE). Within a commit, DELETE
    and UPDATE_BEFORE rows come before INSERT and UPDATE_AFTER rows. Pass one
    `DeleteLoader` for a whole range so delete files are read once, and say so with
    `scope=ReadScope.COMMITS`. With `share`, only the rows of that share of the commit's
    keys (`CommitPart.key_shares`).
    """
    options = options or ChangeOptions()
    loader = deletes if deletes is not None else DeleteLoader(io)
    yield from CommitReader(commit, projection, io, options, loader, scope,
                            batch_size=batch_size, row_filter=row_filter,
                            share=share).batches()


def reconstruct_range(commits: Iterable[CommitChanges], projection: Schema, io: FileIO, *,
                      options: ChangeOptions | None = None,
                      deletes: DeleteLoader | None = None,
                      batch_size: int = DEFAULT_BATCH_SIZE,
                      row_filter: Expression = TRUE,
                      scope: ReadScope = ReadScope.COMMITS) -> Iterator[pa.RecordBatch]:
    """The change rows of a range's commits (oldest first), or with `options.net` their
    net effect (`meltwater.stream.engine.changes.updates.net_changes`, holding the range's
    changes in memory). Per-commit changes stream one commit at a time. `scope`: ONE_COMMIT
    for a range of one commit."""
    options = options or ChangeOptions()
    loader = deletes if deletes is not None else DeleteLoader(io)
    if not options.net:
        for commit in commits:
            yield from reconstruct(commit, projection, io, options=options, deletes=loader,
                                   batch_size=batch_size, row_filter=row_filter, scope=scope)
        return
    # Pairing happens on the net rows, not per commit; carry-over removal per commit only
    # shrinks what net changes must hold (it cancels anyway).
    per_commit = dataclasses.replace(options, compute_updates=False, net=False)
    batches = (b for commit in commits
               for b in reconstruct(commit, projection, io, options=per_commit,
                                    deletes=loader, batch_size=batch_size,
                                    row_filter=row_filter, scope=scope))
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
    the latest). Its equality change is looked at once (`ReadScope.ONE_COMMIT`)."""
    per_row = dataclasses.replace(options, compute_updates=False, net=False)
    loader = deletes if deletes is not None else DeleteLoader(io)
    batches = list(CommitReader(net, projection, io, per_row, loader, ReadScope.ONE_COMMIT,
                                batch_size=batch_size, row_filter=row_filter).batches())
    schema = change_schema(projection)
    if batches:  # in the order of their commits, as `net_changes` wants them
        table = pa.Table.from_batches(batches, schema=schema)
        order = pc.sort_indices(table.column(CHANGE_ORDINAL))
        batches = table.take(order).combine_chunks().to_batches()
    net_rows = net_changes(batches, identifier_field_ids=options.identifier_field_ids,
                           compute_updates=options.compute_updates,
                           change_type_names=options.change_type_names, schema=schema)
    yield from net_rows.to_batches(max_chunksize=batch_size)
