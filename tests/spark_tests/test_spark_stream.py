"""The `meltwater` streaming source: offsets, admission control, restarts, clusters.

Most tests drive `MeltwaterStreamReader` the way Spark's driver does (initialOffset,
latestOffset with the default read limit, partitions, commit; offsets through JSON) and
read its partitions after a pickle round trip, as an executor would; they compare with
`meltwater.stream.changes`, itself checked against Iceberg Java in
test_changes_interop.py. Then real streaming queries: AvailableNow with and without limits
in the test session, a query killed with SIGKILL mid-batch and restarted from its
checkpoint, and a query on `local-cluster[2,1,1024]`, each in a child process
(`tests/spark_tests/stream_query.py`).

Tables that must change under a running stream are copies of a corpus table's metadata
files moved from version to version (data and manifests stay where they are); a
running reader sees such a change once its table watcher has (`_seen` waits for that).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
)

import meltwater.stream
from corpus.compare import _canonical, assert_same_rows
from meltwater.planner.changes import micro_batch
from meltwater.planner.changes.commit_units import commit_units
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.changes.micro_batch import UNLIMITED, Budget, Cost, pack_parts, task_cost
from meltwater.planner.errors import (
    CorruptMetadataError,
    ExpiredSnapshotsError,
    InvalidRangeError,
    NoSuchSnapshotError,
    NoSuchTableError,
    StreamError,
)
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.errors import OptionError, SchemaChangedError
from meltwater.stream.spark.arrow_types import spark_arrow_schema
from meltwater.stream.spark.options import stream_read
from meltwater.stream.spark.partitions import ChangePartition
from meltwater.stream.spark.source import change_schema_for
from meltwater.stream.spark.stream_reader import MeltwaterStreamReader
from meltwater.stream.watch.stream_offsets import StreamOffset

HERE = Path(__file__).parent
META = ("_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_sequence_number",
        "_commit_timestamp", "_row_id", "_last_updated_sequence_number")
REMOVES = {"DELETE", "UPDATE_BEFORE"}


# -- driving a reader as Spark's driver does -------------------------------------------------


def _reader(location: str, **options) -> MeltwaterStreamReader:
    opts = {"path": location, **{k: str(v) for k, v in options.items()}}
    if not {"start-snapshot-id", "stream-from-timestamp", "startingVersion",
            "startingTimestamp", "starting"} & set(opts):
        opts["starting"] = "earliest"
    return MeltwaterStreamReader(opts, _stream_schema(location))


def _stream_schema(location: str):
    """The schema Spark hands the reader: the current snapshot's change schema (asked of
    an empty range, which a table with expired history also has)."""
    current = load_table(location).metadata.current_snapshot_id
    options = {"path": location}
    if current is not None:
        options["start-snapshot-id"] = str(current)
    return change_schema_for(options)


def _json(offset: dict) -> dict:
    """Through JSON, as Spark's offset log stores it."""
    return json.loads(json.dumps(offset))


def _drain(reader: MeltwaterStreamReader, limit=None, start: dict | None = None,
           max_batches: int = 200) -> list[tuple[dict, dict, list]]:
    """Micro-batches until latestOffset returns its start: (start, end, partitions)."""
    start = _json(reader.initialOffset()) if start is None else start
    limit = reader.getDefaultReadLimit() if limit is None else limit
    batches = []
    for _ in range(max_batches):
        end = _json(reader.latestOffset(start, limit))
        if end == start:
            return batches
        batches.append((start, end, list(reader.partitions(start, end))))
        reader.commit(end)
        start = end
    raise AssertionError("the stream did not settle")


def _rows(reader: MeltwaterStreamReader, partitions) -> pa.Table:
    """Read partitions as executors do: the reader and each partition pickled."""
    executor = pickle.loads(pickle.dumps(reader))
    batches = [b for p in partitions for b in executor.read(pickle.loads(pickle.dumps(p)))]
    return pa.Table.from_batches(batches, schema=spark_arrow_schema(reader.schema))


def _all_rows(reader, batches) -> pa.Table:
    return _rows(reader, [p for _, _, parts in batches for p in parts])


def _changes(location: str, like: pa.Table, **options) -> pa.Table:
    want = meltwater.stream.changes(location, **options).read_all()
    return want.select(like.column_names).cast(like.schema, safe=False)


def _shift_ordinals(table: pa.Table, by: int) -> pa.Table:
    index = table.column_names.index("_change_ordinal")
    shifted = pc.add(table["_change_ordinal"], by).cast(table.schema.field(index).type)
    return table.set_column(index, table.schema.field(index), shifted)


def _net_per_commit(table: pa.Table) -> Counter:
    """Each commit's net effect: what carry-over removal and update pairing never change."""
    columns = [c for c in table.column_names if c not in META]
    net: Counter = Counter()
    for row in table.to_pylist():
        key = (row["_change_ordinal"], tuple(_canonical(row[c]) for c in columns))
        net[key] += -1 if row["_change_type"] in REMOVES else 1
    return +net + (-net)  # drop zeros, keep signs


def _is_one_unit(location: str, part) -> bool:
    """Whether a commit part is exactly one of its commit's units."""
    table = load_table(location)
    snapshot = table.metadata.snapshots[part.changes.commit.snapshot_id]
    tasks = IncrementalPlanner(table).plan_commit(snapshot, 0).tasks
    bounds = commit_units(tasks, table.metadata.specs).bounds
    begin = part.first_task
    stop = begin + len(part.changes.tasks)
    return begin in bounds and bounds[bounds.index(begin) + 1:][:1] == (stop,)


_SOURCES: dict[str, Path] = {}  # table copy -> the corpus metadata it replays


def _copy_metadata(scenario, tmp_path: Path) -> tuple[str, dict[int, int]]:
    """A table directory holding copies of a corpus table's metadata files: moving it to
    a version (`_move_to`) replays the table's commits. Returns it and snapshot id ->
    version."""
    source = Path(scenario.location) / "metadata"
    target = tmp_path / scenario.name / "metadata"
    target.mkdir(parents=True)
    versions = {}
    for path in sorted(source.glob("v*.metadata.json")):
        shutil.copy(path, target / path.name)
        current = json.loads(path.read_text()).get("current-snapshot-id")
        version = int(path.name[1:].split(".")[0])
        if current not in (None, -1) and (current not in versions
                                          or version < versions[current]):
            versions[current] = version
    _SOURCES[str(tmp_path / scenario.name)] = source
    return str(tmp_path / scenario.name), versions


def _move_to_version(location: str, version: int) -> None:
    """The table at a version: the metadata files up to it, none after (a reader walks
    forward from the hint while `v<N+1>` exists, as Iceberg's Hadoop tables do), and the
    hint naming it."""
    metadata = Path(location) / "metadata"
    for path in _SOURCES[location].glob("v*.metadata.json"):
        copy = metadata / path.name
        if int(path.name[1:].split(".")[0]) <= version:
            if not copy.exists():
                shutil.copy(path, copy)
        elif copy.exists():
            copy.unlink()
    (metadata / "version-hint.text").write_text(str(version))


def _move_to(location: str, versions: dict[int, int], snapshot_id: int) -> None:
    _move_to_version(location, versions[snapshot_id])


def _seen(*readers: MeltwaterStreamReader) -> None:
    """Wait until each running reader's table watcher saw the change just made: a stream
    sees a commit once its watcher does (about a millisecond later), not at the instant."""
    for reader in readers:
        assert reader.stream.wait_for_change(10), "the stream's watcher missed a change"


# -- offsets and options ---------------------------------------------------------------------


def test_stream_options_and_read_limits(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    read = stream_read({"path": location, "maxFilesPerTrigger": "7",
                        "maxBytesPerTrigger": "2m", "skip-expired-snapshots": "true"})
    assert (read.max_files, read.max_bytes, read.skip_expired) == (7, 2 << 20, True)
    assert stream_read({"path": location, "startingVersion": "latest"}).starting == "latest"
    # schema(), which Spark asks first, takes it as a stream's start, not a snapshot id
    latest = change_schema_for({"path": location, "startingVersion": "latest"})
    assert "_change_type" in latest.fieldNames()
    for bad, message in [({"starting": "latest", "start-snapshot-id": "1"}, "once"),
                         ({"net-changes": "true"}, "batch option"),
                         ({"schema-change": "ignore"}, "project or fail"),
                         ({"streaming-max-files-per-micro-batch": "0"}, "positive"),
                         ({"maxBytesPerTrigger": "lots"}, "expected bytes")]:
        with pytest.raises(OptionError, match=message):
            stream_read({"path": location, **bad})
    assert _reader(location).getDefaultReadLimit() == ReadAllAvailable()
    reader = _reader(location, **{"streaming-max-files-per-micro-batch": 4,
                                  "streaming-max-rows-per-micro-batch": 100,
                                  "streaming-max-bytes-per-micro-batch": "1k"})
    assert reader.getDefaultReadLimit() == ReadMaxFiles(4)
    assert reader.budget(ReadMaxFiles(4)) == Budget(4, 100, 1024)
    assert reader.budget(ReadAllAvailable()) == UNLIMITED  # Spark's word wins (Trigger.Once)
    assert _reader(location, **{"streaming-max-rows-per-micro-batch": 9}
                   ).getDefaultReadLimit() == ReadMaxRows(9)
    assert _reader(location, maxBytesPerTrigger="1g").getDefaultReadLimit() == ReadMaxBytes(
        1 << 30)


def test_schema_without_change_columns_is_refused(corpus):
    from pyspark.sql.types import LongType, StructField, StructType

    location = corpus.scenarios["mor_partitioned"].location
    with pytest.raises(StreamError, match="no change metadata columns"):
        MeltwaterStreamReader({"path": location},
                              StructType([StructField("id", LongType())]))


# -- admission control over whole histories --------------------------------------------------

LIMITED = [("mor_partitioned", {"streaming-max-files-per-micro-batch": 1}),
           ("mor_partitioned", {"streaming-max-rows-per-micro-batch": 30}),
           ("equality_deletes", {"maxFilesPerTrigger": 2}),
           ("position_deletes_with_rows", {"streaming-max-bytes-per-micro-batch": 4000}),
           ("v3_deletion_vectors", {"streaming-max-files-per-micro-batch": 2}),
           ("evolution", {"streaming-max-files-per-micro-batch": 2}),
           ("random_mix", {"streaming-max-files-per-micro-batch": 10}),
           ("cow_partitioned", {}),
           ("staged_upserts", {"streaming-max-files-per-micro-batch": 1}),
           ("mixed_row_deltas_v3", {"streaming-max-files-per-micro-batch": 2}),
           ("write_audit_publish", {"streaming-max-files-per-micro-batch": 1})]


@pytest.mark.parametrize(("name", "options"), LIMITED,
                         ids=[f"{n}-{'-'.join(o) or 'unlimited'}" for n, o in LIMITED])
def test_micro_batches_cover_the_history(corpus, name, options):
    """The union of the micro-batches is the change set of the whole history, row for
    row; each batch honours the limit, takes at least one task, and splits only commits
    over the limit."""
    location = corpus.scenarios[name].location
    reader = _reader(location, **options)
    budget = reader.budget(reader.getDefaultReadLimit())
    batches = _drain(reader)
    got = _all_rows(reader, batches)
    want = _changes(location, got)
    for _, _, partitions in batches:
        parts = [part for p in partitions for part in p.parts]
        tasks = [t for part in parts for t in part.changes.tasks]
        if not budget.fits(sum((task_cost(t) for t in tasks), Cost())):
            # only one unit may exceed the limit (taken whole: a stream never stalls)
            assert len(parts) == 1, name
            assert _is_one_unit(location, parts[0]), name
        for index, part in enumerate(parts):
            if part.whole:
                continue
            # a split commit starts its micro-batch, and only its last piece shares one
            assert index == 0, (name, index)
            if part.first_task + len(part.changes.tasks) < part.task_count:
                assert len(parts) == 1, name
    if budget == UNLIMITED:
        assert len(batches) == 1
    else:
        assert len(batches) > 1
    assert_same_rows(got, want, f"{name} {options}")


def test_partitions_are_deterministic_and_picklable(corpus):
    location = corpus.scenarios["equality_deletes"].location
    options = {"streaming-max-files-per-micro-batch": 2}
    first = _drain(_reader(location, **options))
    again = _reader(location, **options)  # a restarted driver: nothing cached
    for start, end, partitions in first[::-1]:
        replayed = again.partitions(start, end)
        assert replayed == partitions
        assert all(isinstance(p, ChangePartition) for p in replayed)
        assert [pickle.loads(pickle.dumps(p)) for p in replayed] == partitions
        assert_same_rows(_rows(again, replayed), _rows(again, partitions), "replay")
    assert again.partitions(first[0][0], first[0][0]) == []


def test_split_size_spreads_one_way_commits_over_partitions(corpus):
    location = corpus.scenarios["random_mix"].location
    reader = _reader(location)
    [(_, _, whole)] = _drain(reader)
    spread = _reader(location, **{"split-size": 1})
    [(_, _, partitions)] = _drain(spread)
    assert len(partitions) > len(whole)
    for partition in partitions:
        parts = partition.parts
        assert len(parts) == 1  # nothing shares a 1-byte partition
        assert parts[0].whole or (parts[0].one_way and len(parts[0].changes.tasks) == 1)
    assert_same_rows(_rows(spread, partitions), _rows(reader, whole), "spread")


def test_partitions_are_balanced_in_order(corpus, monkeypatch):
    """Parts of a table Iceberg Java wrote, spread over 2 and 3 cores: in commit order, one
    partition per core, none heavier than its fair share by more than one part (filling in
    order used to leave a last partition of one small commit). The corpus is far below the
    4 MB open-file cost under which a micro-batch is not spread, so that floor is lowered."""
    monkeypatch.setattr(micro_batch, "DEFAULT_OPEN_FILE_COST", 1)
    location = corpus.scenarios["random_mix"].location
    reader = _reader(location)
    start = _json(reader.initialOffset())
    end = _json(reader.latestOffset(start, reader.getDefaultReadLimit()))
    parts = reader.stream.parts(StreamOffset.from_json(start), StreamOffset.from_json(end))
    weights = [part.cost.bytes for part in parts]
    assert len(parts) >= 6
    for cores in (2, 3):
        groups = pack_parts(parts, parallelism=cores)
        assert [p for group in groups for p in group] == parts
        assert len(groups) == cores
        share = sum(weights) / cores
        for group in groups:
            assert sum(p.cost.bytes for p in group) <= share + max(weights)
    assert_same_rows(_rows(reader, [ChangePartition(tuple(g), reader.stream.options)
                                    for g in pack_parts(parts, parallelism=3)]),
                     _rows(reader, reader.partitions(start, end)), "balanced")


# -- where a stream starts -------------------------------------------------------------------


def test_start_snapshot_timestamp_and_latest(corpus):
    scenario = corpus.scenarios["equality_deletes"]
    location, snapshots = scenario.location, scenario.snapshots
    start = snapshots[4]
    for options in ({"start-snapshot-id": start.snapshot_id},
                    {"stream-from-timestamp": start.timestamp_ms},
                    {"startingVersion": snapshots[5].snapshot_id},
                    {"startingTimestamp": snapshots[5].timestamp_ms}):
        reader = _reader(location, **options)
        got = _all_rows(reader, _drain(reader))
        assert_same_rows(got, _changes(location, got, from_snapshot_id=start.snapshot_id),
                         str(options))
    latest = _reader(location, starting="latest")
    assert _drain(latest) == []
    assert latest.initialOffset()["snapshot_id"] == snapshots[-1].snapshot_id


def test_a_stream_start_is_refused_as_a_range_from_it_would_be(corpus):
    """The stream's start goes through the planner's range resolver: the same refusals as
    a batch read from it, naming the stream's option, when the query starts."""
    scenario = corpus.scenarios["mor_partitioned"]
    location, main_head = scenario.location, scenario.record["current_snapshot_id"]
    audit_head = scenario.record["refs"]["audit"]["snapshot_id"]
    with pytest.raises(NoSuchSnapshotError, match="start-snapshot-id 1 is not a snapshot"):
        _reader(location, **{"start-snapshot-id": 1}).initialOffset()
    with pytest.raises(InvalidRangeError, match=f"startingVersion {audit_head} is not an "
                                                f"ancestor of {main_head}"):
        _reader(location, startingVersion=audit_head).initialOffset()
    with pytest.raises(InvalidRangeError, match="give the range's start once, not "
                                                "start-snapshot-id and startingTimestamp"):
        stream_read({"path": location, "start-snapshot-id": "1", "startingTimestamp": "1"})


def test_latest_then_new_commits(corpus, tmp_path):
    scenario = corpus.scenarios["mor_partitioned"]
    location, versions = _copy_metadata(scenario, tmp_path)
    ids = sorted(versions, key=versions.get)  # the snapshots main pointed at, in order
    assert len(ids) > 5
    _move_to(location, versions, ids[3])
    reader = _reader(location, starting="latest")
    start = _json(reader.initialOffset())
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # nothing new yet
    table = reader.stream.load()
    assert reader.stream.load() is table  # polling a quiet table parses nothing again
    _move_to(location, versions, ids[5])
    _seen(reader)
    batches = _drain(reader, start=start)
    _move_to(location, versions, ids[-1])
    _seen(reader)
    reported = reader.reportLatestOffset()
    assert reported["snapshot_id"] == ids[-1] and reported["complete"]
    batches += _drain(reader, start=batches[-1][1])
    assert batches[-1][1] == reported
    got = _all_rows(reader, batches)
    assert_same_rows(got, _changes(scenario.location, got, from_snapshot_id=ids[3]), "latest")


def test_empty_table_then_commits(corpus, tmp_path):
    scenario = corpus.scenarios["v3_deletion_vectors"]
    location, versions = _copy_metadata(scenario, tmp_path)
    _move_to_version(location, 1)  # no snapshot yet
    assert load_table(location).metadata.current_snapshot is None
    reader = _reader(location, **{"streaming-max-files-per-micro-batch": 2})
    start = _json(reader.initialOffset())
    assert start["snapshot_id"] is None and _drain(reader, start=start) == []
    _move_to(location, versions, max(versions, key=versions.get))
    _seen(reader)
    got = _all_rows(reader, _drain(reader, start=start))
    # created as v2 and upgraded to v3 later: row lineage came after the stream started
    assert "_row_id" not in got.column_names
    want = _changes(scenario.location, got)
    # the stream has no row lineage, so pairs no updates by _row_id as the v3 feed does
    assert _net_per_commit(got) == _net_per_commit(want)


def test_starting_snapshot_as_inserts(corpus):
    scenario = corpus.scenarios["equality_deletes"]
    location, start = scenario.location, scenario.snapshots[5]
    reader = _reader(location, **{"start-snapshot-id": start.snapshot_id,
                                  "starting-snapshot-as-inserts": "true",
                                  "streaming-max-files-per-micro-batch": 1})
    got = _all_rows(reader, _drain(reader))
    initial = got.filter(pc.equal(got["_change_ordinal"], 0))
    assert set(initial["_change_type"].to_pylist()) == {"INSERT"}
    assert set(initial["_commit_snapshot_id"].to_pylist()) == {start.snapshot_id}
    truth = start.rows()
    assert_same_rows(initial.select(truth.column_names).cast(truth.schema), truth, "contents")
    later = got.filter(pc.greater(got["_change_ordinal"], 0))
    want = _changes(location, got, from_snapshot_id=start.snapshot_id)
    # one file per micro-batch splits update commits, never their carry-over or pairs
    assert_same_rows(later, _shift_ordinals(want, 1), "after the initial scan")


# -- expired history -------------------------------------------------------------------------


def test_expired_snapshots_fail_or_are_skipped(corpus, caplog):
    scenario = corpus.scenarios["maintenance"]
    location = scenario.location
    expired = [s.snapshot_id for s in scenario.snapshots if s.expired]
    retained = [s for s in scenario.snapshots if not s.expired]
    gone = load_table(location).metadata.snapshot(retained[0].snapshot_id).parent_id
    # a start that expired: refused by the stream's start and its schema() alike (one
    # resolver), naming the option
    refusal = rf"start-snapshot-id {expired[2]}: the snapshots between {expired[2]} and "
    with pytest.raises(ExpiredSnapshotsError, match=refusal):
        _reader(location, **{"start-snapshot-id": expired[2]}).initialOffset()
    with pytest.raises(ExpiredSnapshotsError, match=refusal):
        change_schema_for({"path": location, "start-snapshot-id": str(expired[2])})
    # a checkpoint whose offset predates the expiry
    behind = StreamOffset(expired[2], 0, True, False, 2).to_json()
    with pytest.raises(ExpiredSnapshotsError, match=rf"after snapshot {expired[2]} up to "
                                               rf"{gone} have expired.*skip-expired"):
        _drain(_reader(location), start=behind)
    with caplog.at_level(logging.WARNING):
        reader = _reader(location, **{"skip-expired-snapshots": "true"})
        got = _all_rows(reader, _drain(reader, start=behind))
    assert f"up to {gone} have expired" in caplog.text
    assert set(got["_commit_snapshot_id"].to_pylist()) <= {s.snapshot_id for s in retained}
    want = _changes(location, got, from_snapshot_id=gone, skip_expired=True)
    assert_same_rows(got, _shift_ordinals(want, 3), "skipped")
    # earliest: the retained history, or its oldest snapshot's contents first
    reader = _reader(location)
    assert _all_rows(reader, _drain(reader)).num_rows == want.num_rows
    reader = _reader(location, **{"starting-snapshot-as-inserts": "true"})
    got = _all_rows(reader, _drain(reader))
    first = got.filter(pc.equal(got["_change_ordinal"], 0))
    assert first.num_rows == retained[0].row_count


# -- schema changes, vanished and corrupt tables ---------------------------------------------


def test_schema_change_projected_away_or_stops(corpus, tmp_path, caplog):
    scenario = corpus.scenarios["evolution"]
    location, versions = _copy_metadata(scenario, tmp_path)
    snapshots = scenario.snapshots
    assert snapshots[0].schema_id != snapshots[1].schema_id  # 1 adds column `note`
    _move_to(location, versions, snapshots[0].snapshot_id)
    projecting = _reader(location)
    failing = _reader(location, **{"schema-change": "fail"})
    starts = [_json(r.initialOffset()) for r in (projecting, failing)]
    columns = [f.name for f in projecting.schema.fields]
    assert "note" not in columns

    _move_to(location, versions, snapshots[2].snapshot_id)
    _seen(projecting, failing)
    with caplog.at_level(logging.WARNING):
        batches = _drain(projecting, start=starts[0])
        got = _all_rows(projecting, batches)
    assert f"changed its schema at snapshot {snapshots[1].snapshot_id} (columns added: " \
           "note)" in caplog.text
    assert got.column_names == columns
    want = _changes(scenario.location, got, to_snapshot_id=snapshots[2].snapshot_id)
    assert_same_rows(got, want, "note projected away")

    # later: `name` renamed (the stream keeps its name), `score` widened to long and a
    # value beyond int: the micro-batch fails naming the column, asking for a restart
    _move_to(location, versions, snapshots[-1].snapshot_id)
    _seen(projecting)
    more = _drain(projecting, start=batches[-1][1])
    with pytest.raises(StreamError, match=r"column score: .*restart the query"):
        _all_rows(projecting, more)

    end = _json(failing.latestOffset(starts[1], ReadAllAvailable()))
    assert end["snapshot_id"] == snapshots[0].snapshot_id and end["complete"]
    with pytest.raises(SchemaChangedError, match=rf"at snapshot {snapshots[1].snapshot_id} "
                                            r"\(columns added: note\).*restart the query"):
        failing.latestOffset(end, ReadAllAvailable())


def test_vanished_table_and_corrupt_metadata_keep_the_offset(corpus, tmp_path):
    scenario = corpus.scenarios["equality_deletes"]
    location, versions = _copy_metadata(scenario, tmp_path)
    ids = sorted(versions, key=versions.get)
    _move_to(location, versions, ids[2])
    reader = _reader(location)
    batches = _drain(reader)
    offset = batches[-1][1]
    bad = Path(location) / "metadata" / "v999.metadata.json"
    bad.write_text("{not json")
    (Path(location) / "metadata" / "version-hint.text").write_text("999")
    _seen(reader)
    with pytest.raises(CorruptMetadataError, match=r"v999\.metadata\.json"):
        reader.latestOffset(offset, ReadAllAvailable())
    shutil.rmtree(location)
    _seen(reader)
    with pytest.raises(NoSuchTableError, match=r"vanished.*restart"):
        reader.latestOffset(offset, ReadAllAvailable())
    # the offset Spark holds is still good once the table is back
    location2, versions = _copy_metadata(scenario, tmp_path / "back")
    shutil.move(location2, location)
    _move_to(location, versions, ids[-1])
    _seen(reader)
    got = _all_rows(reader, _drain(reader, start=offset))
    want = _changes(scenario.location, got, from_snapshot_id=ids[2])
    assert_same_rows(got, _shift_ordinals(want, 3), "resumed")  # ordinals count from the root


# -- real streaming queries ------------------------------------------------------------------


def _run_stream(spark, location: str, checkpoint: Path, **options) -> tuple[pa.Table, int]:
    """An AvailableNow query collecting each micro-batch: (all rows, micro-batches run)."""
    collected: list[pa.Table] = []

    def collect(frame, _batch_id):
        collected.append(frame.toArrow())

    reader = spark.readStream.format("meltwater")
    if "start-snapshot-id" not in options:
        reader = reader.option("starting", "earliest")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (reader.load(location).writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert len(query.recentProgress) == len(collected)
    return pa.concat_tables(collected), len(collected)


def test_available_now_with_and_without_limits(spark, corpus, tmp_path):
    location = corpus.scenarios["mor_partitioned"].location
    got, batches = _run_stream(spark, location, tmp_path / "limited",
                               **{"streaming-max-files-per-micro-batch": 8})
    assert batches > 1
    assert_same_rows(got, _changes(location, got), "limited")
    got, batches = _run_stream(spark, location, tmp_path / "all")
    assert batches == 1
    assert_same_rows(got, _changes(location, got), "unlimited")


def test_available_now_follows_a_branch(spark, corpus, tmp_path):
    """`.option("branch", "audit")`: a real query reads the branch's history, one file a
    micro-batch, and its changes are a range to the branch (`to_ref`), row for row."""
    location = corpus.scenarios["write_audit_publish"].location
    got, batches = _run_stream(spark, location, tmp_path / "audit", branch="audit",
                               **{"streaming-max-files-per-micro-batch": 1})
    assert batches > 1
    assert_same_rows(got, _changes(location, got, to_ref="audit"), "branch audit")


def test_available_now_two_files_per_batch_is_the_unlimited_feed(spark, corpus, tmp_path):
    """A real query, two files per micro-batch over copy-on-write commits: they are split
    between partitions, and rows a commit rewrote unchanged still cancel and its updates
    still pair, exactly as in the whole feed (cutting anywhere emitted 118 carry-over
    rows twice here). Every history and limit is checked without Spark in
    tests/watch_tests/test_rate_limits.py."""
    location = corpus.scenarios["cow_partitioned"].location
    got, batches = _run_stream(spark, location, tmp_path / "two",
                               **{"streaming-max-files-per-micro-batch": 2,
                                  "compute-updates": "true", "identifier-columns": "id"})
    assert batches > 5
    want = _changes(location, got, compute_updates=True, identifier_columns=["id"])
    assert set(want["_change_type"].to_pylist()) >= {"UPDATE_BEFORE", "DELETE", "INSERT"}
    assert_same_rows(got, want, "two files per micro-batch")


def _child(tmp_path: Path, name: str, location: str, *args: str) -> list[str]:
    return [sys.executable, str(HERE / "stream_query.py"), "--table", location,
            "--checkpoint", str(tmp_path / name / "checkpoint"),
            "--sink", str(tmp_path / name / "sink"), *args]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return env


def _sink(spark, path: Path) -> pa.Table:
    """The sink as Spark reads it: only the files its _spark_metadata log committed."""
    return spark.read.parquet(str(path)).toArrow()


def test_killed_mid_batch_then_restarted_holds_every_change_once(spark, corpus, tmp_path):
    location = corpus.scenarios["equality_deletes"].location
    command = _child(tmp_path, "q", location, "--option",
                     "streaming-max-files-per-micro-batch=6")
    # The child blocks every task of batch 1 once batch 0 is committed, and says so: it is
    # killed mid-batch, whatever the machine's pace.
    held = [*command, "--hold-after-first-batch"]
    marker = tmp_path / "q" / "checkpoint.held"
    commits = tmp_path / "q" / "checkpoint" / "commits"
    log = tmp_path / "q-child.log"
    with log.open("wb") as out:
        child = subprocess.Popen(held, env=_child_env(), stdout=out, stderr=out,
                                 start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and child.poll() is None and not marker.exists():
            time.sleep(0.05)
    finally:
        reached = marker.exists()
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)  # the driver, its JVM and workers
        child.wait()
    assert reached, "batch 1 never started:\n" + log.read_text(errors="replace")[-3000:]
    assert (commits / "0").exists() and not (commits / "1").exists()
    done = subprocess.run(command, env=_child_env(), capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (commits / "1").exists()
    got = _sink(spark, tmp_path / "q" / "sink")
    assert_same_rows(got, _changes(location, got), "sink after kill -9 and restart")


def test_local_cluster_reads_in_executors(spark, corpus, tmp_path):
    location = corpus.scenarios["equality_deletes"].location
    command = _child(tmp_path, "c", location, "--master", "local-cluster[2,1,1024]",
                     "--pid-column", "--option", "streaming-max-files-per-micro-batch=6")
    done = subprocess.run(command, env=_child_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["executors_and_driver"] == 3
    assert report["batches"] > 1
    got = _sink(spark, tmp_path / "c" / "sink")
    pids = set(got["_pid"].to_pylist())
    assert report["driver_pid"] not in pids
    got = got.drop_columns(["_pid"])
    assert_same_rows(got, _changes(location, got), "local-cluster")


def test_local_cluster_spreads_one_upsert_commit_over_both_executors(spark, corpus, tmp_path):
    """One commit's work is split across executors by shares of its keys (split-size
    below the commit's size): both executors read, and the rows are the engine's own.
    Iceberg Java's global equality delete of ids 3, 25 and 33, whose rows are in data
    files of both partition specs: keys go with the files holding them, a share each."""
    scenario = corpus.scenarios["equality_global"]
    snapshot = next(s for s in scenario.snapshots
                    if s.label == "global equality delete (spec 0) of ids 3, 25, 33")
    options = {"start-snapshot-id": str(snapshot.parent_id),
               "end-snapshot-id": str(snapshot.snapshot_id), "split-size": "1",
               "key-index-dir": str(tmp_path / "index")}  # each executor adds what it reads
    command = _child(tmp_path, "b", scenario.location, "--master", "local-cluster[2,1,1024]",
                     "--pid-column", "--batch",
                     *[arg for k, v in options.items() for arg in ("--option", f"{k}={v}")])
    done = subprocess.run(command, env=_child_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["executors_and_driver"] == 3 and report["partitions"] == 2
    got = spark.read.parquet(str(tmp_path / "b" / "sink")).toArrow()
    pids = set(got["_pid"].to_pylist())
    assert len(pids) == 2 and report["driver_pid"] not in pids  # both executors read
    expected = meltwater.stream.changes(scenario.location, from_snapshot_id=snapshot.parent_id,
                                        to_snapshot_id=snapshot.snapshot_id).read_all()
    assert_same_rows(got.drop_columns(["_pid"]), expected, "local-cluster upsert commit")
    assert list((tmp_path / "index").rglob("catalog.json"))


def test_stream_schema_on_a_table_with_expired_history(spark, corpus):
    """A stream's schema is the current snapshot's: resolving it must not walk (and fail
    on) the expired history it will never read."""
    location = corpus.scenarios["maintenance"].location
    frame = (spark.readStream.format("meltwater").option("starting", "latest")
             .load(location))
    assert "_change_type" in frame.columns and "id" in frame.columns

