"""What readers derive from immutable files, kept once per process and bounded in bytes.

Delete files, a data file's key columns and a backlog's equality lookup never change once
written, and one of them serves many tasks (a partition-scoped delete file many data
files, a lookup every task of a scan, a file's keys every commit of a range that reaches
it). `DeleteCache` keeps them in one LRU bounded by the bytes of what it holds
(`DEFAULT_CACHE_BYTES`, the one bound), and reads each at most once at a time: two
threads asking for the same entry wait for a single read.

Each kind of entry is a `Shelf`: a typed view of the cache with its own key type (a
frozen dataclass: keys of two kinds never compare equal) and value type, and the rule for
an entry's size. The loader's own shelves hold what it reads from delete files
(`meltwater.stream.engine.deletes.loader`); `key_columns` and `equality_lookup` put theirs
beside them (`DeleteLoader.shelf`), so one bound covers everything a reader keeps.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, cast

import pyarrow as pa

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024


class DeleteCache:
    """One LRU over every shelf's entries, bounded by their bytes; thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.reads = 0  # entries loaded (a miss each), for tests and stats
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, load: Callable[[], tuple[object, int]]) -> object:
        """The entry under `key`, loaded (value and size in bytes) if absent. Evicts the
        least recently used entries beyond the bound, never the one just loaded."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:
                    return hit[0]
            value, size = load()
            with self._lock:
                self.reads += 1
                self._loading.pop(key, None)
                self._entries[key] = (value, size)
                self._bytes += size
                while self._bytes > self.max_bytes and len(self._entries) > 1:
                    _, (_, evicted) = self._entries.popitem(last=False)
                    self._bytes -= evicted
            return value

    def peek(self, key: Hashable) -> object | None:
        """The entry under `key` if it is held (marked as used); loads nothing."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    @property
    def nbytes(self) -> int:
        """The bytes the entries held now take, by their shelves' measure."""
        with self._lock:
            return self._bytes


class Shelf(ABC, Generic[K, V]):
    """The cache's entries of one kind: keys of type `K`, values of type `V`."""

    def __init__(self, cache: DeleteCache) -> None:
        self.cache = cache

    @staticmethod
    @abstractmethod
    def size_of(value: V) -> int:
        """The bytes an entry counts for against the cache's bound."""

    def get(self, key: K, load: Callable[[], V]) -> V:
        """The entry under `key`, loaded by `load()` if the cache does not hold it."""
        def sized() -> tuple[object, int]:
            value = load()
            return value, self.size_of(value)

        return cast(V, self.cache.get(key, sized))

    def peek(self, key: K) -> V | None:
        """The entry under `key` if the cache holds it."""
        return cast("V | None", self.cache.peek(key))


class ArrowShelf(Shelf[K, V]):
    """Entries that are Arrow arrays or tables, counted by their buffers' bytes."""

    @staticmethod
    def size_of(value: V) -> int:
        """The entry's Arrow buffers' bytes."""
        return int(cast("pa.Array | pa.Table", value).nbytes)
