"""The delete cache: one LRU bounded in bytes across typed shelves, one read per entry."""

from __future__ import annotations

import threading
import time

from meltwater.stream.engine.deletes.cache import DeleteCache, Shelf
from meltwater.stream.engine.deletes.loader import EqualityKeysKey, PositionFileKey


class Texts(Shelf[PositionFileKey, str]):
    @staticmethod
    def size_of(value: str) -> int:
        return len(value)


class OtherTexts(Shelf[EqualityKeysKey, str]):
    @staticmethod
    def size_of(value: str) -> int:
        return len(value)


def test_two_threads_wanting_one_entry_wait_for_a_single_read():
    shelf = Texts(DeleteCache())
    loads: list[int] = []
    started = threading.Barrier(2)

    def load() -> str:
        loads.append(1)
        time.sleep(0.05)  # the other thread most likely asks meanwhile; if it asks after,
        # it finds the entry: one read either way, whatever the machine's load
        return "positions"

    def ask(out: list[str]) -> None:
        started.wait()
        out.append(shelf.get(PositionFileKey("d.parquet"), load))

    results: list[str] = []
    threads = [threading.Thread(target=ask, args=(results,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == ["positions", "positions"]
    assert len(loads) == 1 and shelf.cache.reads == 1


def test_the_bound_evicts_the_least_recently_used_entry_never_the_one_just_read():
    cache = DeleteCache(max_bytes=10)
    shelf = Texts(cache)
    shelf.get(PositionFileKey("a"), lambda: "aaaa")
    shelf.get(PositionFileKey("b"), lambda: "bbbb")
    assert shelf.peek(PositionFileKey("a")) == "aaaa"  # a is now the most recently used
    shelf.get(PositionFileKey("c"), lambda: "cccc")  # 12 bytes: b goes
    assert shelf.peek(PositionFileKey("b")) is None
    assert shelf.peek(PositionFileKey("a")) == "aaaa" and cache.nbytes == 8
    shelf.get(PositionFileKey("big"), lambda: "x" * 50)  # over the bound on its own: kept
    assert shelf.peek(PositionFileKey("big")) == "x" * 50 and cache.nbytes == 50


def test_shelves_share_the_bound_and_never_each_others_entries():
    cache = DeleteCache(max_bytes=100)
    positions, keys = Texts(cache), OtherTexts(cache)
    positions.get(PositionFileKey("f"), lambda: "positions of f")
    assert keys.get(EqualityKeysKey("f"), lambda: "keys of f") == "keys of f"
    assert positions.peek(PositionFileKey("f")) == "positions of f"
    assert cache.reads == 2 and cache.nbytes == len("positions of f") + len("keys of f")
