"""What a change stream's offset means: `StreamOffset`, as Spark's checkpoints store it.

A stream's position is a `StreamOffset`, stored by Spark in the query's checkpoint as JSON,
the way Iceberg's own `StreamingOffset` is::

    {"version": 2, "snapshot_id": 5140426932827412781, "position": 3, "complete": false,
     "scan_all_files": false, "ordinal": 2}

reads "every commit before snapshot 5140... along the table's lineage, and the first 3
tasks of that snapshot's commit, have been read". The tasks are the incremental planner's
change tasks of the commit (`IncrementalPlanner.plan_commit`) in *unit order*
(`meltwater.planner.changes.commit_units`), a function of the commit's immutable manifests and the
table's specs, so one huge commit can be spread over several micro-batches. `complete`
marks the commit as read whole (then `position` is its task count, or 0 for the exclusive
start of the stream), so an offset never needs the next snapshot, which may not exist yet.
`scan_all_files` means the positions index the snapshot's *contents* (a table scan,
emitted as INSERTs) instead of its commit: the `starting-snapshot-as-inserts` mode.
`ordinal` is `_change_ordinal` of that snapshot's rows: commits are numbered from 0 in the
order the stream reads them, so a stream started at snapshot S emits the same ordinals as
`meltwater.stream.changes(table, from_snapshot_id=S)`. The table's location lives in the
query's options, not the offset.

Version 1 offsets (before units) counted tasks in the planner's order and cut anywhere.
They are still read: a complete one, or one at position 0, means the same in both orders;
one mid-commit replays its micro-batch as version 1 read it, and the next micro-batch
finishes that commit whole, in one part, so every task is read exactly once. A version 2
position that is not between two units (a checkpoint from another meltwater) is refused,
saying to start a new checkpoint.

**Splitting a commit never changes its rows.** The union of a limited stream's
micro-batches is the unlimited feed, row for row:

- Carry-over removal compares a commit's DELETEs with its INSERTs, and the two copies of
  a row rewritten unchanged are in one unit (a partition, across specs whatever no shared
  partition field tells apart; see `meltwater.planner.changes.commit_units`), so cutting between
  units never separates them. A commit that only adds or only removes rows cancels
  nothing: each of its tasks is a unit, and the Spark source also spreads such commits
  over partitions.
- Update pairing matches a DELETE and an INSERT by key, and a key may cross units (an
  update moving a row to another partition, pairing by `_row_id`). A part of such a commit
  carries the commit's tasks (`CommitPart.pairing`); it holds back the rows whose key
  another unit also has, and the commit's last part emits them, paired over the whole
  commit (`meltwater.stream.engine.changes.held_changes`). The held rows are *recomputed*,
  not stored: each part re-reads the key columns of its units' key group, the last part the rows it
  emits, all from immutable files. A checkpoint therefore holds nothing but the offset
  (bounded, whatever the commit), a replayed micro-batch emits exactly the same rows, and
  a driver killed mid-batch loses or duplicates nothing: Spark replays the batch's
  offsets, which determine its rows. The price is reading: every part of such a commit
  reads the key columns of its key group, the last part also the held units' rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from meltwater.planner.errors import OffsetError

OFFSET_VERSION = 2
LEGACY_OFFSET_VERSION = 1  # positions in planner task order, cut anywhere



@dataclass(frozen=True)
class StreamOffset:
    """A position in a table's change stream (see the module doc)."""

    snapshot_id: int | None  # None: before the table's first snapshot
    position: int = 0  # index of the next task of snapshot_id's commit (or scan)
    complete: bool = False  # snapshot_id's commit (or scan) is read whole
    scan_all_files: bool = False  # positions index the snapshot's contents, as INSERTs
    ordinal: int = -1  # _change_ordinal of snapshot_id's rows (-1: the exclusive start)
    version: int = OFFSET_VERSION  # 1: `position` counts tasks in planner order

    @property
    def legacy(self) -> bool:
        """Whether `position` is mid-commit in the planner's task order (a version 1
        offset), not in unit order: the rest of that commit is then read as version 1
        read it, in one part."""
        return (self.version == LEGACY_OFFSET_VERSION and not self.complete
                and self.position > 0)

    def held_snapshot(self, parent_of: Callable[[int], int | None]) -> int | None:
        """The newest snapshot whose whole state a reader that stopped here has read (what a
        sink holds after the batch ending at this offset): the snapshot itself once its
        commit, or with `scan_all_files` its contents, is read whole; the parent (by
        `parent_of`) of a commit read in part, as read limits split one; None in the middle
        of a contents scan, and before the table's first snapshot."""
        if self.snapshot_id is None:
            return None
        if self.complete:
            return self.snapshot_id
        return None if self.scan_all_files else parent_of(self.snapshot_id)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict with a fixed key order, so equal offsets serialize equally."""
        return {"version": self.version, "snapshot_id": self.snapshot_id,
                "position": self.position, "complete": self.complete,
                "scan_all_files": self.scan_all_files, "ordinal": self.ordinal}

    @classmethod
    def from_json(cls, obj: Any) -> StreamOffset:
        """The offset a checkpoint stored (`to_json`'s form); OffsetError for anything else,
        naming what is wrong."""
        if not isinstance(obj, dict):
            raise OffsetError(f"offset {obj!r}: expected a JSON object")
        version = obj.get("version")
        if version not in (LEGACY_OFFSET_VERSION, OFFSET_VERSION) or isinstance(version, bool):
            raise OffsetError(f"offset {obj!r}: unknown version {version!r} (this meltwater "
                              f"reads versions {LEGACY_OFFSET_VERSION} and {OFFSET_VERSION}); "
                              "use the meltwater version that wrote the checkpoint, or start "
                              "a new checkpoint")
        try:
            snapshot_id = obj["snapshot_id"]
            offset = cls(None if snapshot_id is None else int(snapshot_id),
                         int(obj["position"]), bool(obj["complete"]),
                         bool(obj.get("scan_all_files", False)), int(obj["ordinal"]),
                         int(version))
        except (KeyError, TypeError, ValueError) as error:
            raise OffsetError(f"offset {obj!r}: malformed ({error!r})") from error
        if offset.position < 0:
            raise OffsetError(f"offset {obj!r}: negative position")
        return offset
