"""Walking a table's lineage back from an end to a start: the commits of a change range.

A batch change range (`meltwater.planner.changes.change_range`) and a change stream's next
micro-batch (`meltwater.stream.watch.stream_lineage`) both read "the commits after snapshot
`start` up to and including `end`", found by following `end`'s parent chain back until it
meets `start`. When the chain runs out of retained history first, the same three things
can be wrong for both, decided here once:

- `start` is a snapshot of the table but not on the chain: it is no ancestor of `end` (a
  rollback, a branch);
- the chain reaches the table's first snapshot without meeting `start`, which the table
  does not list: `start` is not on this lineage (expired long ago, or never committed);
- the chain ends at a snapshot whose parent is gone and is not `start`: the history
  between them has expired. It is skipped only on request (`skip_expired`), and the walk
  then says which parent it skipped, for the caller to warn about.

Each caller names its options its own way (`--skip-expired`, `skip-expired-snapshots=true`),
so the refusals' wording is the caller's (`LineageRefusals`); the walk and its decisions
are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.table.metadata import Snapshot, TableMetadata


class LineageRefusals(Protocol):
    """The errors a walk from an end back to a start raises, worded as its caller names
    its bounds and options (it knows the start and the end it asked for)."""

    def not_an_ancestor(self) -> MeltwaterError:
        """The start is a snapshot of the table, off the end's lineage."""

    def not_on_lineage(self) -> MeltwaterError:
        """The end's whole lineage is retained and the start, which the table does not
        list, is not on it."""

    def expired(self, oldest: Snapshot) -> MeltwaterError:
        """History between the start (or the table's beginning) and `oldest`, the oldest
        retained ancestor of the end, has expired (`oldest.parent_id` is gone)."""


@dataclass(frozen=True)
class LineageWalk:
    """The commits after a start up to and including an end, oldest first.

    `expired_skipped`: the parent of the oldest commit, when the history between the start
    and it had expired and was skipped on request (the caller warns about it)."""

    commits: tuple[Snapshot, ...]
    expired_skipped: int | None = None


def walk_back(metadata: TableMetadata, start: int | None, end: Snapshot,
              refusals: LineageRefusals, *, skip_expired: bool = False) -> LineageWalk:
    """The commits after `start` (None: from the table's first) up to and including `end`,
    following `end`'s parent chain; refused, in the caller's words, when `start` is not
    met (see the module doc)."""
    lineage = metadata.ancestors(end.snapshot_id)
    commits: list[Snapshot] = []
    skipped = None
    for snapshot in lineage:
        if snapshot.snapshot_id == start:
            break
        commits.append(snapshot)
    else:
        oldest = lineage[-1]
        if oldest.parent_id != start:
            _check_unmet(metadata, start, oldest, refusals, skip_expired)
            skipped = oldest.parent_id
    commits.reverse()
    return LineageWalk(tuple(commits), skipped)


def _check_unmet(metadata: TableMetadata, start: int | None, oldest: Snapshot,
                 refusals: LineageRefusals, skip_expired: bool) -> None:
    """The walk ran out of retained history at `oldest` without meeting `start`, and
    `oldest`'s parent is not `start`: refuse, unless the history in between expired and
    skipping it was asked for."""
    if start is not None and start in metadata.snapshots:
        raise refusals.not_an_ancestor()
    if oldest.parent_id is None:
        assert start is not None  # a walk from the beginning always meets the first snapshot
        raise refusals.not_on_lineage()
    if not skip_expired:
        raise refusals.expired(oldest)


__all__ = ["LineageRefusals", "LineageWalk", "walk_back"]
