"""The output pipeline's hand-offs: `ordered_map` keeps the items' order and a bounded
number of items in flight, `BackgroundWriter` writes in order and re-raises a write's
failure in the caller's thread."""

from __future__ import annotations

import threading
import time

import pytest

from meltwater.output.pipeline import BackgroundWriter, ordered_map


def test_ordered_map_yields_in_order_with_a_bounded_number_in_flight() -> None:
    taken = yielded = most = 0
    lock = threading.Lock()

    def items():
        nonlocal taken, most
        for item in range(40):
            with lock:
                taken += 1
                most = max(most, taken - yielded)
            yield item

    def slow_on_evens(item: int) -> int:
        if item % 2 == 0:
            time.sleep(0.002)  # later items finish first: the order is the map's to keep
        return item * 10

    results = []
    for result in ordered_map(slow_on_evens, items(), workers=3, ahead=2):
        results.append(result)
        with lock:
            yielded += 1
    assert results == [i * 10 for i in range(40)]
    assert most <= 3 + 2 + 1  # workers + ahead, and the one just taken


def test_ordered_map_raises_a_failure_in_order() -> None:
    def fail_at_five(item: int) -> int:
        if item == 5:
            raise ValueError("five")
        return item

    results = ordered_map(fail_at_five, range(20), workers=2, ahead=2)
    assert [next(results) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="five"):
        next(results)


def test_background_writer_writes_in_order_and_reraises_a_failed_write() -> None:
    written: list[int] = []
    writer: BackgroundWriter[int] = BackgroundWriter(written.append, depth=2)
    for item in range(10):
        writer.put(item)
    writer.close()
    assert written == list(range(10))

    def fail(_item: int) -> None:
        raise OSError(28, "No space left on device")

    failing: BackgroundWriter[int] = BackgroundWriter(fail)
    failing.put(0)
    with pytest.raises(OSError, match="No space"):
        failing.close()
