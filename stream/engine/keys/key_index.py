"""A table's key index: key -> (data file, row position), kept on local disk across reads.

An upsert commit's equality deletes name keys; the rows they replaced are wherever older
data files hold those keys. Without an index a change read decodes the key column of every
older data file to find them: a pass over the table per commit. With one, each data file's
keys are sorted once into a run (`key_runs`) kept on disk (`index_store`), and a commit's
keys are looked up in each run by binary search, so a commit costs its keys.

The index is per data file, and a data file never changes, so an entry is right for as long
as its file exists. What the table looks like at the snapshot read (which files are live,
which rows deletes removed) is not in the index: the reader asks about the files the planner
found live (`lookup(files)`) and judges the liveness of the rows found. That is why the
index follows compaction, position-delete rewrites, expiry, rollback and branch switches
without being told: files it has never seen are reported missing and the reader reads their
keys and adds them (`add`); files the table no longer has are never asked about, and leave
the index once `STALE_GENERATIONS` updates have gone by without a reader reaching them (or
earlier, as the least recently used, once it outgrows its bound, `max_bytes`). Without the
first rule the files a table compacts away stayed named until the bound (8 GiB), and every
update rewrote, and every reader re-parsed, a catalog that grew with the table's history:
an update cost 3 ms at 500 entries and 21 ms at 3,000.

`key_index(root, table_uuid, field_id, key_type)` (what `index_location.TableIndexes`
opens) gives each index one object per process,
so a stream or the service opens and checks each segment once, not once a micro-batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from meltwater.planner.spec.files import DataFile
from meltwater.stream.engine.keys.index_store import (
    Catalog,
    IndexStore,
    RunEntry,
    StoredRun,
    moved,
)
from meltwater.stream.errors import KeyIndexDamagedError

log = logging.getLogger(__name__)

DEFAULT_INDEX_BYTES = 8 * 1024**3  # the bound on one index's segments on disk
MERGE_BELOW = 0.5  # a segment whose named runs hold less than this share of it is rewritten
MAX_SEGMENTS = 16  # an index holding this many merges its smallest into the next one
# updates (catalog generations) after which a file no reader has reached leaves the index:
# a file the table still has, in a part no commit touched meanwhile, is read again when
# one does (once per this many updates at most); a file it no longer has never is
STALE_GENERATIONS = 256
FOUND_KEPT = 20_000  # files found held for the next add at most (forgetting some is harmless)


@dataclass(frozen=True)
class IndexHits:
    """What a lookup found: for each data file the index covers, the positions (ascending)
    of its rows holding a looked-up key, and those keys; and the files it does not cover."""

    found: dict[str, tuple[pa.Array, pa.Array]]
    missing: tuple[DataFile, ...]


@dataclass(frozen=True)
class Coverage:
    """Which of some data files an index covers (their runs, opened), and which it does
    not: the cheap half of a lookup, taken under the index's lock, so that the searches
    themselves (`KeyIndex.find`) run on the reading threads, a file each."""

    runs: dict[str, StoredRun]
    missing: tuple[DataFile, ...]


class KeyIndex:
    """One table's index of one key field (of one Arrow type); thread-safe."""

    def __init__(self, store: IndexStore, max_bytes: int = DEFAULT_INDEX_BYTES) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.damaged = 0  # runs found damaged (then treated as missing), for tests and stats
        self.files_found = 0  # files a lookup answered for, and those it reported missing
        self.files_missing = 0
        self._said_unwritable = False
        # files lookups found since this process last updated the index: marked used then
        # (a lookup writes nothing), so a file readers keep finding is never stale
        self._found_since_update: set[str] = set()

    def lookup(self, files: Sequence[DataFile], needles: pa.Array) -> IndexHits:
        """The rows of `files` whose key is one of `needles` (distinct, sorted, no nulls,
        of the index's key type), for the files the index covers; the others as missing."""
        coverage = self.covering(files)
        found: dict[str, tuple[pa.Array, pa.Array]] = {}
        missing = list(coverage.missing)
        for file in files:
            if file.file_path in coverage.runs:
                hits = self.find(coverage, file, needles)
                if hits is None:
                    missing.append(file)
                else:
                    found[file.file_path] = hits
        return IndexHits(found, tuple(missing))

    def covering(self, files: Sequence[DataFile]) -> Coverage:
        """Which of `files` the index covers, their runs opened (a run whose segment is
        found damaged here is not covered)."""
        runs: dict[str, StoredRun] = {}
        missing: list[DataFile] = []
        with self._lock:
            catalog = self.store.catalog()
            for file in files:
                entry = catalog.files.get(file.file_path)
                run = None
                if entry is not None and _describes(entry, file):
                    run = self._stored(catalog, entry, f"re-indexing {file.file_path}")
                if run is None:
                    missing.append(file)
                else:
                    runs[file.file_path] = run
            self.files_found += len(runs)
            self.files_missing += len(missing)
            if len(self._found_since_update) > FOUND_KEPT:  # a process that never adds
                self._found_since_update.clear()
            self._found_since_update.update(runs)
        return Coverage(runs, tuple(missing))

    def find(self, coverage: Coverage, file: DataFile, needles: pa.Array
             ) -> tuple[pa.Array, pa.Array] | None:
        """(positions, keys) of a covered file's rows holding one of `needles`; None when
        a block it searched is damaged (said once in the log; the file is then as if not
        covered). Thread-safe: blocks are read with `pread`."""
        try:
            return coverage.runs[file.file_path].find(needles)
        except KeyIndexDamagedError as error:
            with self._lock:
                self.damaged += 1
                self.files_found -= 1
                self.files_missing += 1
            log.warning("key index %s: %s; re-indexing %s", self.store.directory, error,
                        file.file_path)
            return None

    def add(self, runs: Mapping[str, tuple[DataFile, pa.RecordBatch]],
            used: Sequence[str] = ()) -> None:
        """Add the runs of data files (path -> (file, run)) in one new segment, and mark
        the files in `used`, and those lookups found since the last add, as just used.
        Files unused for `STALE_GENERATIONS` adds leave the index, and beyond `max_bytes`
        the least recently used; segments mostly unnamed are rewritten. A run whose segment turns
        out damaged is left out, to be read again. The index is a cache: a directory that
        cannot be written (read-only, full, under a file) is said once, not raised."""
        try:
            self._add(runs, used)
        except OSError as error:
            if not self._said_unwritable:
                self._said_unwritable = True
                log.warning("key index %s not updated: %s", self.store.directory, error)

    def _add(self, runs: Mapping[str, tuple[DataFile, pa.RecordBatch]],
             used: Sequence[str]) -> None:
        with self._lock, self.store.locked() as current:
            generation = current.generation + 1
            files = {path: entry for path, entry in current.files.items()
                     if self._readable(current, entry)}
            for path in {*used, *self._found_since_update}:
                entry = files.get(path)
                if entry is not None:
                    files[path] = moved(entry, used=generation)
            self._found_since_update.clear()
            files = {path: entry for path, entry in files.items()
                     if entry.used > generation - STALE_GENERATIONS}
            files = _within(files, current, self.max_bytes
                            - sum(run.nbytes for _, run in runs.values()))
            copies: dict[str, pa.RecordBatch] = {}  # runs read whole to be carried
            new_rows = sum(run.num_rows for _, run in runs.values())
            carried = [path for path in _carried(files, current, new_rows)
                       if self._copied(current, files.pop(path), path, files, copies)]
            batches = [run for _, run in runs.values()]
            batches += [copies[path] for path in carried]
            segments = dict(current.segments)
            if batches:
                name, segments[name] = self.store.write_segment(batches)
                for i, (file, run) in enumerate(runs.values()):
                    files[file.file_path] = RunEntry(
                        name, i, file.record_count, file.file_size_in_bytes, generation,
                        run.num_rows)
                for j, path in enumerate(carried, start=len(runs)):
                    files[path] = moved(files[path], segment=name, batch=j)
            named = {entry.segment for entry in files.values()}  # the others are removed
            self.store.commit(Catalog(current.identity, generation,
                                      {n: s for n, s in segments.items() if n in named},
                                      files))

    def _readable(self, catalog: Catalog, entry: RunEntry) -> bool:
        return self._stored(catalog, entry, "dropping its runs") is not None

    def _copied(self, catalog: Catalog, entry: RunEntry, path: str,
                files: dict[str, RunEntry], copies: dict[str, pa.RecordBatch]) -> bool:
        """Whether a run could be read whole into `copies`, every block checked (a copy
        gets new CRC-32s, which would hide damage), to move into a new segment; put back
        in `files` when it could."""
        stored = self._stored(catalog, entry, "dropping its runs")
        if stored is None:
            return False
        try:
            copies[path] = stored.whole()
        except KeyIndexDamagedError as error:
            self.damaged += 1
            log.warning("key index %s: %s; dropping its run", self.store.directory, error)
            return False
        files[path] = entry
        return True

    def _stored(self, catalog: Catalog, entry: RunEntry, then: str) -> StoredRun | None:
        """The entry's run opened; None (said, with what happens `then`) when damaged."""
        try:
            return self.store.run(entry, catalog)
        except KeyIndexDamagedError as error:
            self.damaged += 1
            log.warning("key index %s: %s; %s", self.store.directory, error, then)
            return None


def _describes(entry: RunEntry, file: DataFile) -> bool:
    """Whether an entry was built from this data file (a path reused for another file,
    as a table re-created in place might, has another size or row count)."""
    return entry.rows == file.record_count and entry.file_bytes == file.file_size_in_bytes


def _within(files: dict[str, RunEntry], catalog: Catalog, budget: int
            ) -> dict[str, RunEntry]:
    """The entries kept under `budget` bytes, the most recently used first (a run's bytes
    counted as its share of its segment's)."""
    def size(entry: RunEntry) -> int:
        segment = catalog.segments[entry.segment]
        return (segment.bytes + segment.blocks_bytes) * entry.run_rows // max(segment.rows, 1)

    kept: dict[str, RunEntry] = {}
    for path, entry in sorted(files.items(), key=lambda item: -item[1].used):
        budget -= size(entry)
        if budget < 0:
            break
        kept[path] = entry
    return kept


def _carried(files: dict[str, RunEntry], catalog: Catalog, new_rows: int) -> list[str]:
    """The files whose runs move into the new segment (of `new_rows` rows of its own):
    those of segments whose named runs hold less than `MERGE_BELOW` of their rows, and,
    once the index holds `MAX_SEGMENTS`, those of its smallest segments.

    Each commit adds a segment; without the bound their number grew with the table's
    history, and with it every lookup's searches and the descriptors each long-lived reader
    holds (two a segment: 15 more a minute in the soak). The smallest are taken while each
    holds at most twice the rows taken so far, as size-tiered LSM trees merge: a small
    commit never rewrites a large segment, a run is copied about log(rows) times, and
    segments of very different sizes may stay more than `MAX_SEGMENTS` (logarithmically
    many)."""
    named: dict[str, int] = {}
    for entry in files.values():
        named[entry.segment] = named.get(entry.segment, 0) + entry.run_rows
    moving = {name for name, rows in named.items()
              if rows < MERGE_BELOW * catalog.segments[name].rows}
    dense = sorted((rows, name) for name, rows in named.items() if name not in moving)
    if len(dense) >= MAX_SEGMENTS:
        taken = new_rows
        for count, (rows, name) in enumerate(dense):
            if count > len(dense) - MAX_SEGMENTS // 2 or (taken and rows > 2 * taken):
                break
            moving.add(name)
            taken += rows
    return sorted(path for path, entry in files.items() if entry.segment in moving)


_indexes: dict[Path, KeyIndex] = {}
_indexes_lock = threading.Lock()


def key_index(root: Path, table_uuid: str, field_id: int, key_type: pa.DataType) -> KeyIndex:
    """The process's index of a table's key field under `root` (one directory an index:
    `root/<table uuid>/<field id>-<key type>`)."""
    kind = str(key_type).replace("[", "-").replace("]", "").replace(",", "").replace(" ", "")
    directory = root / table_uuid / f"{field_id}-{kind}"
    with _indexes_lock:
        index = _indexes.get(directory)
        if index is None:
            identity: dict[str, object] = {"table": table_uuid, "field_id": field_id,
                                           "key_type": str(key_type)}
            index = _indexes[directory] = KeyIndex(IndexStore(directory, identity))
        return index
