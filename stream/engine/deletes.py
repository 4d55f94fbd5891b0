"""Delete files -> what a reader needs to drop rows: position masks and equality key sets.

The planner decides which delete files apply to a data file; this module only reads them,
once, and turns them into two vectorized tools for `meltwater.stream.engine.reader`:

- `DeletionMask`: the sorted deleted row positions of one data file, from position delete
  files (rows `(file_path, pos)`, any data format) and deletion vectors (v3: a
  `deletion-vector-v1` blob in a Puffin file). `keep(first, n)` is the keep-mask of a batch
  covering file positions [first, first + n): two binary searches and one Arrow scatter, no
  per-row Python.
- `EqualityDeletes`: the key sets of a task's equality delete files, one per distinct
  `equality_ids` (a row is deleted when it matches any set), matched null-safely as the
  spec requires (`meltwater.stream.engine.equality_keys`). A scan's shared equality
  deletes are one lookup instead (`meltwater.stream.engine.equality_lookup`).

`DeleteLoader` caches what it read (an LRU bounded by Arrow bytes), because one
partition-scoped position delete file or one equality delete file applies to many data
files of a task group. It is thread-safe: `meltwater.stream.engine.scan` shares one loader across
its reader threads, and two threads wanting the same file wait for a single read.

A deletion-vector blob, as the Puffin spec lays it out::

    [length: u32 big-endian = 4 + len(bitmap)] [magic D1 D3 39 64] [bitmap] [CRC-32: u32 BE]

where the CRC covers magic and bitmap, and the bitmap is a 64-bit Roaring bitmap in the
"portable" serialization (u64 LE count of 32-bit bitmaps, then per bitmap its u32 LE key,
the high 32 bits, followed by a portable 32-bit Roaring bitmap): exactly what CRoaring's
`roaring64_bitmap_portable_deserialize`, i.e. `pyroaring.BitMap64.deserialize`, reads.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.delete_index import referenced_data_file
from meltwater.planner.errors import MeltwaterError
from meltwater.planner.fileio import FileIO
from meltwater.planner.files import DataFile
from meltwater.planner.reserved_field_ids import DELETE_FILE_PATH_ID, DELETE_POS_ID
from meltwater.planner.types import Schema
from meltwater.stream.engine.arrow_schema import field_id
from meltwater.stream.engine.equality_keys import EqualityDeletes, EqualityKeySet, common_type
from meltwater.stream.engine.formats import open_source
from meltwater.stream.engine.projection import FileProjection, has_field_ids
from meltwater.stream.engine.remote_reads import read_each, waits_on_network
from meltwater.stream.errors import CorruptDeleteFileError, UnreadableFileError

DV_MAGIC = b"\xd1\xd3\x39\x64"
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
_READ_BATCH = 1 << 20


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


def _sorted_int64(chunks: Sequence[pa.Array]) -> pa.Array:
    arrays = [c.cast(pa.int64()) for c in chunks if len(c)]
    if not arrays:
        return pa.array([], pa.int64())
    merged = pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
    if merged.null_count:
        merged = merged.drop_null()
    return pc.take(merged, pc.sort_indices(merged))


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
        return DeletionMask(chunks[0] if len(chunks) == 1 else _sorted_int64(chunks))

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
        equality lookup (`meltwater.stream.engine.equality_lookup`)."""
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
    """One loader per FileIO in this process (`meltwater.planner.fileio.shared_file_io`
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


def _read_columns(io: FileIO, file: DataFile, field_ids: dict[int, str]) -> pa.Table:
    """Columns of a delete file by field id (any nesting through structs), named by id.

    `field_ids` maps each id to the column name to use when the file has no field ids. A
    file that cannot be read this way is a corrupt delete file.
    """
    try:
        return _read_columns_of(io, file, field_ids)
    except CorruptDeleteFileError:
        raise
    except UnreadableFileError as error:
        raise CorruptDeleteFileError(str(error)) from None


def _read_columns_of(io: FileIO, file: DataFile, field_ids: dict[int, str]) -> pa.Table:
    source = open_source(file.file_path, file.file_format, io)
    projection = FileProjection(source, Schema(()), dict.fromkeys(field_ids), names=field_ids)
    for extra in projection.extras:
        if extra.path is None:
            raise CorruptDeleteFileError(f"{file.file_path}: delete file has no column with "
                                    f"field id {extra.field_id}")
    batches = [projection.project(b)
               for _, b in source.batches(projection.selection, _READ_BATCH)]
    names = [e.name for e in projection.extras]
    if not batches:
        schema = pa.schema([pa.field(str(e.field_id), projection.extra_type(e))
                            for e in projection.extras])
        return schema.empty_table()
    table = pa.Table.from_batches(batches).select(names)
    return table.rename_columns([str(e.field_id) for e in projection.extras])


def read_position_deletes(io: FileIO, file: DataFile) -> dict[str, pa.Array]:
    """Data file path -> sorted deleted positions, for one position delete file."""
    found = _read_parquet_positions(io, file)
    if found is not None:
        return found
    table = _read_columns(io, file, {DELETE_FILE_PATH_ID: "file_path", DELETE_POS_ID: "pos"})
    paths = table.column(str(DELETE_FILE_PATH_ID))
    positions = table.column(str(DELETE_POS_ID))
    if paths.null_count or positions.null_count:
        raise CorruptDeleteFileError(f"{file.file_path}: position delete file has null file_path "
                                "or pos values")
    if table.num_rows == 0:
        return {}
    by_run = _split_sorted_runs(paths.combine_chunks(), positions.combine_chunks())
    if by_run is not None:
        return by_run
    grouped = pa.table({"path": paths, "pos": positions}).group_by(
        "path", use_threads=False).aggregate([("pos", "list")]).combine_chunks()
    lists = grouped.column("pos_list").chunk(0)
    return {path: _sorted_int64([lists[i].values])
            for i, path in enumerate(grouped.column("path").to_pylist())}


def _read_parquet_positions(io: FileIO, file: DataFile) -> dict[str, pa.Array] | None:
    """`read_position_deletes` for a Parquet file laid out as the spec says, with as little
    work as possible, or None to leave the file to the general reader.

    A scan reads hundreds of small delete files, so their per-file cost counts: one footer
    read without pre-buffering (a file this small gains nothing from coalesced reads on
    the I/O pool), two top-level columns found by name and checked by field id, no
    projection machinery. A file scoped to one data file by its manifest entry (its
    `referenced_data_file`, or equal `file_path` bounds, which the planner already trusts
    to match it to that one data file) has only `pos` read: half the cost of a file.
    Otherwise `file_path` is read dictionary-encoded, so a file naming one data file
    decodes no strings. Anything unusual, errors included, goes to the general reader,
    which names the file in its errors.
    """
    import pyarrow.parquet as pq

    resolve = getattr(io, "resolve", None)
    if resolve is None or file.file_format.upper() != "PARQUET":
        return None
    scoped = referenced_data_file(file)
    try:
        filesystem, path = resolve(file.file_path)
        with filesystem.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=False,
                                     read_dictionary=None if scoped else ["file_path"])
            if not _reserved_ids(parquet.schema_arrow):
                return None
            table = parquet.read(columns=["pos"] if scoped else ["file_path", "pos"],
                                 use_threads=False)
        if table.num_rows == 0:
            return {}
        if scoped is None:
            return _by_data_file(table)
        positions = _int64_positions(table.column("pos"))
        return None if positions is None else {scoped: _ascending(positions)}
    except (OSError, pa.ArrowException, ValueError):
        return None


def _int64_positions(positions: pa.ChunkedArray) -> pa.Array | None:
    """A `pos` column as one int64 array, or None when it has nulls or is not integers."""
    if positions.null_count or not pa.types.is_integer(positions.type):
        return None
    positions = positions.chunk(0) if positions.num_chunks == 1 else positions.combine_chunks()
    return positions if positions.type == pa.int64() else positions.cast(pa.int64())


def _by_data_file(table: pa.Table) -> dict[str, pa.Array] | None:
    """Data file path -> sorted positions, from one delete file's `file_path` (dictionary-
    encoded) and `pos` columns; None when they cannot be used as read."""
    paths = table.column("file_path")
    positions = _int64_positions(table.column("pos"))
    if positions is None or paths.null_count or not pa.types.is_dictionary(paths.type):
        return None
    names = {d.as_py() for chunk in paths.chunks for d in chunk.dictionary}
    if len(names) == 1 and all(len(chunk.dictionary) == 1 for chunk in paths.chunks):
        return {names.pop(): _ascending(positions)}
    decoded = pa.concat_arrays([chunk.dictionary_decode() for chunk in paths.chunks])
    return _split_sorted_runs(decoded, positions)


def _ascending(positions: pa.Array) -> pa.Array:
    """Positions sorted, as the spec requires them to be already (then returned as is)."""
    n = len(positions)
    if n > 1 and not pc.all(pc.greater_equal(positions.slice(1),
                                             positions.slice(0, n - 1))).as_py():
        return _sorted_int64([positions])
    return positions


def _reserved_ids(schema: pa.Schema) -> bool:
    """Whether a position delete file's `file_path` and `pos` carry the spec's field ids,
    or the file has no field ids at all (both matched by name, as the general reader
    does)."""
    ids = {name: field_id(schema.field(name)) for name in ("file_path", "pos")
           if schema.get_field_index(name) >= 0}
    if len(ids) != 2:
        return False
    return (ids == {"file_path": DELETE_FILE_PATH_ID, "pos": DELETE_POS_ID}
            or not has_field_ids(schema))


def _split_sorted_runs(paths: pa.Array, positions: pa.Array) -> dict[str, pa.Array] | None:
    """Positions per data file for a file sorted as the spec requires (by path, then pos):
    one run per path, no grouping or sorting needed. None if the file is not so sorted."""
    runs = pc.run_end_encode(paths)
    values, ends = runs.values, runs.run_ends.to_pylist()
    names = values.to_pylist()
    if len(set(names)) != len(names):
        return None  # a path appears in two runs: not sorted by path
    positions = positions.cast(pa.int64())
    result: dict[str, pa.Array] = {}
    start = 0
    for name, end in zip(names, ends, strict=True):
        result[name] = _ascending(positions.slice(start, end - start))
        start = end
    return result


def read_deletion_vector(io: FileIO, file: DataFile) -> pa.Array:
    """The sorted positions of a `deletion-vector-v1` blob, its length and CRC verified."""
    from pyroaring import BitMap64

    where = f"{file.file_path} (DV at offset {file.content_offset})"
    if file.content_offset is None or file.content_size_in_bytes is None:
        raise CorruptDeleteFileError(f"{file.file_path}: deletion vector without content_offset "
                                "and content_size_in_bytes")
    size = file.content_size_in_bytes
    blob = io.read_bytes(file.file_path, file.content_offset, size)
    if len(blob) != size or size < 12:
        raise CorruptDeleteFileError(f"{where}: truncated, {len(blob)} of {size} bytes")
    length = int.from_bytes(blob[:4], "big")
    if length != size - 8:
        raise CorruptDeleteFileError(f"{where}: length prefix {length} does not match blob size "
                                f"{size} (expected {size - 8})")
    if blob[4:8] != DV_MAGIC:
        raise CorruptDeleteFileError(f"{where}: bad magic {blob[4:8].hex()}, expected d1d33964")
    expected_crc = int.from_bytes(blob[4 + length:8 + length], "big")
    if zlib.crc32(blob[4:4 + length]) != expected_crc:
        raise CorruptDeleteFileError(f"{where}: CRC-32 mismatch")
    try:
        bitmap = BitMap64.deserialize(blob[8:4 + length])
    except (ValueError, MemoryError) as error:
        raise CorruptDeleteFileError(f"{where}: invalid Roaring bitmap ({error})") from error
    if file.record_count is not None and len(bitmap) != file.record_count:
        raise CorruptDeleteFileError(f"{where}: {len(bitmap)} positions, manifest says "
                                f"{file.record_count}")
    values = bitmap.to_array()  # array('Q'), sorted and distinct
    if len(values) and values[-1] >= 1 << 63:
        raise CorruptDeleteFileError(f"{where}: position {values[-1]} out of range")
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def read_equality_keys(io: FileIO, file: DataFile) -> pa.Table:
    """The equality keys of one equality delete file, columns named by field id (repeats
    kept: every use of them dedupes, and a backlog's files are read by the hundred)."""
    ids = file.equality_ids or ()
    return _read_columns(io, file, {fid: str(fid) for fid in ids}).combine_chunks()
