"""The watcher's ways of noticing new snapshots (`watch_modes`): which one a table gets,
how each waits between looks, and file events turning to polling when a directory cannot
be watched."""

from __future__ import annotations

import pytest

import meltwater.stream.watch.watch_modes as watch_modes
from meltwater.planner.table.table_source import TableIdentifier, TableSource
from meltwater.stream.errors import WatcherError
from meltwater.stream.watch.watch_modes import (
    CatalogPolling,
    FileEvents,
    FixedFile,
    Polling,
    watch_mode,
)


def _mode(source: TableSource, poll: bool | None = None, interval: float | None = None):
    return watch_mode(source, poll, interval, changed=lambda: None, wake=lambda: None)


def test_each_table_gets_its_mode_with_its_default_interval(tmp_path):
    catalog = _mode(TableSource(identifier=TableIdentifier("lake", ("db",), "t")))
    assert isinstance(catalog, CatalogPolling) and catalog.interval == 1.0
    local = _mode(TableSource(location=str(tmp_path)))
    assert isinstance(local, FileEvents) and local.interval == 30.0
    assert local.directory == str(tmp_path / "metadata")
    assert isinstance(_mode(TableSource(location=str(tmp_path)), poll=True), Polling)
    remote = _mode(TableSource(location="s3://bucket/db/t"))
    assert isinstance(remote, Polling) and remote.interval == 2.0
    fixed = _mode(TableSource(location=str(tmp_path / "v3.metadata.json")), interval=5)
    assert isinstance(fixed, FixedFile) and not fixed.runs and fixed.interval == 5.0
    with pytest.raises(WatcherError, match="file events need a local table"):
        _mode(TableSource(location="s3://bucket/db/t"), poll=False)


def test_polling_backs_off_and_a_failing_catalog_is_asked_less_and_less():
    polling = Polling(1.0)
    assert [polling.next_delay(changed=False) for _ in range(6)] == [
        0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert polling.next_delay(changed=True) == 0.05
    catalog = CatalogPolling(1.0)
    assert catalog.next_delay(changed=False) == catalog.next_delay(changed=True) == 1.0
    assert catalog.failed(first=True) == 2.0
    assert [catalog.failed(first=False) for _ in range(6)] == [4, 8, 16, 32, 60, 60]
    assert catalog.failed(first=True) == 2.0  # reachable again in between: from the start


def test_file_events_turn_to_polling_for_good_when_the_directory_cannot_be_watched(
        tmp_path, monkeypatch):
    (tmp_path / "metadata").mkdir()
    changed: list[int] = []
    events = FileEvents(30.0, str(tmp_path / "metadata"), changed=lambda: changed.append(1),
                        wake=lambda: None, location=str(tmp_path))

    def refused(*_args):
        raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(watch_modes, "watch_directory", refused)
    fallback = events.arm()
    assert isinstance(fallback, Polling) and fallback.interval == 2.0
    assert not events.vouches() and changed == []


def test_file_events_vouch_while_watched_and_poll_while_metadata_is_gone(tmp_path):
    changed: list[int] = []
    events = FileEvents(30.0, str(tmp_path / "metadata"), changed=lambda: changed.append(1),
                        wake=lambda: None, location=str(tmp_path))
    assert events.arm() is events and not events.vouches()  # no metadata/ yet
    assert events.next_delay(changed=False) == 0.1  # polled for, up to 2 s
    (tmp_path / "metadata").mkdir()
    try:
        assert events.arm() is events and events.vouches() and changed == [1]
        assert events.next_delay(changed=True) == 30.0  # the safety look only
    finally:
        events.cancel()
