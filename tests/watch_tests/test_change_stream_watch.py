"""The change stream watches its table: quiet triggers touch no file, `watch-wait-ms` turns
an idle stream into one that waits for the next commit. Tables are Iceberg Java's, committed
again version by version (`replay.py`)."""

from __future__ import annotations

import gc
import pickle
import threading
import time

import pytest
from test_watcher import CountingIO

from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.changes.change_schema import METADATA_COLUMNS
from meltwater.stream.errors import OptionError
from meltwater.stream.spark.batch_reader import wants_change_schema
from meltwater.stream.spark.options import stream_read
from meltwater.stream.watch.change_stream import ChangeStream
from watch_tests.replay import Replay


def _replay(corpus, tmp_path) -> Replay:
    replay = Replay(corpus.scenarios["mor_partitioned"].location, tmp_path / "t")
    replay.commit_until(4)
    return replay


def _commit_on_main(replay: Replay) -> int:
    """Commit versions until main moves (some versions commit to a branch); its snapshot."""
    before = replay.current_snapshot()
    while replay.current_snapshot() == before:
        replay.commit()
    return replay.current_snapshot()


def _stream(location: str, io=None, **options) -> ChangeStream:
    read = stream_read({"path": location, "starting": "latest",
                        **{k: str(v) for k, v in options.items()}})
    columns = [f.name for f in load_table(location).metadata.schema.fields]
    return ChangeStream(read, columns + list(METADATA_COLUMNS), io=io)


def test_quiet_table_is_not_read_and_a_commit_is_seen(corpus, tmp_path):
    replay = _replay(corpus, tmp_path)
    io = CountingIO()
    stream = _stream(replay.location, io)
    start = stream.initial_offset()
    assert stream.latest_offset(start) == start
    calls = io.calls
    table = stream.load()
    for _ in range(200):  # Spark asks every 10 ms
        assert stream.latest_offset(start) == start
        assert stream.load() is table
    assert stream.report_latest(start) == start
    assert io.calls == calls, "load() touched the file system on a quiet table"
    snapshot_id = _commit_on_main(replay)
    assert stream.wait_for_change(10)
    end = stream.latest_offset(start)
    assert (end.snapshot_id, end.complete) == (snapshot_id, True)
    assert io.calls > calls
    # The watcher's token moves on the file event, before its own thread has read the new
    # metadata (load() reads it itself): its state catches up asynchronously.
    deadline = time.monotonic() + 10
    while stream.watcher.latest.snapshot_id != snapshot_id and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream.watcher.latest.snapshot_id == snapshot_id
    stream.close()
    assert stream.watcher is not None and stream.watcher.running  # a new one, if asked
    stream.close()


def test_watch_wait_ms_returns_when_a_commit_lands(corpus, tmp_path):
    replay = _replay(corpus, tmp_path)
    stream = _stream(replay.location, **{"watch-wait-ms": 10_000})
    start = stream.initial_offset()
    committed: list[int] = []
    timer = threading.Timer(0.3, lambda: committed.append(_commit_on_main(replay)))
    began = time.monotonic()
    timer.start()
    end = stream.latest_offset(start)
    waited = time.monotonic() - began
    timer.join()
    assert end.snapshot_id == committed[0] and end.complete
    assert 0.25 < waited < 9, waited  # woken by the commit, well before the 10 s wait
    # nothing new: it waits the whole time, then says so
    began = time.monotonic()
    assert _stream(replay.location, **{"watch-wait-ms": 300}).latest_offset(end) == end
    assert 0.28 < time.monotonic() - began < 30  # it waited; the bound only says it ended
    stream.close()


def test_watch_wait_ms_option(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    assert stream_read({"path": location}).watch_wait_ms == 0
    assert stream_read({"path": location, "watch-wait-ms": "250"}).watch_wait_ms == 250
    with pytest.raises(OptionError, match="watch-wait-ms=-1"):
        stream_read({"path": location, "watch-wait-ms": "-1"})
    assert wants_change_schema({"path": location, "watch-wait-ms": "250"})


def test_the_watcher_stops_with_the_stream_and_never_travels(corpus, tmp_path):
    from pyspark.sql.types import StructType

    from meltwater.stream.spark.stream_reader import MeltwaterStreamReader

    replay = _replay(corpus, tmp_path)
    stream = _stream(replay.location)
    stream.load()
    watcher = stream.watcher
    assert watcher.running
    del stream
    gc.collect()
    assert not watcher.running  # garbage collection stops it too

    options = {"path": replay.location, "starting": "latest"}
    columns = _stream(replay.location).columns
    schema = StructType.fromJson({"type": "struct", "fields": [
        {"name": c, "type": "string", "nullable": True, "metadata": {}} for c in columns]})
    reader = MeltwaterStreamReader(options, schema)
    reader.initialOffset()
    watcher = reader.stream.watcher
    executor = pickle.loads(pickle.dumps(reader))  # as Spark ships it to executors
    assert executor._stream is None and watcher.running
    reader.stop()
    assert not watcher.running


def test_an_available_now_stream_pins_its_target_and_never_watches(corpus, tmp_path):
    replay = _replay(corpus, tmp_path)
    io = CountingIO()
    stream = _stream(replay.location, io)
    stream.load()
    watcher = stream.watcher
    assert watcher.running
    stream.pin_target()  # Trigger.AvailableNow
    assert not watcher.running and stream.watcher is None
    target = stream.target
    start = stream.initial_offset()
    end = stream.latest_offset(start)
    assert (end.snapshot_id, end.complete) == (target, True)
    calls = io.calls
    table = stream.load()
    later = _commit_on_main(replay)
    assert later != target
    assert stream.load() is table and stream.latest_offset(end) == end
    assert io.calls == calls, "a pinned stream looked for commits past its target"
