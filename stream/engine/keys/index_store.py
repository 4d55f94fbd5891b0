"""A key index on local disk: runs in Arrow IPC segment files, named by one JSON catalog.

Layout of one index (one table, one key field, one key type), in its own directory:

- `seg-<random>.arrow`: an Arrow IPC file of runs (`key_runs`), one record batch a data
  file, read memory-mapped, so a lookup touches the pages it searches;
- `blk-<same random>.arrow`: the segment's blocks (`key_blocks`), one batch a run: each
  block's first key and CRC-32. Small (12 bytes for 512 rows of `long` keys), read whole
  and checked against its CRC-32 when the segment is first opened;
- `catalog.json`: which data file's run is which batch of which segment (with the file's
  row count and size, checked against the data file asked about, and the run's rows),
  each segment's sizes and its blocks file's CRC-32, and what the index is of (table
  uuid, key field id, key type);
- `lock`: writers take it (`fcntl.flock`), so processes sharing an index (Spark executors,
  two commands) update it one at a time. Readers take no lock.

Why files and not an embedded database: a run is written once and searched in place;
SQLite or LMDB would insert every row through a B-tree (tens of seconds at 200M rows, where
sorting a file's keys and writing them takes a fraction of reading them) and store each key
again in their pages. Here a row costs its key and 4 bytes of position: 12 bytes for a
`long` key, plus a few hundred bytes of catalog and IPC framing a data file.

Crash safety: a segment is written under a temporary name and renamed; only then does the
catalog, written the same way, name it. A kill -9 at any point leaves the old
catalog (and maybe an unnamed segment, removed by the next writer) or the new one, never one
naming a half-written file. Damage (a truncated or altered segment, an unreadable catalog,
a catalog of another table or key) is detected by sizes, row counts, Arrow's own checks of
the IPC framing, the blocks file's CRC-32 and each block's, checked before the block is
searched (`StoredRun`); what is damaged is treated as absent, so its files are read again
and re-indexed. It is a cache, never a source of truth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from meltwater.stream.engine.keys.key_blocks import blocks_schema, run_blocks
from meltwater.stream.engine.keys.key_runs import run_schema
from meltwater.stream.engine.keys.stored_runs import SegmentFile, StoredRun
from meltwater.stream.errors import KeyIndexDamagedError

log = logging.getLogger(__name__)

CATALOG = "catalog.json"
LOCK = "lock"
FORMAT = 2  # 1: one CRC-32 a segment, checked whole before its first lookup
SEGMENT_PREFIX = "seg-"
BLOCKS_PREFIX = "blk-"
SEGMENT_SUFFIX = ".arrow"


@dataclass(frozen=True)
class RunEntry:
    """Where one data file's run is, and which data file it was built from."""

    segment: str
    batch: int
    rows: int  # the data file's record count
    file_bytes: int  # the data file's size
    used: int  # the catalog generation that last used it (eviction order)
    run_rows: int  # the run's rows (the file's rows with a key)


@dataclass(frozen=True)
class SegmentEntry:
    """One segment: its runs file's size, its blocks file's size and CRC-32, and rows
    (every run's)."""

    bytes: int
    blocks_bytes: int
    blocks_crc32: int
    rows: int


@dataclass
class Catalog:
    """What an index holds, as of one generation."""

    identity: dict[str, object]  # table uuid, key field id, key type: what it is an index of
    generation: int = 0
    segments: dict[str, SegmentEntry] = field(default_factory=dict)
    files: dict[str, RunEntry] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """The segments' bytes on disk."""
        return sum(s.bytes + s.blocks_bytes for s in self.segments.values())

    def to_json(self) -> str:
        """The catalog as its file holds it."""
        return json.dumps({
            "format": FORMAT, "identity": self.identity, "generation": self.generation,
            "segments": {n: [s.bytes, s.blocks_bytes, s.blocks_crc32, s.rows]
                         for n, s in self.segments.items()},
            "files": {p: [e.segment, e.batch, e.rows, e.file_bytes, e.used, e.run_rows]
                      for p, e in self.files.items()}}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, identity: dict[str, object]) -> Catalog:
        """The catalog in `text`; ValueError when it is unreadable, of another index, or
        names a segment it does not describe."""
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
            if data.get("identity") != identity:
                raise ValueError(f"an index of {data.get('identity')}, not of {identity}")
            segments = {str(n): SegmentEntry(int(b), int(bb), int(c), int(r))
                        for n, (b, bb, c, r) in data["segments"].items()}
            files = {str(p): RunEntry(str(s), int(i), int(r), int(b), int(u), int(n))
                     for p, (s, i, r, b, u, n) in data["files"].items()}
            generation = int(data["generation"])
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"malformed catalog: {error!r}") from error
        for path, entry in files.items():
            if entry.segment not in segments:
                raise ValueError(f"{path} is in segment {entry.segment}, which is not listed")
        return cls(identity, generation, segments, files)


@dataclass(frozen=True)
class _OpenSegment:
    """A segment opened: its runs file mapped (for where buffers are) and open (for reads),
    and its blocks, read whole and checked."""

    runs: pa.ipc.RecordBatchFileReader
    blocks: pa.ipc.RecordBatchFileReader
    file: SegmentFile
    base: int  # the address of the map's first byte


class IndexStore:
    """One index directory: reads its catalog and segments, and writes new ones atomically."""

    def __init__(self, directory: Path, identity: dict[str, object]) -> None:
        self.directory = directory
        self.identity = identity
        self._catalog: Catalog | None = None
        self._catalog_stamp: tuple[int, int, int] | None = None
        self._segments: dict[tuple[str, int], _OpenSegment] = {}
        self._runs: dict[tuple[str, int, int], StoredRun] = {}
        self._said_unusable = False

    # -- reading ----------------------------------------------------------------------------

    def catalog(self) -> Catalog:
        """The catalog on disk now (parsed again only when the file changed); an empty one
        when there is none or it is damaged (said once in the log)."""
        path = self.directory / CATALOG
        try:
            stat = path.stat()
        except OSError as error:  # none yet, or a directory that cannot hold one
            if not isinstance(error, FileNotFoundError) and not self._said_unusable:
                self._said_unusable = True
                log.warning("key index %s unusable (%s); reading key columns instead",
                            self.directory, error)
            self._catalog, self._catalog_stamp = None, None
            return Catalog(dict(self.identity))
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if self._catalog is None or stamp != self._catalog_stamp:
            try:
                self._catalog = Catalog.from_json(path.read_text(), self.identity)
            except (OSError, ValueError, UnicodeDecodeError) as error:
                log.warning("key index %s: catalog unusable (%s); rebuilding it",
                            self.directory, error)
                self._catalog = Catalog(dict(self.identity))
            self._catalog_stamp = stamp
            self._forget_unnamed(self._catalog)
        return self._catalog

    def _forget_unnamed(self, catalog: Catalog) -> None:
        """Let go of the segments a catalog no longer names (a long-running reader would
        otherwise hold every rewritten segment's file open; runs being searched keep
        theirs until they are done: `SegmentFile`)."""
        named = {(n, s.blocks_crc32) for n, s in catalog.segments.items()}
        self._segments = {k: v for k, v in self._segments.items() if k in named}
        self._runs = {k: v for k, v in self._runs.items() if k[:2] in named}

    def run(self, entry: RunEntry, catalog: Catalog) -> StoredRun:
        """The run an entry names. KeyIndexDamagedError when its segment is missing or not
        the one the catalog describes (sizes, the blocks file's CRC-32, row counts; each
        block's CRC-32 is checked when it is read)."""
        segment = catalog.segments[entry.segment]
        key = (entry.segment, segment.blocks_crc32, entry.batch)
        stored = self._runs.get(key)
        if stored is not None:
            return stored
        opened = self._open(entry.segment, segment)
        if not 0 <= entry.batch < opened.runs.num_record_batches \
                or opened.runs.num_record_batches != opened.blocks.num_record_batches:
            raise KeyIndexDamagedError(f"{entry.segment} has no batch {entry.batch}")
        try:
            run = opened.runs.get_batch(entry.batch)
            blocks = opened.blocks.get_batch(entry.batch)
        except (pa.ArrowInvalid, OSError) as error:
            raise KeyIndexDamagedError(f"{entry.segment}: {error}") from error
        if run.num_rows != entry.run_rows or run.num_rows > entry.rows \
                or run.column(0).null_count or run.column(1).null_count:
            raise KeyIndexDamagedError(f"{entry.segment} batch {entry.batch} is not the run "
                                       "its catalog describes")
        stored = self._runs[key] = StoredRun(entry.segment, opened.file, opened.base, run,
                                             blocks)
        return stored

    def _open(self, name: str, segment: SegmentEntry) -> _OpenSegment:
        cached = self._segments.get((name, segment.blocks_crc32))
        if cached is not None:
            return cached
        path = self.directory / name
        try:
            mapped = pa.memory_map(str(path))
            blocks = (self.directory / blocks_name(name)).read_bytes()
        except OSError as error:
            raise KeyIndexDamagedError(f"{name}: {error}") from error
        if mapped.size() != segment.bytes or len(blocks) != segment.blocks_bytes:
            raise KeyIndexDamagedError(f"{name} or its blocks file is not of the size its "
                                       "catalog says")
        if zlib.crc32(blocks) != segment.blocks_crc32:
            raise KeyIndexDamagedError(f"{blocks_name(name)} does not match its CRC-32")
        opened = self._opened(path, mapped, pa.BufferReader(blocks))
        self._segments[(name, segment.blocks_crc32)] = opened
        return opened

    @staticmethod
    def _opened(path: Path, mapped: pa.MemoryMappedFile, blocks: pa.BufferReader
                ) -> _OpenSegment:
        try:
            runs, blocks_reader = pa.ipc.open_file(mapped), pa.ipc.open_file(blocks)
            key_type = blocks_reader.schema.field(0).type
            if runs.schema != run_schema(key_type) \
                    or blocks_reader.schema != blocks_schema(key_type):
                raise KeyIndexDamagedError(f"{path.name}: not a segment of runs")
            file = SegmentFile(path)
        except (pa.ArrowInvalid, OSError) as error:
            raise KeyIndexDamagedError(f"{path.name}: {error}") from error
        mapped.seek(0)
        return _OpenSegment(runs, blocks_reader, file, mapped.read_buffer(1).address)

    # -- writing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[Catalog]:
        """The catalog on disk, under the writers' lock, to be replaced by `commit`."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self.catalog()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def write_segment(self, batches: list[pa.RecordBatch]) -> tuple[str, SegmentEntry]:
        """A new segment of `batches` (one schema; runs of `key_runs`), under its final
        name, with its blocks file."""
        token = os.urandom(8).hex()
        name = f"{SEGMENT_PREFIX}{token}{SEGMENT_SUFFIX}"
        path = self.directory / name
        temporary = path.with_name(f".{name}.{os.urandom(4).hex()}.tmp")
        with pa.OSFile(str(temporary), "wb") as out, \
                pa.ipc.new_file(out, batches[0].schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        blocks = [run_blocks(batch) for batch in batches]
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, blocks_schema(batches[0].schema.field(0).type)) as writer:
            for batch in blocks:
                writer.write_batch(batch)
        data = sink.getvalue()
        segment = SegmentEntry(os.stat(temporary).st_size, data.size, zlib.crc32(data),
                               sum(b.num_rows for b in batches))
        _write_atomically(self.directory / blocks_name(name), memoryview(data))
        os.replace(temporary, path)
        return name, segment

    def commit(self, catalog: Catalog) -> None:
        """Make `catalog` the index's (call under `locked`); segments it no longer names,
        and what an interrupted writer left, are removed."""
        _write_atomically(self.directory / CATALOG, catalog.to_json().encode())
        self._forget_unnamed(catalog)
        kept = {CATALOG, LOCK, *catalog.segments, *map(blocks_name, catalog.segments)}
        for path in self.directory.iterdir():
            if path.name in kept:
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def blocks_name(segment: str) -> str:
    """The name of a segment's blocks file."""
    return BLOCKS_PREFIX + segment.removeprefix(SEGMENT_PREFIX)


def moved(entry: RunEntry, **changes: int | str) -> RunEntry:
    """The entry with some fields changed."""
    return dataclasses.replace(entry, **changes)  # type: ignore[arg-type]


def _write_atomically(path: Path, data: bytes | memoryview) -> None:
    """Write under a temporary name, then rename: a reader sees the old file or the new one.
    Not synced: a kill -9 loses nothing the kernel holds, and what a power loss could leave
    (a catalog or segment short or zeroed) fails the catalog's parse, a size or a CRC-32
    and is rebuilt, at the cost of a sync of hundreds of megabytes on every update."""
    temporary = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    with open(temporary, "wb") as out:
        out.write(data)
    os.replace(temporary, path)
