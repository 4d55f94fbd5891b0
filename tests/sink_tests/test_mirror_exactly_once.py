"""Exactly once: replays are skipped, a crash before commit leaves nothing, bad input nothing.

Uses the corpus table `equality_deletes` (identifier field `id`), one batch per commit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from mirror_read import fetch, read_mirror

import meltwater.stream
from corpus.compare import row_multiset
from meltwater.planner.table.table_loading import load_table
from meltwater.sinks import Mirror
from meltwater.sinks.errors import BatchMismatchError, InvalidChangesError, NullKeyError
from meltwater.sinks.ledger import Ledger
from meltwater.stream.watch.stream_offsets import StreamOffset

NAME = "equality_deletes"


@pytest.fixture
def table(corpus):
    scenario = corpus.scenarios[NAME]
    metadata = load_table(scenario.location).metadata
    main = [s.snapshot_id for s in reversed(metadata.ancestors(metadata.current_snapshot_id))]
    batches = []
    start = None
    for snapshot_id in main:
        batches.append(meltwater.stream.changes(scenario.location, from_snapshot_id=start,
                                                to_snapshot_id=snapshot_id).read_all())
        start = snapshot_id
    return scenario, metadata, main, batches


def state(url: str, metadata) -> tuple:
    """Everything a batch could change: the mirror's rows and the ledger's entries."""
    ledger = fetch(url, "SELECT pipeline, batch_id, snapshot_id, sequence_number, row_count, "
                        "upserted, deleted FROM meltwater_ledger ORDER BY batch_id")
    return row_multiset(read_mirror(url, NAME, metadata.schema)), ledger


def test_a_replayed_batch_is_skipped_and_changes_nothing(database, table):
    scenario, metadata, main, batches = table
    with Mirror(database, table=NAME, source=scenario.location) as mirror:
        for batch_id in range(4):
            mirror.apply(batch_id, batches[batch_id])
        before = state(database, metadata)
        for batch_id in (3, 1, 0):  # the last batch, as Spark replays it, and older ones
            result = mirror.apply(batch_id, batches[batch_id])
            assert result.skipped and (result.upserted, result.deleted) == (0, 0)
            assert result.position.batch_id == 3 and result.position.snapshot_id == main[3]
        assert state(database, metadata) == before
    with Mirror(database, table=NAME, source=scenario.location) as reopened:
        assert reopened.apply(2, batches[2]).skipped  # the ledger is in the database
        assert reopened.reached().snapshot_id == main[3]
        assert not reopened.apply(4, batches[4]).skipped


def test_a_replay_with_other_rows_is_refused(database, table):
    scenario, _, _, batches = table
    with Mirror(database, table=NAME, source=scenario.location) as mirror:
        mirror.apply(0, batches[0])
        with pytest.raises(BatchMismatchError, match=r"batch 0 of pipeline 'equality_deletes' was "
                                                r"applied with 24 change rows .* new pipeline"):
            mirror.apply(0, batches[1])


def test_an_exception_before_commit_leaves_neither_rows_nor_ledger_entry(database, table,
                                                                         monkeypatch):
    scenario, metadata, main, batches = table
    with Mirror(database, table=NAME, source=scenario.location) as mirror:
        mirror.apply(0, batches[0])
        before = state(database, metadata)
        real_record = Ledger.record

        def record_then_fail(self, entry):
            real_record(self, entry)  # rows and ledger entry written, commit not reached
            raise RuntimeError("injected crash before commit")

        monkeypatch.setattr(Ledger, "record", record_then_fail)
        with pytest.raises(RuntimeError, match="injected"):
            mirror.apply(1, batches[1])
        assert state(database, metadata) == before
        assert mirror.reached().batch_id == 0
        monkeypatch.setattr(Ledger, "record", real_record)
        result = mirror.apply(1, batches[1])  # the retry applies it: it was never recorded
        assert not result.skipped and result.deleted == 2
        assert mirror.reached().snapshot_id == main[1]


CRASHING_CHILD = textwrap.dedent("""
    import os, sys
    import pyarrow as pa
    from meltwater.sinks import Mirror
    from meltwater.sinks.ledger import Ledger

    url, source, path = sys.argv[1:4]
    batch = pa.ipc.open_file(path).read_all()
    real_record = Ledger.record

    def record_then_die(self, entry):
        real_record(self, entry)
        os._exit(3)  # the process dies inside the transaction, nothing flushed or closed

    Ledger.record = record_then_die
    Mirror(url, table="equality_deletes", source=source).apply(1, batch)
""")


def test_a_process_killed_before_commit_leaves_nothing(database, table, tmp_path):
    scenario, metadata, main, batches = table
    with Mirror(database, table=NAME, source=scenario.location) as mirror:
        mirror.apply(0, batches[0])
        before = state(database, metadata)
        path = tmp_path / "batch.arrow"
        with pa.ipc.new_file(path, batches[1].schema) as writer:
            writer.write_table(batches[1])
        child = subprocess.run([sys.executable, "-c", CRASHING_CHILD, database,
                                scenario.location, str(path)], capture_output=True, text=True,
                               timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert child.returncode == 3, child.stderr
        assert state(database, metadata) == before
        assert not mirror.apply(1, batches[1]).skipped
        assert mirror.reached().snapshot_id == main[1]


def test_an_empty_batch_counts_as_done_and_keeps_the_position(database, table):
    scenario, _, main, batches = table
    with Mirror(database, table=NAME, source=scenario.location) as mirror:
        mirror.apply(0, batches[0])
        empty = batches[0].slice(0, 0)
        result = mirror.apply(1, empty)
        assert not result.skipped and result.rows == 0
        assert (result.position.batch_id, result.position.snapshot_id) == (1, main[0])
        assert mirror.apply(1, empty).skipped
        result = mirror.apply(2, empty, snapshot_id=main[1], sequence_number=2)
        assert (result.position.snapshot_id, result.position.sequence_number) == (main[1], 2)


def test_a_batch_end_offset_is_the_snapshot_the_mirror_holds_whole(database, table):
    """Given where a batch's stream read ends (the service reads it from Spark's checkpoint),
    the ledger names the newest snapshot the mirror then holds whole: the end's snapshot
    even for a batch without rows (the table's last two commits change nothing, and the
    rows alone would leave the position behind), the parent of a commit the batch ends
    inside, as read limits split one."""
    scenario, metadata, main, batches = table
    assert batches[-1].num_rows == batches[-2].num_rows == 0
    with Mirror(database, table=NAME, source=scenario.location) as mirror:
        mirror.apply(0, batches[0], end=StreamOffset(main[0], 3, complete=True, ordinal=0))
        part = StreamOffset(main[1], 1, complete=False, ordinal=1)  # main[1] read in part
        assert mirror.apply(1, batches[1], end=part).position.snapshot_id == main[0]
        rest = StreamOffset(main[1], 2, complete=True, ordinal=1)
        result = mirror.apply(2, batches[1].slice(0, 0), end=rest)
        assert (result.position.snapshot_id, result.position.sequence_number) == (
            main[1], metadata.snapshot(main[1]).sequence_number)
        for batch_id in range(3, len(main) + 1):
            snapshot_id = main[batch_id - 1]
            end = StreamOffset(snapshot_id, 1, complete=True, ordinal=batch_id - 1)
            result = mirror.apply(batch_id, batches[batch_id - 1], end=end)
            assert result.position.snapshot_id == snapshot_id, batch_id
        assert mirror.reached().sequence_number == metadata.snapshot(main[-1]).sequence_number
        assert mirror.apply(len(main), batches[-1], end=end).skipped  # Spark's replay


def test_a_refused_batch_applies_nothing(database, table):
    scenario, metadata, _, batches = table
    with Mirror(database, table=NAME, source=scenario.location) as mirror:
        mirror.apply(0, batches[0])
        before = state(database, metadata)
        ids = batches[1].column("id").to_pylist()
        nulled = batches[1].set_column(batches[1].column_names.index("id"), "id",
                                       pa.array([None, *ids[1:]], pa.int32()))
        with pytest.raises(NullKeyError, match="batch 1 of pipeline 'equality_deletes' has 1 "
                                          "change row"):
            mirror.apply(1, nulled)
        with pytest.raises(InvalidChangesError, match="lacks key column 'id'"):
            mirror.apply(1, batches[1].drop_columns(["id"]))
        assert state(database, metadata) == before


def test_pipelines_keep_separate_ledgers_in_one_database(database, table):
    scenario, _, main, batches = table
    with Mirror(database, table=NAME, source=scenario.location, pipeline="a") as first, \
            Mirror(database, table="other", source=scenario.location, pipeline="b") as second:
        first.apply(0, batches[0])
        assert second.reached() is None
        assert not second.apply(0, batches[0]).skipped
        assert first.reached().snapshot_id == second.reached().snapshot_id == main[0]
