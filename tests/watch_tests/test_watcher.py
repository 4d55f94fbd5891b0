"""`SnapshotWatcher` on tables written by Iceberg Java, committed again as Iceberg commits.

Each test replays a corpus table's metadata versions into a fresh directory (`replay.py`):
temporary `<uuid>.metadata.json`, rename to `v<N>.metadata.json`, version hint rewritten
through a temporary file. File events and polling must report the same snapshots, once
each, in commit order.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import statistics
import threading
import time
import uuid
from pathlib import Path

import pytest

from meltwater.planner.errors import NoSuchTableError
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.errors import WatcherError
from meltwater.stream.watch.watcher import SnapshotWatcher
from watch_tests.replay import Replay

MODES = [pytest.param(False, id="events"), pytest.param(True, id="polling")]


def _collect(watcher: SnapshotWatcher, count: int, timeout: float = 60.0) -> list:
    events: list = []
    deadline = time.monotonic() + timeout
    while len(events) < count and time.monotonic() < deadline:
        events += watcher.wait(deadline - time.monotonic())
    return events


def _new_main_commits(replay: Replay, first: int, last: int) -> list[int]:
    """The snapshots main gained from version `first` to `last` (each version of the
    corpus tables commits at most one)."""
    ids = []
    for version in range(first, last + 1):
        current = replay.current_snapshot(version)
        if current != replay.current_snapshot(version - 1) and current is not None:
            ids.append(current)
    return ids


@pytest.mark.parametrize("poll", MODES)
def test_each_commit_once_in_order(corpus, tmp_path, poll):
    replay = Replay(corpus.scenarios["random_mix"].location, tmp_path / "t")
    replay.commit_until(2)
    with SnapshotWatcher(replay.location, poll=poll) as watcher:
        assert watcher.mode == ("polling" if poll else "events")
        assert watcher.latest.snapshot_id == replay.current_snapshot()
        assert watcher.wait(timeout=0.2) == []  # from the current snapshot: nothing yet
        expected = _new_main_commits(replay, 3, len(replay.sources))
        got = []
        while replay.remaining:
            replay.commit()  # includes a commit changing only table properties
            got += watcher.wait(timeout=0.3 if poll else 0.1)
        got += _collect(watcher, len(expected) - len(got))
        assert [e.snapshot_id for e in got] == expected
        assert [e.parent_id for e in got[1:]] == expected[:-1]
        assert all(e.metadata_location.startswith(replay.location) for e in got)
        assert watcher.wait(timeout=0.3) == []
        assert watcher.latest.metadata_location.endswith(f"v{replay.version}.metadata.json")


@pytest.mark.parametrize("poll", MODES)
def test_burst_of_commits_reported_once_in_order(corpus, tmp_path, poll):
    replay = Replay(corpus.scenarios["mor_partitioned"].location, tmp_path / "t")
    replay.commit_until(len(replay.sources))
    burst = replay.synthesized(150)
    with SnapshotWatcher(replay.location, poll=poll) as watcher:
        heard: list = []
        watcher.subscribe(heard.extend)
        for _, text in burst:
            replay.commit(text)
        got = _collect(watcher, len(burst))
        assert [e.snapshot_id for e in got] == [snapshot_id for snapshot_id, _ in burst]
        assert [e.added_records for e in got] == list(range(1, 151))
        assert watcher.wait(timeout=0.3) == []
        assert [e.snapshot_id for e in heard] == [e.snapshot_id for e in got]


def test_events_nobody_collects_are_bounded(corpus, tmp_path, caplog):
    replay = Replay(corpus.scenarios["mor_partitioned"].location, tmp_path / "t")
    replay.commit_until(len(replay.sources))
    burst = replay.synthesized(120)
    with caplog.at_level(logging.WARNING), \
            SnapshotWatcher(replay.location, queue_size=50) as watcher:
        for _, text in burst:
            replay.commit(text)
        deadline = time.monotonic() + 60
        while watcher.latest.snapshot_id != burst[-1][0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.latest.snapshot_id == burst[-1][0], "the watcher did not catch up"
        got = watcher.wait(timeout=1)
    assert [e.snapshot_id for e in got] == [snapshot_id for snapshot_id, _ in burst[-50:]]
    assert "dropped (queue_size=50)" in caplog.text


def test_half_written_metadata_is_never_reported_early(corpus, tmp_path, caplog):
    """Catalogs that write `<NNNNN>-<uuid>.metadata.json` in place, no version hint: the
    watcher sees the file half written, must not report it nor fail, and reports it once
    it is complete. A Hadoop writer's half-written temporary file is never looked at."""
    replay = Replay(corpus.scenarios["random_mix"].location, tmp_path / "src")
    metadata = tmp_path / "t" / "metadata"
    metadata.mkdir(parents=True)
    first, second = (replay.sources[i].read_text() for i in (1, 2))
    (metadata / f"00001-{uuid.uuid4()}.metadata.json").write_text(first)
    with caplog.at_level(logging.WARNING), \
            SnapshotWatcher(str(tmp_path / "t")) as watcher:
        before = watcher.latest.snapshot_id
        (metadata / "12345678-9abc-4def-8123-456789abcdef.metadata.json").write_text(
            second[:200])  # a temporary file, digits first
        target = metadata / f"00002-{uuid.uuid4()}.metadata.json"
        with open(target, "w") as out:
            out.write(second[: len(second) // 2])
        assert watcher.wait(timeout=0.5) == []
        with open(target, "a") as out:
            out.write(second[: len(second) // 2 + 10][len(second) // 2:])  # still partial
        assert watcher.wait(timeout=0.3) == []
        assert watcher.latest.snapshot_id == before
        with open(target, "a") as out:
            out.write(second[len(second) // 2 + 10:])
        events = _collect(watcher, 1, timeout=5)
    assert [e.snapshot_id for e in events] == [json.loads(second)["current-snapshot-id"]]
    assert events[0].metadata_location == str(target)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_restart_after_a_snapshot_reports_no_duplicates(corpus, tmp_path):
    replay = Replay(corpus.scenarios["random_mix"].location, tmp_path / "t")
    replay.commit_until(2)
    with SnapshotWatcher(replay.location) as watcher:
        for _ in range(6):
            replay.commit()
        first = _collect(watcher, len(_new_main_commits(replay, 3, 8)))
    replay.commit_until(len(replay.sources))  # while nobody watches
    with SnapshotWatcher(replay.location, after=first[-1].snapshot_id) as watcher:
        second = watcher.wait(timeout=5)  # reported at once: they were there at start
    every = [e.snapshot_id for e in first + second]
    assert every == _new_main_commits(replay, 3, len(replay.sources))
    assert len(set(every)) == len(every)


def test_expired_snapshots_are_skipped_with_a_warning(corpus, tmp_path, caplog):
    scenario = corpus.scenarios["maintenance"]  # v14 expires the first nine snapshots
    retained = [s.snapshot_id for s in scenario.snapshots if not s.expired]
    replay = Replay(scenario.location, tmp_path / "t")
    replay.commit_until(9)
    with caplog.at_level(logging.WARNING), SnapshotWatcher(replay.location) as watcher:
        replay.commit(replay.sources[-1].read_text())  # the table after the expiry, at once
        events = _collect(watcher, len(retained))
    assert [e.snapshot_id for e in events] == retained
    assert "expired before the watcher saw them" in caplog.text
    # resuming after a snapshot that has expired since
    caplog.clear()
    with caplog.at_level(logging.WARNING), \
            SnapshotWatcher(replay.location, after=scenario.snapshots[2].snapshot_id) as watcher:
        assert [e.snapshot_id for e in watcher.wait(timeout=5)] == retained
    assert "is not in the table" in caplog.text


def test_rollback_and_branch_switch_are_reported_as_resets(corpus, tmp_path):
    replay = Replay(corpus.scenarios["mor_partitioned"].location, tmp_path / "t")
    replay.commit_until(len(replay.sources))
    newest = json.loads(replay.sources[-1].read_text())
    main = newest["current-snapshot-id"]
    by_id = {s["snapshot-id"]: s for s in newest["snapshots"]}
    ancestor = by_id[by_id[main]["parent-snapshot-id"]]["parent-snapshot-id"]
    audit = newest["refs"]["audit"]["snapshot-id"]

    def moved(snapshot_id: int) -> str:  # as Iceberg's rollbackTo / setCurrentSnapshot
        obj = dict(newest, **{"current-snapshot-id": snapshot_id})
        obj["refs"] = dict(newest["refs"], main={"snapshot-id": snapshot_id, "type": "branch"})
        return json.dumps(obj)

    with SnapshotWatcher(replay.location) as watcher:
        replay.commit(moved(audit))  # main -> the audit branch's head
        events = _collect(watcher, 2)
        assert [e.snapshot_id for e in events] == [by_id[audit]["parent-snapshot-id"], audit]
        assert [e.reset for e in events] == [True, False]
        assert events[0].parent_id == newest["refs"]["before_branch"]["snapshot-id"]
        replay.commit(moved(main))  # and back: main's two commits after the branch point
        assert [e.reset for e in _collect(watcher, 2)] == [True, False]
        replay.commit(moved(ancestor))  # rollback to an ancestor: reported again
        [rollback] = _collect(watcher, 1)
        assert (rollback.snapshot_id, rollback.reset) == (ancestor, True)
        assert watcher.wait(timeout=0.3) == []


def test_event_latency(corpus, tmp_path):
    replay = Replay(corpus.scenarios["mor_partitioned"].location, tmp_path / "t")
    replay.commit_until(len(replay.sources))
    latencies = []
    with SnapshotWatcher(replay.location) as watcher:
        for snapshot_id, text in replay.synthesized(20):
            started = time.perf_counter()
            replay.commit(text)
            [event] = _collect(watcher, 1, timeout=30)
            latencies.append(time.perf_counter() - started)
            assert event.snapshot_id == snapshot_id
            time.sleep(0.02)
    print(f"commit -> event: median {statistics.median(latencies) * 1000:.1f} ms, "
          f"max {max(latencies) * 1000:.1f} ms")
    # The median says events drive the watcher (polling would put it near the interval); a
    # single slow commit on a loaded machine says nothing, so the maximum is only printed.
    assert statistics.median(latencies) < 0.5


class CountingIO(PyArrowFileIO):
    """A FileIO that counts every call that touches the file system."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def open_input(self, location: str):
        self.calls += 1
        return super().open_input(location)

    def exists(self, location: str) -> bool:
        self.calls += 1
        return super().exists(location)

    def list_dir(self, location: str) -> list[str]:
        self.calls += 1
        return super().list_dir(location)


def test_token_and_latest_never_touch_the_file_system(corpus, tmp_path):
    replay = Replay(corpus.scenarios["random_mix"].location, tmp_path / "t")
    replay.commit_until(3)
    io = CountingIO()
    with SnapshotWatcher(replay.location, io=io) as watcher:
        token, calls = watcher.token, io.calls
        for _ in range(200):
            assert not watcher.changed_since(token)
            assert watcher.latest.snapshot_id == replay.current_snapshot()
        time.sleep(0.3)
        assert io.calls == calls  # a quiet table: no look at all
        replay.commit()
        assert watcher.wait_changed(token, timeout=5)
        assert _collect(watcher, 1)[0].snapshot_id == replay.current_snapshot()
        assert io.calls > calls


def test_table_deleted_and_restored(corpus, tmp_path, caplog):
    replay = Replay(corpus.scenarios["random_mix"].location, tmp_path / "t")
    replay.commit_until(3)
    backup = tmp_path / "backup"
    with caplog.at_level(logging.WARNING), SnapshotWatcher(replay.location) as watcher:
        token = watcher.token
        shutil.copytree(replay.metadata, backup)
        shutil.rmtree(replay.location)
        assert watcher.wait_changed(token, timeout=5)
        deadline = time.monotonic() + 5  # then it hears metadata/ itself was deleted
        while not watcher.changed_since(watcher.token) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watcher.changed_since(watcher.token)  # it cannot vouch for a missing table
        assert watcher.wait(timeout=0.3) == []
        # Restored whole at once (copied aside, then renamed into place): a copy made in
        # place would show, for a moment, a version hint naming a file not copied yet.
        staging = tmp_path / "staging"
        shutil.copytree(backup, staging / "metadata")
        os.rename(staging, replay.location)
        replay.commit()
        events = _collect(watcher, 1)
    assert [e.snapshot_id for e in events] == [replay.current_snapshot()]
    # Which it says first depends on where the deletion was when it looked: no table left
    # ("the table is gone"), or a version hint naming a metadata file already deleted
    # ("cannot read the table"). Either way it said so once, and said when it was back.
    missing = [r.getMessage() for r in caplog.records if "looking again" in r.getMessage()]
    assert len(missing) == 1, missing
    assert "the table is gone" in missing[0] or "cannot read the table" in missing[0]
    assert "the table is back" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_watchers_come_and_go_while_commits_pour_in(corpus, tmp_path):
    """Watchers of the same table and of another start and stop while commits land: a
    directory's one watch outlives each of its watchers but the last, and arming or
    dropping watches never deadlocks with event delivery (watchdog calls back holding its
    observer's lock)."""
    replay = Replay(corpus.scenarios["mor_partitioned"].location, tmp_path / "t")
    replay.commit_until(len(replay.sources))
    other = Replay(corpus.scenarios["random_mix"].location, tmp_path / "other")
    other.commit_until(2)
    burst = replay.synthesized(200)
    steady = SnapshotWatcher(replay.location).start()
    done = threading.Event()

    def churn(location: str) -> None:
        while not done.is_set():
            with SnapshotWatcher(location) as passing:
                passing.wait(timeout=0.005)

    churners = [threading.Thread(target=churn, args=(location,), daemon=True)
                for location in (replay.location, other.location, other.location)]
    for thread in churners:
        thread.start()
    try:
        for _, text in burst:
            replay.commit(text)
        got = _collect(steady, len(burst))
    finally:
        done.set()
        for thread in churners:
            thread.join(timeout=10)
        steady.stop()
    assert not any(thread.is_alive() for thread in churners), "a watcher's stop() hung"
    assert [e.snapshot_id for e in got] == [snapshot_id for snapshot_id, _ in burst]


def test_misuse_and_missing_tables(corpus, tmp_path):
    with pytest.raises(NoSuchTableError, match="not an Iceberg table"):
        SnapshotWatcher(str(tmp_path / "nothing")).start()
    watcher = SnapshotWatcher(corpus.scenarios["random_mix"].location)
    with pytest.raises(WatcherError, match="not started"):
        watcher.wait(0)
    with pytest.raises(WatcherError, match="interval"):
        SnapshotWatcher(str(tmp_path), interval=0)
    with watcher:
        with pytest.raises(TypeError, match="never pickled"):
            pickle.dumps(watcher)
        assert SnapshotWatcher("s3://bucket/db/t").mode == "polling"
        fixed = SnapshotWatcher(corpus.scenarios["random_mix"].metadata_location)
        with fixed:
            assert fixed.mode == "fixed" and fixed.wait(timeout=0.1) == []
    with pytest.raises(WatcherError, match="stopped"):
        watcher.start()
    assert Path(corpus.scenarios["random_mix"].location).exists()


def _commit_without_hint(replay: Replay) -> int:
    """Commit the next version as a Hadoop writer that stops after the rename (the commit)
    and before rewriting version-hint.text: the hint is left stale."""
    replay.version += 1
    temp = replay.metadata / f"{uuid.uuid4()}.metadata.json"
    temp.write_text(replay.sources[replay.version - 1].read_text())
    os.rename(temp, replay.metadata / f"v{replay.version}.metadata.json")
    return replay.version


@pytest.mark.parametrize("poll", MODES)
def test_a_stale_version_hint_does_not_hide_commits(corpus, tmp_path, poll):
    """The watcher finds the current metadata as load_table does, walking forward from a
    stale hint like Iceberg Java: commits after it are seen and reported."""
    replay = Replay(corpus.scenarios["random_mix"].location, tmp_path / "t")
    replay.commit_until(2)
    stale = _commit_without_hint(replay)
    with SnapshotWatcher(replay.location, poll=poll) as watcher:
        assert watcher.latest.metadata_location.endswith(f"/v{stale}.metadata.json")
        assert watcher.latest.snapshot_id == replay.current_snapshot(stale)
        last = stale
        while replay.remaining and not _new_main_commits(replay, stale + 1, last):
            last = _commit_without_hint(replay)
        expected = _new_main_commits(replay, stale + 1, last)
        assert expected, "the scenario should gain a main commit after version 3"
        events = _collect(watcher, len(expected))
        assert [e.snapshot_id for e in events] == expected
        assert watcher.latest.metadata_location.endswith(f"/v{last}.metadata.json")
    assert (replay.metadata / "version-hint.text").read_text() == "2"
