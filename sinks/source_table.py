"""The source table as the sinks see it: where a batch leaves a sink, and whether it came before.

A sink records, with each batch, the snapshot of the source table it then holds (the
mirror in its ledger, the Kafka sink in its batch marker), and the service shows the same
snapshot and its sequence number. Every one of them asks the table the same questions,
answered here once:

- a snapshot's parent, sequence number and schema (`SourceTable`): a batch may name a
  commit that landed after the sink read the table's metadata, so an unknown snapshot
  makes it read the metadata again, once per question; `parent_in` and
  `sequence_number_in` answer from metadata already read, without reading;
- the commit a batch reaches (`stated_end`, `batch_reach`): where the caller says the
  batch ends (the snapshot held whole at its stream offset, or the snapshot given), else
  the batch's last commit (`last_commit`: the highest `_change_ordinal`), else, for an
  empty batch, the previous batch's, carried forward;
- the columns a sink keys rows by (`key_column_names`): those configured, else the
  table's identifier fields;
- whether a batch id the sink has seen is Spark's replay of that batch or another batch
  under a reused id (`check_replay`): the same count and end, or refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.spec.types import Schema
from meltwater.planner.table.metadata import Snapshot, TableMetadata
from meltwater.planner.table.table_loading import load_table
from meltwater.planner.table.table_source import TableSource
from meltwater.sinks.errors import BatchMismatchError
from meltwater.stream.engine.changes.change_schema import (
    CHANGE_ORDINAL,
    COMMIT_SEQUENCE_NUMBER,
    COMMIT_SNAPSHOT_ID,
)
from meltwater.stream.watch.stream_offsets import StreamOffset


class CommitPoint(NamedTuple):
    """A commit of the source table as a sink records it: its snapshot id and sequence
    number, either unknown (None)."""

    snapshot_id: int | None
    sequence_number: int | None


NO_COMMIT = CommitPoint(None, None)


# -- snapshots -------------------------------------------------------------------------------


def parent_in(metadata: TableMetadata | None, snapshot_id: int) -> int | None:
    """The parent of a snapshot, if `metadata` holds the snapshot (and it has one)."""
    snapshot = None if metadata is None else metadata.snapshots.get(snapshot_id)
    return None if snapshot is None else snapshot.parent_id


def sequence_number_in(metadata: TableMetadata | None, snapshot_id: int | None) -> int | None:
    """The sequence number of a snapshot, if `metadata` holds the snapshot."""
    if metadata is None or snapshot_id is None:
        return None
    snapshot = metadata.snapshots.get(snapshot_id)
    return None if snapshot is None else snapshot.sequence_number


class SourceTable:
    """A table's metadata as a sink last read it, read again when asked about a snapshot it
    does not hold (see the module doc)."""

    def __init__(self, table: TableSource | str, metadata: TableMetadata | None = None) -> None:
        self.table = table
        self._metadata = metadata

    @classmethod
    def read_now(cls, table: TableSource | str) -> SourceTable:
        """The table, its metadata read now (a table that cannot be read fails here)."""
        source = cls(table)
        source.read()
        return source

    @property
    def last_read(self) -> TableMetadata | None:
        """The metadata as last read; None before the first read."""
        return self._metadata

    @property
    def metadata(self) -> TableMetadata:
        """The metadata as last read, read now if never."""
        return self._metadata if self._metadata is not None else self.read()

    def read(self) -> TableMetadata:
        """Read the table's metadata now; what was read before is kept if this fails."""
        self._metadata = load_table(self.table).metadata
        return self._metadata

    def snapshot(self, snapshot_id: int) -> Snapshot | None:
        """A snapshot of the table, the metadata read again first if it does not hold it;
        None if the table no longer has it (expired) or never had it."""
        metadata = self._metadata
        if metadata is None or snapshot_id not in metadata.snapshots:
            metadata = self.read()
        return metadata.snapshots.get(snapshot_id)

    def parent_of(self, snapshot_id: int) -> int | None:
        """A snapshot's parent (reading the metadata again if it is newer than ours)."""
        snapshot = self.snapshot(snapshot_id)
        return None if snapshot is None else snapshot.parent_id

    def sequence_number(self, snapshot_id: int | None) -> int | None:
        """A snapshot's sequence number (reading the metadata again if it is newer)."""
        snapshot = None if snapshot_id is None else self.snapshot(snapshot_id)
        return None if snapshot is None else snapshot.sequence_number

    def schema_at(self, snapshot_id: int, *, unknown_as_current: bool = False) -> Schema:
        """The schema a commit was written in (reading the metadata again if the commit is
        newer than ours).

        A commit the table no longer has is a NoSuchSnapshotError, unless
        `unknown_as_current`, which answers the table's current schema. The mirror refuses:
        it puts the rows' values into SQL columns by this schema. The Kafka sink takes the
        current one: it only names its images' fields by it."""
        snapshot = self.snapshot(snapshot_id)
        metadata = self.metadata
        if snapshot is None and not unknown_as_current:
            metadata.snapshot(snapshot_id)  # raises NoSuchSnapshotError naming the table
        return metadata.schema_for(snapshot)

    def held(self, end: StreamOffset) -> CommitPoint:
        """The commit a sink holds whole once a batch ending at `end` is applied
        (`StreamOffset.held_snapshot`), with its sequence number."""
        snapshot_id = end.held_snapshot(self.parent_of)
        return CommitPoint(snapshot_id, self.sequence_number(snapshot_id))


def _no_parent(_snapshot_id: int) -> int | None:
    return None


def key_column_names(key: Sequence[str] | None, schema: Schema) -> list[str]:
    """The columns a sink keys rows by: those configured, else the table's identifier
    fields (none: the sink refuses, asking for `key`)."""
    return list(key) if key else [schema.column_name(f) for f in schema.identifier_field_ids]


# -- where a batch ends ----------------------------------------------------------------------


def last_commit(batch: pa.Table) -> CommitPoint:
    """The batch's last commit: that of its row with the highest `_change_ordinal` (one
    ordinal is one commit); NO_COMMIT for an empty batch or one without ordinals. A column
    the batch lacks leaves its part None."""
    if batch.num_rows == 0 or CHANGE_ORDINAL not in batch.column_names:
        return NO_COMMIT
    ordinals = pc.cast(batch.column(CHANGE_ORDINAL), pa.int64())
    highest = pc.max(ordinals)
    if not highest.is_valid:
        return NO_COMMIT
    row = pc.index(ordinals, highest).as_py()
    return CommitPoint(*(batch.column(name)[row].as_py() if name in batch.column_names else None
                         for name in (COMMIT_SNAPSHOT_ID, COMMIT_SEQUENCE_NUMBER)))


def stated_end(end: StreamOffset | None, snapshot_id: int | None,
               sequence_number: int | None, table: SourceTable | None) -> CommitPoint | None:
    """Where the caller of a sink's `apply` says the batch ends: the commit held whole at
    the stream offset `end` (`SourceTable.held`), else the `snapshot_id` and
    `sequence_number` given; None if it says neither. Without a table (a mirror of a given
    `Schema`) no parent is known, and no sequence number."""
    if end is not None:
        if table is None:
            return CommitPoint(end.held_snapshot(_no_parent), None)
        return table.held(end)
    if snapshot_id is not None:
        return CommitPoint(snapshot_id, sequence_number)
    return None


def batch_reach(batch: pa.Table, stated: CommitPoint | None,
                previous: Callable[[], CommitPoint | None], *,
                last: CommitPoint | None = None) -> CommitPoint:
    """The commit a sink holds once `batch` is applied: where the caller says it ends
    (`stated_end`), else its last commit (`last`, if the caller has it already), else (an
    empty batch, or rows that name no commit) the `previous` batch's, carried forward."""
    if stated is not None:
        return stated
    commit = last if last is not None else last_commit(batch)
    if commit.snapshot_id is not None:
        return commit
    return previous() or NO_COMMIT


# -- replays ---------------------------------------------------------------------------------


class BatchRecord(Enum):
    """What a sink keeps of the batches it applied, which decides how it checks a replay.

    Spark replays a micro-batch after a crash under the same batch id, and that batch may
    already be in the sink: the sink skips it, after checking it is the same batch (the
    same count, up to the same snapshot), because a new checkpoint under the old ledger
    name or transactional id starts its batch ids again from 0, and its batches must be
    refused, not skipped.

    `LEDGER` (the mirror, `meltwater.sinks.ledger`): a row for every batch, committed with
    its rows. Any batch id it holds is a replay and is checked against that batch's own
    row; the caller of `Mirror.apply` may replay any of them. The snapshot is compared only
    when the caller says where the batch ends: otherwise the entry holds a position worked
    out while applying (an empty batch takes the previous entry's, which for a batch
    replayed after later ones is a later batch's now).

    `MARKER` (the Kafka sink, `meltwater.sinks.kafka_client.BatchMarker`): the last batch
    only, one compacted message per transactional id, written in the batch's transaction.
    Spark replays only its last batch, so an older batch id is refused; the last one is
    checked against the marker, events and snapshot, the snapshot always (the sink works it
    out before the check, and the previous position is the marker's own).
    """

    LEDGER = "ledger"
    MARKER = "marker"


@dataclass(frozen=True)
class AppliedBatch:
    """A batch as a sink's record holds it: its id, what it counted (change rows in a
    ledger, events in a marker), the snapshot it reached, and whose record it is (the
    marker's transactional id)."""

    batch_id: int
    count: int
    snapshot_id: int | None
    writer: str = ""


def check_replay(record: BatchRecord, recorded: AppliedBatch, arriving: AppliedBatch,
                 what: str) -> None:
    """Refuse (BatchMismatchError) a batch id the sink holds that comes again as another
    batch (see `BatchRecord`); return if it is the replay of `recorded`."""
    if record is BatchRecord.LEDGER:
        if recorded.count != arriving.count or (
                arriving.snapshot_id is not None
                and arriving.snapshot_id != recorded.snapshot_id):
            raise BatchMismatchError(
                f"{what} was applied with {recorded.count} change rows up to snapshot "
                f"{recorded.snapshot_id}, and now arrives with {arriving.count} rows up to "
                f"snapshot {arriving.snapshot_id}: the stream's checkpoint and the ledger "
                "disagree (a stream restarted from a new checkpoint needs a new pipeline "
                "name)")
        return
    if arriving.batch_id < recorded.batch_id:
        raise BatchMismatchError(
            f"{what}: transactional id {recorded.writer} last committed batch "
            f"{recorded.batch_id}, and Spark replays only its last batch: a new checkpoint "
            "needs a new transactional-id")
    if (recorded.count, recorded.snapshot_id) != (arriving.count, arriving.snapshot_id):
        raise BatchMismatchError(
            f"{what} was written with {recorded.count} events up to snapshot "
            f"{recorded.snapshot_id}, and came again with {arriving.count} up to "
            f"{arriving.snapshot_id}: a new checkpoint needs a new transactional-id")
