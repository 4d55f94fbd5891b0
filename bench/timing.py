"""Timing peers in this process; medians.

Two ways. `measure` warms a peer up and times its runs back to back, peer after peer.
`measure_rounds` takes the peers in turns, round after round, and times each run right
after an untimed run of the same peer. Plain interleaving made figures worse: on this VM
(memory reclaimed by DAMON) every peer then started each run with its files and allocator
pages cold, so raw pyarrow swung 0.25-0.8 s. Back to back, a burst of load from other work
fell on one peer's block only: two scan benchmarks minutes apart gave meltwater 1.28x and
1.67x raw pyarrow. Rounds of warm pairs keep both the warmth and the fairness.

A peer that raises is recorded with its error instead of aborting the benchmark, so one
broken reader still leaves the others' figures on the table.
"""

from __future__ import annotations

import gc
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

RunFn = Callable[[], int]


@dataclass(frozen=True)
class Peer:
    """A reader to time: `make` builds it (untimed) and returns the function to time.

    `before` runs untimed ahead of every run, e.g. to empty a cache for cold planning.
    """

    name: str
    what: str
    make: Callable[[], RunFn]
    before: Callable[[], None] | None = None


@dataclass
class Measurement:
    """Seconds of each timed run and the rows (or tasks) every run returned."""

    name: str
    what: str
    seconds: list[float] = field(default_factory=list)
    rows: int | None = None
    error: str | None = None
    note: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    def as_json(self) -> dict:
        return {"what": self.what, "seconds": self.seconds, "median_seconds": self.median,
                "rows": self.rows, "error": self.error, "note": self.note}


def _fail(result: Measurement, error: BaseException) -> None:
    lines = traceback.format_exception_only(type(error), error)
    result.error = lines[-1].strip()[:300]
    result.seconds = []


def _run_once(peer: Peer, run: RunFn, result: Measurement, timed: bool) -> None:
    if peer.before:
        peer.before()
    gc.collect()  # don't charge one peer for another's garbage
    started = time.perf_counter()
    rows = run()
    elapsed = time.perf_counter() - started
    if result.rows is not None and rows != result.rows:
        raise RuntimeError(f"returned {rows} rows after {result.rows} on an earlier run")
    result.rows = rows
    if timed:
        result.seconds.append(elapsed)


def measure(peers: list[Peer], repeats: int, log: Callable[[str], None] = print,
            ) -> list[Measurement]:
    """For each peer in turn: build it, one untimed warm-up run, then `repeats` timed runs."""
    return [_measure_one(peer, repeats, log) for peer in peers]


def _measure_one(peer: Peer, repeats: int, log: Callable[[str], None]) -> Measurement:
    result = Measurement(peer.name, peer.what)
    log(f"  timing {peer.name} ...")
    try:
        run = peer.make()
        _run_once(peer, run, result, timed=False)
        for _ in range(repeats):
            _run_once(peer, run, result, timed=True)
    except Exception as error:  # the benchmark reports the failure and goes on
        _fail(result, error)
    return result


def measure_rounds(peers: list[Peer], repeats: int, log: Callable[[str], None] = print,
                   ) -> list[Measurement]:
    """Build every peer and warm it up; then `repeats` rounds, each running every peer
    twice in a row and timing the second run. The order reverses every other round."""
    results = [Measurement(peer.name, peer.what) for peer in peers]
    runs: list[RunFn | None] = []
    for peer, result in zip(peers, results, strict=True):
        log(f"  building and warming up {peer.name} ...")
        try:
            run = peer.make()
            _run_once(peer, run, result, timed=False)
            runs.append(run)
        except Exception as error:  # the benchmark reports the failure and goes on
            _fail(result, error)
            runs.append(None)
    log(f"  {repeats} rounds of {len(peers)} peers, each timed run after an untimed one ...")
    for round_ in range(repeats):
        order = list(range(len(peers)))
        if round_ % 2:
            order.reverse()
        for index in order:
            run, result = runs[index], results[index]
            if run is None:
                continue
            try:
                _run_once(peers[index], run, result, timed=False)
                _run_once(peers[index], run, result, timed=True)
            except Exception as error:
                _fail(result, error)
                runs[index] = None
    return results
