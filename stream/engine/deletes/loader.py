"""Delete files -> what a reader needs to drop rows: position masks and equality key sets.

The planner decides which delete files apply to a data file; this module has them read
(`meltwater.stream.engine.deletes.delete_files`), once, and turns them into two vectorized
tools for `meltwater.stream.engine.scans.reader`:

- `DeletionMask`: the sorted deleted row positions of one data file, from position delete
  files (rows `(file_path, pos)`, any data format) and deletion vectors (v3: a
  `deletion-vector-v1` blob in a Puffin file). `keep(first, n)` is the keep-mask of a batch
  covering file positions [first, first + n): two binary searches and one Arrow scatter, no
  per-row Python.
- `EqualityDeletes`: the key sets of a task's equality delete files, one per distinct
  `equality_ids` (a row is deleted when it matches any set), matched null-safely as the
  spec requires (`meltwater.stream.engine.deletes.equality_keys`). A scan's shared equality
  deletes are one lookup instead (`meltwater.stream.engine.deletes.equality_lookup`).

`DeleteLoader` caches what it read (an LRU bounded by Arrow bytes), because one
partition-scoped position delete file or one equality delete file applies to many data
files of a task group. It is thread-safe: `meltwater.stream.engine.scans.scan` shares one loader
across its reader threads, and two threads wanting the same file wait for a single read.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.spec.files import DataFile
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.remote_reads import read_each, waits_on_network
from meltwater.stream.engine.deletes.delete_files import (
    read_deletion_vector,
    read_equality_keys,
    read_position_deletes,
    sorted_positions,
)
from meltwater.stream.engine.deletes.equality_keys import (
    EqualityDeletes,
    EqualityKeySet,
    common_type,
)
from meltwater.stream.errors import CorruptDeleteFileError

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024


class DeletionMask:
    """The deleted row positions of one data file, sorted ascending (int64)."""

    def __init__(self, positions: pa.Array) -> None:
        self.positions = positions
        data = positions.buffers()[1]
        view = memoryview(data).cast("q") if data is not None else memoryview(b"").cast("q")
        self._view = view[positions.offset:positions.offset + len(positions)]

    def __len__(self) -> int:
        return len(self.positions)

    def keep(self, first: int, n: int) -> pa.BooleanArray | None:
        """Keep-mask of a batch of `n` rows at file positions [first, first + n), or None
        when no row of it is deleted (the common case: no mask to apply at all)."""
        lo = bisect.bisect_left(self._view, first)
        hi = bisect.bisect_left(self._view, first + n, lo)
        if lo == hi:
            return None
        offsets = self.positions.slice(lo, hi - lo)
        if first:
            offsets = pc.subtract(offsets, first)
        # scatter places each offset at its own index; every other slot stays null.
        return pc.is_null(pc.scatter(offsets, offsets, max_index=n - 1))

class DeleteLoader:
    """Reads delete files once per loader and caches their parsed contents (LRU by bytes)."""


    def __init__(self, io: FileIO, *, max_cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.io = io
        self.max_cache_bytes = max_cache_bytes
        self._cache: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[Any, threading.Lock] = {}
        self.reads = 0  # delete file reads, for tests and stats
        # the newest cache key of a kind (e.g. an equality lookup of one key typing), for a
        # reader that can extend what is cached instead of building anew
        self._newest: dict[Any, Any] = {}
        self._asked: set[Any] = set()

    # -- cache ---------------------------------------------------------------------------

    def _cached(self, key: Any, load: Callable[[], tuple[Any, int]]) -> Any:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit[0]
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    return hit[0]
            value, size = load()
            with self._lock:
                self.reads += 1
                self._loading.pop(key, None)
                self._cache[key] = (value, size)
                self._cached_bytes += size
                while self._cached_bytes > self.max_cache_bytes and len(self._cache) > 1:
                    _, (_, evicted) = self._cache.popitem(last=False)
                    self._cached_bytes -= evicted
            return value

    # -- positions -----------------------------------------------------------------------

    def deletion_mask(self, files: Sequence[DataFile], data_file_path: str
                      ) -> DeletionMask | None:
        """The positions deleted in one data file by position delete files and DVs, or None
        when there are none."""
        chunks = []
        for file in files:
            chunk = self.positions(file, data_file_path)
            if len(chunk):
                chunks.append(chunk)
        if not chunks:
            return None
        return DeletionMask(chunks[0] if len(chunks) == 1 else sorted_positions(chunks))

    def positions(self, file: DataFile, data_file_path: str) -> pa.Array:
        """Sorted positions one position delete file or DV deletes in one data file."""
        if file.is_deletion_vector:
            if file.referenced_data_file not in (None, data_file_path):
                return pa.array([], pa.int64())
            return self._cached(("dv", *file.key),
                                lambda: _sized(read_deletion_vector(self.io, file)))
        found = self._position_file(file).get(data_file_path)
        return found if found is not None else pa.array([], pa.int64())

    def _position_file(self, file: DataFile) -> dict[str, pa.Array]:
        """A position delete file's sorted positions by the data file path they delete in."""
        by_path: dict[str, pa.Array] = self._cached(
            ("pos", file.file_path),
            lambda: _sized_dict(read_position_deletes(self.io, file)))
        return by_path

    def read_positions(self, files: Sequence[DataFile]) -> None:
        """Read position delete files and DVs into the cache now rather than on first use,
        to choose when that small-file work runs (see `bulk_scan.read_chunk`). A file that
        fails is left for its first use, which raises the error where the rows are read.
        Stops once the files read ahead by this call would fill half the cache (8 bytes a
        position), so what one reader thread reads ahead is not evicted before it is used."""
        budget = self.max_cache_bytes // 2
        seen: set[tuple[str, int | None]] = set()
        chosen: list[DataFile] = []
        for file in files:
            if file.key in seen:
                continue
            seen.add(file.key)
            budget -= 8 * (file.record_count or 0)
            if budget < 0:
                break
            chosen.append(file)
        if chosen:  # from an object store several at a time (see `remote_reads`)
            read_each(chosen, self._read_ahead,
                      concurrently=waits_on_network(self.io, chosen[0].file_path))

    def _read_ahead(self, file: DataFile) -> None:
        with contextlib.suppress(MeltwaterError):
            if file.is_deletion_vector:
                self.positions(file, file.referenced_data_file or "")
            else:
                self._position_file(file)

    # -- equality ------------------------------------------------------------------------

    def cached(self, key: Any, load: Callable[[], tuple[Any, int]]) -> Any:
        """`load()`'s value (with its size in bytes), kept in the loader's cache under
        `key`: for what is derived from delete files once per reader, as a scan's
        equality lookup (`meltwater.stream.engine.deletes.equality_lookup`)."""
        return self._cached(key, load)

    def peek(self, key: Any) -> Any | None:
        """The value cached under `key`, or None; loads nothing."""
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                return None
            self._cache.move_to_end(key)
            return hit[0]

    def note_newest(self, kind: Any, key: Any) -> None:
        """Remember `key` as the newest cache entry of `kind` (see `newest`)."""
        with self._lock:
            self._newest[kind] = key

    def first_time(self, kind: Any) -> bool:
        """Whether this loader is asked about `kind` for the first time (the next time is
        not): for what is worth doing only when nothing was read before it."""
        with self._lock:
            first = kind not in self._asked
            self._asked.add(kind)
            return first

    def newest(self, kind: Any) -> tuple[Any, Any] | None:
        """(key, value) of the newest entry noted for `kind`, while it is still cached."""
        with self._lock:
            key = self._newest.get(kind)
            hit = None if key is None else self._cache.get(key)
            return None if hit is None else (key, hit[0])

    def equality_keys(self, file: DataFile) -> pa.Table:
        """The keys of an equality delete file, one column per equality field id (named by
        the id), in the delete file's own types."""
        table = self._cached(("eq", file.file_path),
                             lambda: _sized(read_equality_keys(self.io, file)))
        return table

    def equality_deletes(self, files: Sequence[DataFile], key_types: dict[int, pa.DataType],
                         key_paths: dict[int, tuple[str, ...]]) -> EqualityDeletes | None:
        """Key sets for a task's equality delete files, typed to match the batches.

        `key_types` and `key_paths` give, per equality field id, the column's Arrow type
        and its path (column name, then struct fields) in the batches to be matched.
        """
        groups: dict[tuple[int, ...], list[pa.Table]] = {}
        for file in files:
            ids = tuple(file.equality_ids or ())
            if not ids:
                raise CorruptDeleteFileError(f"{file.file_path}: equality delete file without "
                                        "equality field ids")
            groups.setdefault(ids, []).append(self.equality_keys(file))
        sets = []
        for ids, tables in groups.items():
            names = [str(fid) for fid in ids]
            types = [key_types[fid] for fid in ids]
            for table in tables:
                types = [common_type(ty, table.schema.field(name).type)
                         for ty, name in zip(types, names, strict=True)]
            schema = pa.schema([pa.field(n, t) for n, t in zip(names, types, strict=True)])
            keys = pa.concat_tables([t.select(names).cast(schema) for t in tables])
            if len(tables) > 1:
                keys = _distinct(keys)
            if keys.num_rows:
                sets.append(EqualityKeySet(ids, keys, key_paths))
        return EqualityDeletes(sets) if sets else None


_shared_loaders: weakref.WeakKeyDictionary[Any, DeleteLoader] = weakref.WeakKeyDictionary()
_shared_loaders_lock = threading.Lock()


def shared_loader(io: FileIO) -> DeleteLoader:
    """One loader per FileIO in this process (`meltwater.planner.table.fileio.shared_file_io`
    gives executors one FileIO per table storage): the partitions an executor reads, micro-
    batch after micro-batch, share what was read of immutable files (delete files, key
    columns, a backlog's equality lookup) instead of reading it again for each."""
    with _shared_loaders_lock:
        loader = _shared_loaders.get(io)
        if loader is None:
            loader = _shared_loaders[io] = DeleteLoader(io)
        return loader


def _sized(value: pa.Array | pa.Table) -> tuple[Any, int]:
    return value, value.nbytes


def _sized_dict(value: dict[str, pa.Array]) -> tuple[Any, int]:
    return value, sum(a.nbytes + len(k) for k, a in value.items())


def _distinct(table: pa.Table) -> pa.Table:
    """Distinct rows; Arrow's group_by keeps null as a key of its own."""
    if table.num_rows == 0:
        return table
    return table.group_by(table.column_names, use_threads=False).aggregate([]).select(
        table.column_names)
