"""Delete files -> what a reader needs to drop rows: position masks and equality key sets.

The planner decides which delete files apply to a data file; this module has them read
(`meltwater.stream.engine.deletes.delete_files`), once, and turns them into two vectorized
tools for `meltwater.stream.engine.scans.reader`:

- `DeletionMask`: the sorted deleted row positions of one data file, from position delete
  files (rows `(file_path, pos)`, any data format) and deletion vectors (v3: a
  `deletion-vector-v1` blob in a Puffin file). `keep(first, n)` is the keep-mask of a batch
  covering file positions [first, first + n): two binary searches and one Arrow scatter, no
  per-row Python.
- equality delete files' keys (`equality_keys`), which a scan's and a change read's
  lookups (`meltwater.stream.engine.deletes.equality_lookup`) match rows against
  null-safely, as the spec requires.

`DeleteLoader` keeps what it read in a `DeleteCache` (`meltwater.stream.engine.deletes.
cache`: one LRU bounded in bytes, one shelf a kind of entry), because one partition-scoped
position delete file or one equality delete file applies to many data files of a task
group. It is thread-safe: `meltwater.stream.engine.scans.scan` shares one loader across its
reader threads, and two threads wanting the same file wait for a single read.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.spec.files import DataFile
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.remote_reads import read_each, waits_on_network
from meltwater.stream.engine.deletes.cache import (
    DEFAULT_CACHE_BYTES,
    ArrowShelf,
    DeleteCache,
    Shelf,
)
from meltwater.stream.engine.deletes.delete_files import (
    read_deletion_vector,
    read_equality_keys,
    read_position_deletes,
    sorted_positions,
)

if TYPE_CHECKING:
    from meltwater.stream.engine.keys.index_location import TableIndexes

S = TypeVar("S", bound="Shelf[Any, Any]")  # any kind of shelf (each typed itself)


@dataclass(frozen=True)
class PositionFileKey:
    """A position delete file, cached whole: positions by the data file they delete in."""

    path: str


@dataclass(frozen=True)
class DeletionVectorKey:
    """One deletion vector: its Puffin file and the blob's offset in it."""

    path: str
    offset: int | None


@dataclass(frozen=True)
class EqualityKeysKey:
    """An equality delete file's keys."""

    path: str


class PositionFiles(Shelf[PositionFileKey, dict[str, pa.Array]]):
    """Position delete files read whole: sorted positions by data file path."""

    @staticmethod
    def size_of(value: dict[str, pa.Array]) -> int:
        """The positions' bytes and the paths' characters."""
        return sum(a.nbytes + len(k) for k, a in value.items())


class DeletionVectors(ArrowShelf[DeletionVectorKey, pa.Array]):
    """Deletion vectors' positions, sorted."""


class EqualityKeyTables(ArrowShelf[EqualityKeysKey, pa.Table]):
    """Equality delete files' keys, a column per equality field id named by the id."""


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
    """Reads delete files once per loader and keeps their parsed contents (see the module
    doc). What others derive from immutable files once per reader (a data file's key
    columns, a backlog's equality lookup) goes on shelves of the same cache (`shelf`)."""

    def __init__(self, io: FileIO, *, max_cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.io = io
        self.cache = DeleteCache(max_cache_bytes)
        self._positions = PositionFiles(self.cache)
        self._vectors = DeletionVectors(self.cache)
        self._equality_keys = EqualityKeyTables(self.cache)
        self._shelves: dict[type[Shelf[Any, Any]], Shelf[Any, Any]] = {}
        self._shelves_lock = threading.Lock()
        self._key_indexes: TableIndexes | None = None

    @property
    def key_indexes(self) -> TableIndexes | None:
        """Where the table's key indexes live, when its reader keeps them
        (`keys.key_index`)."""
        return self._key_indexes

    @key_indexes.setter
    def key_indexes(self, indexes: TableIndexes | None) -> None:
        """A reader that keeps key indexes keeps the page facts of the files it reads
        beside them too (`decode.page_metadata`): both spare the next process decoding."""
        from meltwater.stream.engine.decode import page_metadata

        self._key_indexes = indexes
        page_metadata.persist_under(None if indexes is None else indexes.pages_directory)

    @property
    def reads(self) -> int:
        """Entries read into the cache (delete files, key columns, lookups built)."""
        return self.cache.reads

    def shelf(self, kind: type[S]) -> S:
        """This loader's shelf of a kind, made on first use, on the loader's cache."""
        with self._shelves_lock:
            found = self._shelves.get(kind)
            if found is None:
                found = self._shelves[kind] = kind(self.cache)
            return cast(S, found)  # made as `kind` above

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
            return self._vectors.get(DeletionVectorKey(file.file_path, file.content_offset),
                                     lambda: read_deletion_vector(self.io, file))
        found = self._position_file(file).get(data_file_path)
        return found if found is not None else pa.array([], pa.int64())

    def _position_file(self, file: DataFile) -> dict[str, pa.Array]:
        """A position delete file's sorted positions by the data file path they delete in."""
        return self._positions.get(PositionFileKey(file.file_path),
                                   lambda: read_position_deletes(self.io, file))

    def read_positions(self, files: Sequence[DataFile]) -> None:
        """Read position delete files and DVs into the cache now rather than on first use,
        to choose when that small-file work runs (see `bulk_scan.read_chunk`). A file that
        fails is left for its first use, which raises the error where the rows are read.
        Stops once the files read ahead by this call would fill half the cache (8 bytes a
        position), so what one reader thread reads ahead is not evicted before it is used."""
        budget = self.cache.max_bytes // 2
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

    def equality_keys(self, file: DataFile) -> pa.Table:
        """The keys of an equality delete file, one column per equality field id (named by
        the id), in the delete file's own types."""
        return self._equality_keys.get(EqualityKeysKey(file.file_path),
                                       lambda: read_equality_keys(self.io, file))


_shared_loaders: weakref.WeakKeyDictionary[FileIO, DeleteLoader] = weakref.WeakKeyDictionary()
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
