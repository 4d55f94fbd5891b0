"""A key index on local disk: runs in Arrow IPC segment files, named by one JSON catalog.

Layout of one index (one table, one key field, one key type), in its own directory:

- `seg-<random>.arrow`: an Arrow IPC file of runs (`key_runs`), one record batch a data
  file, read memory-mapped, so a lookup touches the pages its binary searches visit;
- `catalog.json`: which data file's run is which batch of which segment (with the file's
  row count and size, checked against the data file asked about), each segment's size and
  CRC-32, and what the index is of (table uuid, key field id, key type);
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
a catalog of another table or key) is detected by sizes, CRC-32 and the catalog's own
checks; what is damaged is treated as absent, so its files are read again and re-indexed.
It is a cache, never a source of truth.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from meltwater.stream.errors import KeyIndexDamagedError

log = logging.getLogger(__name__)

CATALOG = "catalog.json"
LOCK = "lock"
FORMAT = 1
SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".arrow"
_CRC_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class RunEntry:
    """Where one data file's run is, and which data file it was built from."""

    segment: str
    batch: int
    rows: int  # the data file's record count
    file_bytes: int  # the data file's size
    used: int  # the catalog generation that last used it (eviction order)


@dataclass(frozen=True)
class SegmentEntry:
    """One segment file: its size, CRC-32 and rows (every batch's)."""

    bytes: int
    crc32: int
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
        return sum(s.bytes for s in self.segments.values())

    def to_json(self) -> str:
        """The catalog as its file holds it."""
        return json.dumps({
            "format": FORMAT, "identity": self.identity, "generation": self.generation,
            "segments": {n: [s.bytes, s.crc32, s.rows] for n, s in self.segments.items()},
            "files": {p: [e.segment, e.batch, e.rows, e.file_bytes, e.used]
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
            segments = {str(n): SegmentEntry(int(b), int(c), int(r))
                        for n, (b, c, r) in data["segments"].items()}
            files = {str(p): RunEntry(str(s), int(i), int(r), int(b), int(u))
                     for p, (s, i, r, b, u) in data["files"].items()}
            generation = int(data["generation"])
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"malformed catalog: {error!r}") from error
        for path, entry in files.items():
            if entry.segment not in segments:
                raise ValueError(f"{path} is in segment {entry.segment}, which is not listed")
        return cls(identity, generation, segments, files)


class IndexStore:
    """One index directory: reads its catalog and segments, and writes new ones atomically."""

    def __init__(self, directory: Path, identity: dict[str, object]) -> None:
        self.directory = directory
        self.identity = identity
        self._catalog: Catalog | None = None
        self._catalog_stamp: tuple[int, int, int] | None = None
        self._segments: dict[tuple[str, int], pa.ipc.RecordBatchFileReader] = {}
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
        return self._catalog

    def run(self, entry: RunEntry, catalog: Catalog) -> pa.RecordBatch:
        """The run an entry names. KeyIndexDamagedError when its segment is missing or not the
        one the catalog describes (checked once a process: size and CRC-32 of the file)."""
        segment = catalog.segments[entry.segment]
        reader = self._open(entry.segment, segment)
        if not 0 <= entry.batch < reader.num_record_batches:
            raise KeyIndexDamagedError(f"{entry.segment} has no batch {entry.batch}")
        batch = reader.get_batch(entry.batch)
        if batch.num_rows > entry.rows:
            raise KeyIndexDamagedError(f"{entry.segment} batch {entry.batch} has too many rows")
        return batch

    def _open(self, name: str, segment: SegmentEntry) -> pa.ipc.RecordBatchFileReader:
        cached = self._segments.get((name, segment.crc32))
        if cached is not None:
            return cached
        path = self.directory / name
        try:
            mapped = pa.memory_map(str(path))
        except (FileNotFoundError, OSError) as error:
            raise KeyIndexDamagedError(f"{name}: {error}") from error
        if mapped.size() != segment.bytes:
            raise KeyIndexDamagedError(f"{name} has {mapped.size()} bytes, not {segment.bytes}")
        if _crc32(path) != segment.crc32:
            raise KeyIndexDamagedError(f"{name} does not match its CRC-32")
        try:
            reader = pa.ipc.open_file(mapped)
        except pa.ArrowInvalid as error:
            raise KeyIndexDamagedError(f"{name}: {error}") from error
        self._segments[(name, segment.crc32)] = reader
        return reader

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
        """A new segment of `batches` (one schema), under its final name; kept open as
        checked (this process wrote it), so its first lookup reads no more of it."""
        name = f"{SEGMENT_PREFIX}{os.urandom(8).hex()}{SEGMENT_SUFFIX}"
        path = self.directory / name
        temporary = path.with_name(f".{name}.{os.urandom(4).hex()}.tmp")
        with pa.OSFile(str(temporary), "wb") as out, \
                pa.ipc.new_file(out, batches[0].schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        mapped = pa.memory_map(str(temporary))
        segment = SegmentEntry(mapped.size(), _crc32(temporary),
                               sum(b.num_rows for b in batches))
        os.replace(temporary, path)
        self._segments[(name, segment.crc32)] = pa.ipc.open_file(mapped)
        return name, segment

    def commit(self, catalog: Catalog) -> None:
        """Make `catalog` the index's (call under `locked`); segments it no longer names,
        and what an interrupted writer left, are removed."""
        _write_atomically(self.directory / CATALOG, catalog.to_json().encode())
        for path in self.directory.iterdir():
            if path.name in (CATALOG, LOCK) or path.name in catalog.segments:
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _crc32(path: Path) -> int:
    """The file's CRC-32, read a chunk at a time: through the memory map, every page of the
    index would count in the process's resident memory (2.3 GiB at 200M rows)."""
    crc = 0
    chunk = bytearray(_CRC_CHUNK)
    view = memoryview(chunk)
    with open(path, "rb", buffering=0) as file:
        while read := file.readinto(chunk):
            crc = zlib.crc32(view[:read], crc)
    return crc


def _write_atomically(path: Path, data: bytes | memoryview) -> None:
    """Write under a temporary name, then rename: a reader sees the old file or the new one.
    Not synced: a kill -9 loses nothing the kernel holds, and what a power loss could leave
    (a catalog or segment short or zeroed) fails the catalog's parse or the CRC-32 and is
    rebuilt, at the cost of a sync of hundreds of megabytes on every update."""
    temporary = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    with open(temporary, "wb") as out:
        out.write(data)
    os.replace(temporary, path)
