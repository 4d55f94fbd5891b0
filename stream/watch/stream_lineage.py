"""The snapshots a change stream reads next, walked back along the table's lineage.

From an offset to a target snapshot, a stream reads the rest of the offset's own snapshot
when it is unfinished, then every commit after it along the target's lineage, found by the
planner's lineage walk (`meltwater.planner.table.lineage`, which a batch change range also uses),
each numbered by the `_change_ordinal` its rows carry.

**Expired history.** Snapshots that expired before the stream read them fail the stream,
naming them, unless `skip-expired-snapshots=true` skips them with a warning. Nothing else
is ever skipped: a table that vanishes or a file that cannot be read fails the micro-batch,
and since offsets only advance when Spark commits a batch, a restart resumes where it was.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass

from meltwater.planner.errors import ExpiredSnapshotsError, InvalidRangeError, MeltwaterError
from meltwater.planner.table.lineage import walk_back
from meltwater.planner.table.metadata import Snapshot, TableMetadata
from meltwater.planner.table.table_loading import Table
from meltwater.planner.table.table_source import TableSource
from meltwater.stream.watch.plan_cache import PlanCache
from meltwater.stream.watch.stream_offsets import StreamOffset

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Segment:
    """One snapshot's tasks the walk reaches: the commit (or the initial scan)."""

    snapshot: Snapshot
    scan: bool
    ordinal: int
    begin: int  # first task not yet read
    legacy: bool = False  # `begin` counts planner order (a version 1 offset mid-commit)


class StreamLineage:
    """Walks a stream's table from an offset to a target snapshot; `skip_expired`: expired
    history is skipped with a warning (once each) rather than failing the stream."""

    def __init__(self, source: TableSource, plans: PlanCache, *,
                 skip_expired: bool = False) -> None:
        self.source = source
        self.plans = plans  # an unfinished snapshot that expired since may still be planned
        self.skip_expired = skip_expired
        self._warned: set[Hashable] = set()

    def segments(self, table: Table, start: StreamOffset, target: int | None, *,
                 end_ordinal: int | None = None) -> list[Segment]:
        """The snapshots from `start` to `target`, oldest first: `start`'s own when it is
        unfinished, then every commit after it along `target`'s lineage. `end_ordinal`: the
        ordinal of `target`'s commit, when an offset there says it (the commits are numbered
        back from it), else they are numbered on from `start`."""
        metadata = table.metadata
        segments: list[Segment] = []
        if not start.complete and start.snapshot_id is not None:
            snapshot = self.plans.snapshot(start.snapshot_id, start.scan_all_files)
            if snapshot is None:
                snapshot = metadata.snapshots.get(start.snapshot_id)
            if snapshot is not None:
                segments.append(Segment(snapshot, start.scan_all_files, start.ordinal,
                                        start.position, start.legacy))
            else:
                self._expired_start(start)  # raises unless expired snapshots are skipped
        if target is None or target == start.snapshot_id:
            return segments
        after = self._after(metadata, start.snapshot_id, target)
        first = start.ordinal + 1
        if end_ordinal is not None:
            first = end_ordinal - len(after) + 1
        segments.extend(Segment(s, False, first + i, 0) for i, s in enumerate(after))
        return segments

    def _after(self, metadata: TableMetadata, start: int | None,
               target: int) -> tuple[Snapshot, ...]:
        """The commits after `start` up to and including `target`, oldest first."""
        end = metadata.snapshots.get(target)
        if end is None:
            raise ExpiredSnapshotsError(f"snapshot {target} of table {self.source} has "
                                        "expired before the stream read it")
        refusals = _StreamRefusals(self.source, start, target)
        walk = walk_back(metadata, start, end, refusals, skip_expired=self.skip_expired)
        if walk.expired_skipped is not None:
            self._warn(("expired", start, walk.expired_skipped),
                       f"{refusals.expired_history(walk.expired_skipped)}; skipping them "
                       "(skip-expired-snapshots=true)")
        return walk.commits

    def _expired_start(self, start: StreamOffset) -> None:
        message = (f"table {self.source}: snapshot {start.snapshot_id} expired before "
                   f"the stream finished reading it ({start.position} of its tasks read)")
        if not self.skip_expired:
            raise ExpiredSnapshotsError(f"{message}; set skip-expired-snapshots=true to skip "
                                        "the rest of it")
        self._warn(("expired", start.snapshot_id), f"{message}; skipping the rest of it")

    def _warn(self, key: Hashable, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)


@dataclass(frozen=True)
class _StreamRefusals:
    """The lineage walk's refusals, in a stream's words: its offset's snapshot, its
    checkpoint and its option `skip-expired-snapshots`."""

    source: TableSource
    start: int | None
    target: int

    def not_an_ancestor(self) -> MeltwaterError:
        return InvalidRangeError(f"table {self.source}: the stream's snapshot {self.start} is "
                                 f"not an ancestor of snapshot {self.target} (was the table "
                                 "rolled back?); start a new checkpoint to follow the new "
                                 "history")

    def not_on_lineage(self) -> MeltwaterError:
        return InvalidRangeError(f"table {self.source}: the stream's snapshot {self.start} is "
                                 f"not an ancestor of snapshot {self.target}")

    def expired_history(self, parent: int) -> str:
        """What expired: the snapshots after the stream's up to `parent`."""
        since = ("the table's first snapshot" if self.start is None
                 else f"snapshot {self.start}")
        return (f"table {self.source}: the snapshots after {since} up to {parent} have "
                "expired before the stream read them")

    def expired(self, oldest: Snapshot) -> MeltwaterError:
        assert oldest.parent_id is not None
        return ExpiredSnapshotsError(f"{self.expired_history(oldest.parent_id)}; set "
                                     "skip-expired-snapshots=true to skip them and go on "
                                     f"from snapshot {oldest.snapshot_id}")
