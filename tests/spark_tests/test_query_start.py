"""Streaming queries start one at a time, each past its sources' initialization.

Why (see `meltwater.stream.spark.query_start`): Spark's Python streaming source inserts its worker
settings into a HashMap shared by every `format("meltwater")` query of the session; two
first initializations at once can corrupt it and poison every later task of the session.
The race itself is timing-dependent, so it is not reproduced here; these tests check the
two facts the fix rests on: starts never overlap while a query initializes, and once
`start_query` returns, the shared map already holds every key a later start puts (so later
starts only replace values).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from meltwater.stream import register
from meltwater.stream.spark.query_start import start_query


class _Query:
    """A query reporting 'Initializing sources' for a few status polls, then running."""

    def __init__(self, tracker: _Tracker, polls: int) -> None:
        self.tracker = tracker
        self.polls = polls
        self.name = "fake"

    @property
    def isActive(self) -> bool:
        return True

    @property
    def status(self) -> dict[str, Any]:
        if self.polls > 0:
            self.polls -= 1
            return {"message": "Initializing sources"}
        self.tracker.initialized()
        return {"message": "Waiting for data to arrive"}


class _Tracker:
    """Counts queries between `start()` and the end of their initialization."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.initializing = 0
        self.most = 0
        self.done: set[int] = set()

    def started(self) -> None:
        with self.lock:
            self.initializing += 1
            self.most = max(self.most, self.initializing)

    def initialized(self) -> None:
        with self.lock:
            ident = threading.get_ident()
            if ident not in self.done:
                self.done.add(ident)
                self.initializing -= 1


class _Writer:
    def __init__(self, tracker: _Tracker) -> None:
        self.tracker = tracker

    def start(self) -> _Query:
        self.tracker.started()
        return _Query(self.tracker, polls=5)


def test_starts_wait_for_each_query_to_initialize_its_sources() -> None:
    tracker = _Tracker()
    returned: list[Any] = []
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait()
        returned.append(start_query(_Writer(tracker)))

    threads = [threading.Thread(target=go) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(returned) == 4
    assert all(query.polls == 0 for query in returned)  # each returned initialized
    assert tracker.most == 1  # never two initializing at once


def test_a_started_query_has_put_every_key_a_later_start_puts(spark, corpus, tmp_path) -> None:
    register(spark)  # a fresh registration: a fresh, empty environment map

    def environment() -> dict[str, str]:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        env = manager.lookupDataSource("meltwater").dataSourceCls().envVars()
        return {str(key): str(env.get(key)) for key in env.keySet().toArray()}

    before = environment()
    location = corpus.scenarios["cow_partitioned"].location
    keys: list[set[str]] = []
    for run in range(2):
        writer = (spark.readStream.format("meltwater").option("starting", "earliest")
                  .load(location).writeStream.format("noop")
                  .option("checkpointLocation", str(tmp_path / f"ckpt{run}"))
                  .trigger(processingTime="1 hour"))
        query = start_query(writer)
        try:
            keys.append(set(environment()))
        finally:
            query.stop()
    assert keys[0] > set(before), "the first start added no runner settings: premise changed"
    assert keys[1] == keys[0]  # a second start inserts nothing new


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
