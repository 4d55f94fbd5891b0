"""End to end, on loopback: Apache Iceberg Java commits, `meltwater serve` mirrors into
PostgreSQL, and after every commit the mirror is exactly what Iceberg Java reads.

Each test runs the live writer (`testbed/live`) and the service as separate processes, as in
production; the judge is Iceberg Java's own read of each snapshot (`truth_table`).
"""

from __future__ import annotations

import random
import re
import statistics
import threading
import time
from pathlib import Path

from loopback_ports import free_port
from service_process import Pipeline, write_config

from live.client import Commit, LiveWriter, truth_table, wait_until
from meltwater.sinks.mirror_stream import ledger_name
from service_tests.mirror_check import differences, mirror_state, read_state, same_rows


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def mirror_pipeline(name: str, location: str, tmp: Path, url: str, **kwargs) -> Pipeline:
    return Pipeline(name, location, tmp / f"chk-{name}",
                    {"type": "postgres", "url": url, "table": f"orders_{name}"}, **kwargs)


def ledger_of(pipeline: Pipeline) -> str:
    return ledger_name(pipeline.name, str(pipeline.checkpoint))


class Arrivals(threading.Thread):
    """Records when a mirror first holds each sequence number (for a polling pipeline)."""

    def __init__(self, url: str, table: str, pipeline: str) -> None:
        super().__init__(daemon=True)
        self.url, self.table, self.pipeline = url, table, pipeline
        self.seen: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            state = read_state(self.url, self.table, self.pipeline)
            if state.sequence_number is not None and state.sequence_number not in self.seen:
                self.seen[state.sequence_number] = state.seen_at
            time.sleep(0.05)

    def latency(self, commit: Commit) -> float | None:
        times = [t for s, t in self.seen.items() if s >= commit.sequence_number]
        return min(times) - commit.committed_at if times else None


def test_commit_to_mirror_latency_event_driven_vs_polling(tmp_path, pg_database, serve,
                                                          live_writer):
    """Event-driven commit-to-mirror latency below a 10 s polling trigger's in the same
    run; the mirror equals Iceberg Java's read after every commit.

    The latencies are printed, not held to a bound in seconds: on a loaded machine an
    absolute bound fails for reasons that are not meltwater's (2.001 s once at load 14).
    An event trigger reacts to each commit, a 10 s trigger waits ~5 s on average, so the
    comparison holds wherever the test can run at all."""
    rng = random.Random(11)
    with live_writer() as writer:
        writer.commit("append")
        event = mirror_pipeline("event", writer.location, tmp_path, pg_database)
        poll = mirror_pipeline("poll", writer.location, tmp_path, pg_database, trigger="10s")
        port = free_port()
        config = write_config(tmp_path / "service.toml", [event, poll], port=port)
        service = serve.start(config, port, tmp_path / "service.log")
        try:
            service.wait_running()
            mirror_state(pg_database, "orders_poll", until_sequence=1, pipeline=ledger_of(poll),
                         timeout=60)
            arrivals = Arrivals(pg_database, "orders_poll", ledger_of(poll))
            arrivals.start()
            event_latency, commits = [], []
            for _ in range(16):
                commit = writer.commit()
                commits.append(commit)
                state = mirror_state(pg_database, "orders_event", pipeline=ledger_of(event),
                                     until_sequence=commit.sequence_number, timeout=60)
                assert state.snapshot_id == commit.snapshot_id
                truth = truth_table(commit)
                assert same_rows(state.rows, truth), differences(state.rows, truth)
                event_latency.append(state.seen_at - commit.committed_at)
                time.sleep(rng.uniform(0.2, 1.5))
            final = mirror_state(pg_database, "orders_poll", pipeline=ledger_of(poll),
                                 until_sequence=commits[-1].sequence_number, timeout=60)
            arrivals.done.set()
            arrivals.join()
            arrivals.seen.setdefault(final.sequence_number, final.seen_at)
            truth = truth_table(commits[-1])
            assert same_rows(final.rows, truth), differences(final.rows, truth)
            poll_latency = [arrivals.latency(c) for c in commits]
            assert None not in poll_latency

            # The mirror's rows land inside the batch; the service learns of the batch's
            # end from Spark's progress on its next tick, so lag reaches 0 a moment later.
            wait_until(lambda: _event_lag(service) == 0, timeout=30)
            status, health = service.health()
            assert status == 200 and health["pipelines"]["event"]["lag_snapshots"] == 0
            metrics = service.metrics()
            assert re.search(r'meltwater_batches_total\{pipeline="event"\} [1-9]', metrics)
            assert 'meltwater_rows_total{change_type="INSERT",pipeline="event"}' in metrics
            assert 'meltwater_lag_seconds{pipeline="event"} 0.0' in metrics
            assert service.stop() == 0, service.tail()
        finally:
            if service.process.poll() is None:
                service.kill()
    event_median, poll_median = statistics.median(event_latency), statistics.median(poll_latency)
    print(f"\ncommit-to-mirror latency over {len(commits)} commits: event-driven median "
          f"{event_median:.2f}s p95 {percentile(event_latency, 0.95):.2f}s; 10s polling "
          f"median {poll_median:.2f}s p95 {percentile(poll_latency, 0.95):.2f}s")
    assert event_median < poll_median


class CommitLoop(threading.Thread):
    """Keeps the writer committing until stopped; remembers every commit by sequence number."""

    def __init__(self, writer: LiveWriter, pause: tuple[float, float]) -> None:
        super().__init__(daemon=True)
        self.writer, self.pause = writer, pause
        self.by_sequence: dict[int, Commit] = {}
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.rng = random.Random(5)

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                commit = self.writer.commit()
                self.by_sequence[commit.sequence_number] = commit
                time.sleep(self.rng.uniform(*self.pause))
        except BaseException as error:  # noqa: BLE001  (reported by the test, whatever it is)
            self.error = error

    def commit_at(self, sequence_number: int, timeout: float = 30) -> Commit:
        deadline = time.monotonic() + timeout
        while sequence_number not in self.by_sequence:
            assert time.monotonic() < deadline, f"no commit with sequence {sequence_number}"
            time.sleep(0.05)
        return self.by_sequence[sequence_number]


def test_kill_9_at_random_points_loses_and_duplicates_nothing(tmp_path, pg_database, serve,
                                                              live_writer):
    """Ten SIGKILLs of the service while Iceberg Java keeps committing: after each, the
    mirror is exactly Iceberg Java's read at the snapshot its ledger names; at the end it
    converges to the last commit."""
    rng = random.Random(23)
    with live_writer(seed=3) as writer:
        first = writer.commit("append")
        pipeline = mirror_pipeline("kill", writer.location, tmp_path, pg_database)
        port = free_port()
        config = write_config(tmp_path / "service.toml", [pipeline], port=port)
        loop = CommitLoop(writer, (0.1, 0.6))
        loop.by_sequence[first.sequence_number] = first
        loop.start()
        checked = []
        try:
            for round_ in range(10):
                service = serve.start(config, port, tmp_path / f"service-{round_}.log")
                if round_ % 3 == 2:  # some kills land while the service starts up
                    time.sleep(rng.uniform(3, 12))
                else:  # the others once it has moved the mirror on, mid-batch or between
                    service.wait_running()
                    held = read_state(pg_database, "orders_kill", ledger_of(pipeline))
                    mirror_state(pg_database, "orders_kill", pipeline=ledger_of(pipeline),
                                 until_sequence=(held.sequence_number or 0) + 1, timeout=120)
                    time.sleep(rng.uniform(0, 2.5))
                service.kill()
                state = read_state(pg_database, "orders_kill", ledger_of(pipeline))
                if state.sequence_number is None:
                    continue
                commit = loop.commit_at(state.sequence_number)
                assert state.snapshot_id == commit.snapshot_id
                truth = truth_table(commit)
                assert same_rows(state.rows, truth), (
                    f"after kill {round_ + 1}: " + differences(state.rows, truth))
                checked.append(state.sequence_number)
        finally:
            loop.stop_event.set()
            loop.join(timeout=60)
        assert loop.error is None, loop.error
        assert len(set(checked)) >= 6, f"kills after progress: {checked}"
        last = loop.by_sequence[max(loop.by_sequence)]
        service = serve.start(config, port, tmp_path / "service-final.log")
        try:
            service.wait_running()
            state = mirror_state(pg_database, "orders_kill", pipeline=ledger_of(pipeline),
                                 until_sequence=last.sequence_number, timeout=180)
            truth = truth_table(last)
            assert state.snapshot_id == last.snapshot_id
            assert same_rows(state.rows, truth), differences(state.rows, truth)
            assert service.stop() == 0, service.tail()
        finally:
            if service.process.poll() is None:
                service.kill()
    print(f"\n10 kills; mirror checked exact at sequence numbers {checked}; "
          f"{len(loop.by_sequence)} commits in all, final {last.sequence_number}")


def _event_lag(service) -> int | None:
    """The event pipeline's lag in snapshots as /health reports it, None while unanswered."""
    answer = service.health()
    if answer is None or answer[0] != 200:
        return None
    return answer[1]["pipelines"]["event"].get("lag_snapshots")


def _rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (the JVM, Spark's Python workers)."""
    total = 0.0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        total += int(match.group(1)) / 1024 if match else 0
        pids.extend(int(c) for c in children)
    return total


def test_burst_of_100_commits_converges_with_bounded_memory(tmp_path, pg_database, serve,
                                                            live_writer):
    with live_writer(seed=9) as writer:
        for _ in range(3):
            writer.commit("append")
        pipeline = mirror_pipeline("burst", writer.location, tmp_path, pg_database)
        port = free_port()
        config = write_config(tmp_path / "service.toml", [pipeline], port=port)
        service = serve.start(config, port, tmp_path / "service.log")
        try:
            service.wait_running()
            mirror_state(pg_database, "orders_burst", pipeline=ledger_of(pipeline),
                         until_sequence=3, timeout=60)
            before = _rss_mib(service.process.pid)
            peak = before
            started = time.monotonic()
            sampler_stop = threading.Event()

            def sample() -> None:
                nonlocal peak
                while not sampler_stop.is_set():
                    peak = max(peak, _rss_mib(service.process.pid))
                    time.sleep(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            commits = writer.burst(100)
            burst_seconds = time.monotonic() - started
            state = mirror_state(pg_database, "orders_burst", pipeline=ledger_of(pipeline),
                                 until_sequence=commits[-1].sequence_number, timeout=180)
            converged = time.monotonic() - started
            sampler_stop.set()
            sampler.join()
            truth = truth_table(commits[-1])
            assert state.snapshot_id == commits[-1].snapshot_id
            assert same_rows(state.rows, truth), differences(state.rows, truth)
            batches = state.batch_id
            assert service.stop() == 0, service.tail()
        finally:
            if service.process.poll() is None:
                service.kill()
    print(f"\nburst: 100 commits written in {burst_seconds:.1f}s, mirror converged "
          f"{converged:.1f}s after the burst began, in {batches} micro-batches; service RSS "
          f"{before:.0f} MiB before, {peak:.0f} MiB peak")
    assert peak - before < 512, f"memory grew {peak - before:.0f} MiB during the burst"
