"""The sinks' view of the source table: snapshots looked up with one read when unknown, the
commit a batch reaches, and the replay check of a ledger and of a marker."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

import meltwater.sinks.source_table as source_table
from meltwater.planner.errors import NoSuchSnapshotError
from meltwater.planner.spec.types import parse_schema
from meltwater.planner.table.metadata import parse_metadata
from meltwater.sinks.errors import BatchMismatchError
from meltwater.sinks.source_table import (
    NO_COMMIT,
    AppliedBatch,
    BatchRecord,
    CommitPoint,
    SourceTable,
    batch_reach,
    check_replay,
    key_column_names,
    last_commit,
    parent_in,
    sequence_number_in,
    stated_end,
)
from meltwater.stream.watch.stream_offsets import StreamOffset

ID = {"id": 1, "name": "id", "required": True, "type": "long"}
V = {"id": 2, "name": "v", "required": False, "type": "string"}
W = {"id": 3, "name": "w", "required": False, "type": "int"}


def metadata(*snapshots: tuple[int, int | None, int]):
    """Metadata whose snapshots are (id, parent, schema id), sequence number = id; schema 0
    is (id, v), schema 1 adds w and is current."""
    return parse_metadata({
        "format-version": 2, "location": "/warehouse/db/t", "last-sequence-number": 9,
        "current-schema-id": 1,
        "schemas": [{"type": "struct", "schema-id": 0, "fields": [ID, V]},
                    {"type": "struct", "schema-id": 1, "fields": [ID, V, W]}],
        "snapshots": [{"snapshot-id": s, "parent-snapshot-id": p, "sequence-number": s,
                       "timestamp-ms": 1000 * s, "schema-id": schema}
                      for s, p, schema in snapshots],
        "current-snapshot-id": snapshots[-1][0] if snapshots else None,
    })


OLD = metadata((1, None, 0), (2, 1, 0))
NEW = metadata((1, None, 0), (2, 1, 0), (3, 2, 1))


@pytest.fixture
def reads(monkeypatch):
    """Every metadata read of a `SourceTable`: each answers the next of `reads.answers`."""
    log = SimpleNamespace(count=0, answers=[OLD, NEW])

    def load_table(table):
        assert table == "/warehouse/db/t"
        log.count += 1
        answer = log.answers[min(log.count, len(log.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(metadata=answer)

    monkeypatch.setattr(source_table, "load_table", load_table)
    return log


def test_a_known_snapshot_is_answered_without_reading(reads):
    table = SourceTable.read_now("/warehouse/db/t")
    assert reads.count == 1 and table.last_read is OLD
    assert (table.parent_of(2), table.sequence_number(2)) == (1, 2)
    assert table.parent_of(1) is None and table.sequence_number(None) is None
    assert [f.name for f in table.schema_at(2).fields] == ["id", "v"]
    assert reads.count == 1


def test_a_newer_snapshot_reads_the_metadata_again_once(reads):
    table = SourceTable("/warehouse/db/t")
    assert table.last_read is None
    assert table.metadata is OLD and reads.count == 1  # read once, when first needed
    assert table.parent_of(3) == 2 and reads.count == 2
    assert table.sequence_number(3) == 3
    assert [f.name for f in table.schema_at(3).fields] == ["id", "v", "w"]
    assert table.last_read is NEW and reads.count == 2


def test_a_snapshot_the_table_does_not_have_is_read_for_each_time_and_is_none(reads):
    table = SourceTable.read_now("/warehouse/db/t")
    assert table.parent_of(99) is None and table.sequence_number(99) is None
    assert reads.count == 3
    with pytest.raises(NoSuchSnapshotError, match="snapshot 99 does not exist"):
        table.schema_at(99)
    # the Kafka sink's images: named as the table names them now
    assert [f.name for f in table.schema_at(99, unknown_as_current=True).fields] == \
        ["id", "v", "w"]


def test_a_failed_read_keeps_what_was_read(reads):
    reads.answers = [OLD, OSError("gone")]
    table = SourceTable.read_now("/warehouse/db/t")
    with pytest.raises(OSError, match="gone"):
        table.snapshot(3)
    assert table.last_read is OLD


def test_lookups_in_metadata_read_already():
    assert (parent_in(NEW, 3), sequence_number_in(NEW, 3)) == (2, 3)
    assert parent_in(OLD, 3) is None and sequence_number_in(OLD, 3) is None
    assert parent_in(None, 3) is None and sequence_number_in(None, 3) is None
    assert sequence_number_in(NEW, None) is None


@pytest.mark.usefixtures("reads")
def test_held_is_the_snapshot_read_whole_with_its_sequence_number():
    table = SourceTable.read_now("/warehouse/db/t")
    assert table.held(StreamOffset(2, 5, complete=True)) == (2, 2)
    assert table.held(StreamOffset(3, 1, complete=False)) == (2, 2)  # 3 read in part
    assert table.held(StreamOffset(3, 1, scan_all_files=True)) == NO_COMMIT
    assert table.held(StreamOffset(None)) == NO_COMMIT


@pytest.mark.usefixtures("reads")
def test_the_stated_end_is_the_offsets_else_the_snapshot_given():
    table = SourceTable.read_now("/warehouse/db/t")
    assert stated_end(StreamOffset(3, 1), 7, 7, table) == (2, 2)
    assert stated_end(None, 7, 8, table) == (7, 8)
    assert stated_end(None, None, 8, table) is None
    # no table (a mirror of a given schema): no parent, no sequence number
    assert stated_end(StreamOffset(3, 1, complete=True), None, None, None) == (3, None)
    assert stated_end(StreamOffset(3, 1), None, None, None) == NO_COMMIT


def test_a_sink_keys_by_the_columns_given_else_the_identifier_fields():
    keyed = parse_schema({"schema-id": 0, "fields": [ID, V], "identifier-field-ids": [1]})
    assert key_column_names(None, keyed) == ["id"]
    assert key_column_names(["v"], keyed) == ["v"]
    assert key_column_names([], NEW.schema) == []  # the sink refuses, asking for `key`


def changes(ordinals, snapshots, sequences=None) -> pa.Table:
    data = {"_change_ordinal": pa.array(ordinals, pa.int32()),
            "_commit_snapshot_id": pa.array(snapshots, pa.int64())}
    if sequences is not None:
        data["_commit_sequence_number"] = pa.array(sequences, pa.int64())
    return pa.table(data)


def test_the_last_commit_is_the_highest_ordinals_not_the_last_rows():
    assert last_commit(changes([0, 2, 1], [10, 12, 11], [1, 3, 2])) == (12, 3)
    assert last_commit(changes([0, 2, 1], [10, 12, 11])) == (12, None)
    assert last_commit(changes([], [])) == NO_COMMIT
    assert last_commit(pa.table({"_commit_snapshot_id": [1]})) == NO_COMMIT
    assert last_commit(pa.table({"_change_ordinal": [0, 1]})) == NO_COMMIT  # names none


def test_a_batch_reaches_its_stated_end_else_its_last_commit_else_the_previous():
    rows = changes([0, 1], [10, 11], [1, 2])
    asked = []

    def previous():
        asked.append(True)
        return CommitPoint(5, 4)

    assert batch_reach(rows, CommitPoint(7, None), previous) == (7, None)
    assert batch_reach(rows, NO_COMMIT, previous) == NO_COMMIT  # an end holding nothing yet
    assert batch_reach(rows, None, previous) == (11, 2)
    assert batch_reach(rows, None, previous, last=CommitPoint(12, 3)) == (12, 3)
    assert not asked
    assert batch_reach(rows.slice(0, 0), None, previous) == (5, 4)
    assert batch_reach(rows.slice(0, 0), None, lambda: None) == NO_COMMIT


def test_a_ledger_checks_any_batch_it_holds_and_the_snapshot_only_when_stated():
    recorded = AppliedBatch(3, 24, 42)
    check_replay(BatchRecord.LEDGER, recorded, AppliedBatch(3, 24, 42), "batch 3")
    check_replay(BatchRecord.LEDGER, recorded, AppliedBatch(3, 24, None), "batch 3")
    with pytest.raises(BatchMismatchError, match=r"^batch 3 was applied with 24 change rows "
                                                 r"up to snapshot 42, and now arrives with 9 "
                                                 r"rows up to snapshot None: .* new pipeline"):
        check_replay(BatchRecord.LEDGER, recorded, AppliedBatch(3, 9, None), "batch 3")
    with pytest.raises(BatchMismatchError, match="up to snapshot 43"):
        check_replay(BatchRecord.LEDGER, recorded, AppliedBatch(3, 24, 43), "batch 3")


def test_a_marker_refuses_an_older_batch_and_checks_the_snapshot_always():
    marker = AppliedBatch(5, 7, 42, "meltwater-orders")
    check_replay(BatchRecord.MARKER, marker, AppliedBatch(5, 7, 42), "batch 5")
    check_replay(BatchRecord.MARKER, AppliedBatch(5, 0, None, "t"), AppliedBatch(5, 0, None),
                 "batch 5")
    with pytest.raises(BatchMismatchError, match=r"^batch 4: transactional id meltwater-orders "
                                                 r"last committed batch 5, and Spark replays "
                                                 r"only its last batch"):
        check_replay(BatchRecord.MARKER, marker, AppliedBatch(4, 7, 42), "batch 4")
    for other in (AppliedBatch(5, 8, 42), AppliedBatch(5, 7, None)):
        with pytest.raises(BatchMismatchError, match=r"^batch 5 was written with 7 events up "
                                                     r"to snapshot 42, and came again with"):
            check_replay(BatchRecord.MARKER, marker, other, "batch 5")
