"""Manifest lists and manifests, read with fastavro (`avro_files`) into `planner.spec.files` models.

Two spec rules live here because every reader of manifests needs them:
- sequence number inheritance: an ADDED entry with a null (data or file) sequence number
  takes the sequence number of the manifest that added it (v1 manifests have none: 0), and
  a null snapshot id takes the manifest's added snapshot id;
- v1 field names: v1 manifest lists say `added_data_files_count` where v2 says
  `added_files_count` (same field ids).

Manifests are immutable, so decoded manifests are cached by path: a stream advancing one
snapshot at a time, or repeated plans of the same table, never decode a file twice.
Planning that needs only named files (`ManifestReader.entries_naming`) decodes only the
Avro blocks that hold them, so its cost follows the files asked for, not the manifest.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from decimal import Decimal
from typing import Any

from meltwater.planner.errors import CorruptMetadataError, NoSuchFileError, UnsupportedFeatureError
from meltwater.planner.spec.conversions import from_bytes
from meltwater.planner.spec.files import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
    PartitionFieldSummary,
)
from meltwater.planner.spec.metric_maps import MetricMap
from meltwater.planner.spec.partitioning import PartitionSpec
from meltwater.planner.spec.reserved_field_ids import DELETE_FILE_PATH_ID, DELETE_POS_ID
from meltwater.planner.spec.types import LONG, STRING, IcebergType, PrimitiveType
from meltwater.planner.table.avro_files import AvroFile
from meltwater.planner.table.fileio import FileIO
from meltwater.planner.table.metadata import Snapshot, TableMetadata

# Position delete files' columns have bounds in manifests; other reserved columns' bounds
# (v3 lineage columns a writer stored) do not describe the values read, so stay undecoded.
RESERVED_TYPES: dict[int, IcebergType] = {DELETE_FILE_PATH_ID: STRING, DELETE_POS_ID: LONG}

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _partition_value(value: Any, type_: IcebergType | None) -> Any:
    """Turn the objects fastavro makes of Avro logical types back into internal values."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        delta = aware - _EPOCH
        micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        if isinstance(type_, PrimitiveType) and type_.name.endswith("_ns"):
            return micros * 1000
        return micros
    if isinstance(value, dt.date):
        return (value - _EPOCH_DATE).days
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 \
            + value.microsecond
    if isinstance(type_, PrimitiveType):
        if type_.kind == "uuid":
            return value if isinstance(value, uuid.UUID) else uuid.UUID(
                bytes=value) if isinstance(value, bytes) else uuid.UUID(str(value))
        if type_.kind == "decimal" and not isinstance(value, Decimal):
            return Decimal(value)
    return value


class _Decoder:
    """Decodes one table's manifests: bound and partition types looked up once."""

    def __init__(self, metadata: TableMetadata) -> None:
        self.types: dict[int, IcebergType] = {**metadata.field_types, **RESERVED_TYPES}
        self.partition_types: dict[int, list[IcebergType]] = {}
        for spec_id, spec in metadata.specs.items():
            self.partition_types[spec_id] = [
                t.type for t in spec.partition_type(metadata.schema).fields]
        self.specs = metadata.specs

    def bounds(self, pairs: list[dict[str, Any]] | None) -> Mapping[int, Any]:
        """Column bounds, decoded field by field when first looked up (`MetricMap`)."""
        return MetricMap(pairs, self._bound) if pairs else {}

    def _bound(self, field_id: int, raw: bytes) -> Any:
        type_ = self.types.get(field_id)
        return from_bytes(type_, raw) if isinstance(type_, PrimitiveType) else None

    def partition(self, spec: PartitionSpec, record: dict[str, Any] | None) -> tuple[Any, ...]:
        if not spec.fields:
            return ()
        types: Sequence[IcebergType | None] = (self.partition_types.get(spec.spec_id)
                                               or [None] * len(spec.fields))
        record = record or {}
        return tuple(_partition_value(record.get(f.name), t)
                     for f, t in zip(spec.fields, types, strict=True))


def _counts(pairs: list[dict[str, Any]] | None) -> Mapping[int, int]:
    return MetricMap(pairs) if pairs else {}


def _open_avro(io: FileIO, location: str, what: str) -> AvroFile:
    try:
        data = io.read_bytes(location)
    except NoSuchFileError:
        raise CorruptMetadataError(f"{location}: {what} not found") from None
    try:
        return AvroFile(data)
    except Exception as error:  # fastavro raises several unrelated types on bad input
        raise CorruptMetadataError(f"{location}: not a readable Avro {what} ({error})") from error


def read_manifest_list(io: FileIO, location: str, metadata: TableMetadata) -> list[ManifestFile]:
    """The manifests of a snapshot, with v1 counts and sequence numbers normalized."""
    reader = _open_avro(io, location, "manifest list")
    manifests = []
    types_by_spec: dict[int, list[IcebergType]] = {}
    try:
        for rec in reader:
            spec_id = rec.get("partition_spec_id", 0)
            spec = metadata.specs.get(spec_id)
            summaries = rec.get("partitions")
            partitions = None
            if summaries is not None and spec is not None:
                types = types_by_spec.get(spec_id)
                if types is None:
                    types = types_by_spec[spec_id] = [
                        f.type for f in spec.partition_type(metadata.schema).fields]
                partitions = tuple(
                    PartitionFieldSummary(
                        s.get("contains_null", True), s.get("contains_nan"),
                        _bound(t, s.get("lower_bound")), _bound(t, s.get("upper_bound")))
                    for s, t in zip(summaries, types, strict=True))
            manifests.append(ManifestFile(
                manifest_path=rec["manifest_path"], manifest_length=rec["manifest_length"],
                partition_spec_id=spec_id,
                content=ManifestContent(rec.get("content", ManifestContent.DATA)),
                sequence_number=rec.get("sequence_number", 0) or 0,
                min_sequence_number=rec.get("min_sequence_number", 0) or 0,
                added_snapshot_id=rec.get("added_snapshot_id"),
                added_files_count=_first(rec, "added_files_count", "added_data_files_count"),
                existing_files_count=_first(rec, "existing_files_count",
                                            "existing_data_files_count"),
                deleted_files_count=_first(rec, "deleted_files_count",
                                           "deleted_data_files_count"),
                added_rows_count=rec.get("added_rows_count"),
                existing_rows_count=rec.get("existing_rows_count"),
                deleted_rows_count=rec.get("deleted_rows_count"),
                partitions=partitions, key_metadata=rec.get("key_metadata"),
                first_row_id=rec.get("first_row_id"),
            ))
    except CorruptMetadataError:
        raise
    except Exception as error:
        raise CorruptMetadataError(f"{location}: corrupt manifest list ({error})") from error
    return manifests


def _first(rec: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in rec:
            return rec[name]
    return None


def _bound(type_: IcebergType, raw: bytes | None) -> Any:
    if raw is None or not isinstance(type_, PrimitiveType):
        return None
    try:
        return from_bytes(type_, raw)
    except (ValueError, TypeError, ArithmeticError):
        return None


_new = object.__new__


class _Entries:
    """Turns one manifest's Avro records into entries, applying the inheritance rules."""

    def __init__(self, manifest: ManifestFile, metadata: TableMetadata,
                 decoder: _Decoder) -> None:
        location = manifest.manifest_path
        spec = metadata.specs.get(manifest.partition_spec_id)
        if spec is None:
            raise CorruptMetadataError(f"{location}: partition spec {manifest.partition_spec_id} "
                                  "is not in the table metadata")
        if manifest.key_metadata:
            raise UnsupportedFeatureError(f"{location}: encrypted manifests are not supported")
        self.spec = spec
        self.decoder = decoder
        self.location = location
        self.holds_deletes = manifest.content == ManifestContent.DELETES
        self.inherited_seq = manifest.sequence_number
        self.added_snapshot_id = manifest.added_snapshot_id
        self.next_row_id = manifest.first_row_id  # v3 lineage: data files inherit in order

    def entry(self, rec: dict[str, Any]) -> ManifestEntry:
        status = EntryStatus(rec["status"])
        f = rec["data_file"]
        seq = rec.get("sequence_number")
        file_seq = rec.get("file_sequence_number")
        if status == EntryStatus.ADDED:
            seq = self.inherited_seq if seq is None else seq
            file_seq = self.inherited_seq if file_seq is None else file_seq
        snapshot_id = rec.get("snapshot_id")
        if snapshot_id is None:
            snapshot_id = self.added_snapshot_id
        content = FileContent(f.get("content", FileContent.DATA))
        if (content != FileContent.DATA) != self.holds_deletes:
            # The manifest list's label decides how a manifest is read: a delete file read
            # as data would come out as rows of nulls, data read as deletes would delete.
            raise CorruptMetadataError(
                f"{self.location}: listed as a {'delete' if self.holds_deletes else 'data'} "
                f"manifest, but holds {content.name.lower().replace('_', ' ')} file "
                f"{f['file_path']}")
        first_row_id = f.get("first_row_id")
        if content == FileContent.DATA and first_row_id is None \
                and self.next_row_id is not None:
            first_row_id = self.next_row_id
            self.next_row_id += f["record_count"]
        offsets = f.get("split_offsets")
        eq_ids = f.get("equality_ids")
        decoder = self.decoder
        # The frozen dataclass's __init__ sets each of the 21 fields through
        # object.__setattr__, a large part of decoding a small entry. Every field is
        # set here (test_manifests checks it), so the instance dict is filled directly.
        data_file = _new(DataFile)
        data_file.__dict__.update({
            "content": content,
            "file_path": f["file_path"],
            "file_format": str(f["file_format"]).upper(),
            "spec_id": self.spec.spec_id,
            "partition": decoder.partition(self.spec, f.get("partition")),
            "record_count": f["record_count"],
            "file_size_in_bytes": f["file_size_in_bytes"],
            "column_sizes": _counts(f.get("column_sizes")),
            "value_counts": _counts(f.get("value_counts")),
            "null_value_counts": _counts(f.get("null_value_counts")),
            "nan_value_counts": _counts(f.get("nan_value_counts")),
            "lower_bounds": decoder.bounds(f.get("lower_bounds")),
            "upper_bounds": decoder.bounds(f.get("upper_bounds")),
            "split_offsets": tuple(offsets) if offsets is not None else None,
            "equality_ids": tuple(eq_ids) if eq_ids is not None else None,
            "sort_order_id": f.get("sort_order_id"),
            "first_row_id": first_row_id,
            "referenced_data_file": f.get("referenced_data_file"),
            "content_offset": f.get("content_offset"),
            "content_size_in_bytes": f.get("content_size_in_bytes"),
            "key_metadata": f.get("key_metadata"),
        })
        return ManifestEntry(status, snapshot_id, seq or 0, file_seq, data_file)


def _read_manifest(io: FileIO, manifest: ManifestFile, metadata: TableMetadata,
                   decoder: _Decoder) -> tuple[ManifestEntry, ...]:
    location = manifest.manifest_path
    reader = _open_avro(io, location, "manifest")
    build = _Entries(manifest, metadata, decoder)
    try:
        return tuple(build.entry(rec) for rec in reader)
    except (CorruptMetadataError, UnsupportedFeatureError):
        raise
    except Exception as error:
        raise CorruptMetadataError(f"{location}: corrupt manifest ({error!r})") from error


def _read_manifest_naming(io: FileIO, manifest: ManifestFile, metadata: TableMetadata,
                          decoder: _Decoder, paths: frozenset[str]
                          ) -> tuple[ManifestEntry, ...]:
    """The entries whose file is one of `paths`, decoding only the Avro blocks that may hold one.

    Decoding is what costs, inflating a block next to nothing. Avro stores strings as raw
    UTF-8, so a block whose bytes contain none of the paths holds none of their entries and
    is skipped undecoded: the work follows the blocks the paths live in, not the manifest's
    size. Blocks that do contain a path are decoded whole and matched exactly.
    """
    location = manifest.manifest_path
    avro = _open_avro(io, location, "manifest")
    needles = [p.encode() for p in paths]
    build = _Entries(manifest, metadata, decoder)
    found = []
    try:
        for count, data in avro.blocks():
            if not any(needle in data for needle in needles):
                continue
            for rec in avro.records(count, data):
                if rec["data_file"]["file_path"] in paths:
                    found.append(build.entry(rec))
    except (CorruptMetadataError, UnsupportedFeatureError):
        raise
    except Exception as error:
        raise CorruptMetadataError(f"{location}: corrupt manifest ({error!r})") from error
    return tuple(found)


class ManifestCache:
    """Decoded manifests by path (they are immutable), least recently used evicted first.

    Bounded by total entries, not manifests, so memory follows what is kept. Thread-safe:
    planning reads manifests from a thread pool.
    """

    def __init__(self, max_entries: int = 2_000_000) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._items: OrderedDict[object, tuple[ManifestEntry, ...]] = OrderedDict()
        self._size = 0
        self._partial_reads: dict[object, int] = {}
        self.hits = 0
        self.misses = 0

    def _found(self, key: object) -> tuple[ManifestEntry, ...] | None:
        """The cached entries of `key`, counted as a hit and kept longest (lock held)."""
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
            self.hits += 1
        return found

    def get(self, key: object, load: Callable[[], tuple[ManifestEntry, ...]],
            ) -> tuple[ManifestEntry, ...]:
        """The entries of `key`, from the cache or from `load` (called outside the lock, so reads
        overlap)."""
        with self._lock:
            found = self._found(key)
            if found is not None:
                return found
            self.misses += 1
        entries = load()
        with self._lock:
            if key not in self._items:
                self._items[key] = entries
                self._size += len(entries)
                while self._size > self.max_entries and len(self._items) > 1:
                    _, evicted = self._items.popitem(last=False)
                    self._size -= len(evicted)
        return entries

    def peek(self, key: object) -> tuple[ManifestEntry, ...] | None:
        """The cached entries of `key`, if decoded already; never loads."""
        with self._lock:
            return self._found(key)

    def partial_read(self, key: object) -> int:
        """Count a partial read of a manifest not cached; how many there have been."""
        with self._lock:
            if len(self._partial_reads) > 10_000:  # only a hint: forgetting costs a decode
                self._partial_reads.clear()
            count = self._partial_reads[key] = self._partial_reads.get(key, 0) + 1
            return count

    def discard(self, keys: Collection[object]) -> None:
        """Drop the cached manifests of `keys` (those a commit took out of its table)."""
        with self._lock:
            for key in keys:
                evicted = self._items.pop(key, None)
                if evicted is not None:
                    self._size -= len(evicted)

    def clear(self) -> None:
        """Drop every cached manifest and reset the size count."""
        with self._lock:
            self._items.clear()
            self._partial_reads.clear()
            self._size = 0


MANIFEST_CACHE = ManifestCache()


def _cache_key(manifest: ManifestFile) -> tuple[str, int | None, ManifestContent]:
    return manifest.manifest_path, manifest.first_row_id, manifest.content


class ManifestReader:
    """Reads one table's manifest lists and manifests; decoded manifests come from a cache.

    One reader per table metadata: it resolves partition and bound types once.
    """

    def __init__(self, metadata: TableMetadata, io: FileIO,
                 cache: ManifestCache | None = MANIFEST_CACHE) -> None:
        self.metadata = metadata
        self.io = io
        self.cache = cache
        self._decoder = _Decoder(metadata)

    def manifest_list(self, snapshot: Snapshot) -> list[ManifestFile]:
        """The manifests a snapshot lists; UnsupportedFeatureError for a v1 snapshot without a
        manifest list."""
        if snapshot.manifest_list is None:
            raise UnsupportedFeatureError(
                f"snapshot {snapshot.snapshot_id} lists manifests inline (format v1 without a "
                "manifest list), which meltwater does not read")
        return read_manifest_list(self.io, snapshot.manifest_list, self.metadata)

    def entries(self, manifest: ManifestFile) -> tuple[ManifestEntry, ...]:
        """Every entry of a manifest (ADDED, EXISTING and DELETED), decoded once per path."""
        if self.cache is None:
            return _read_manifest(self.io, manifest, self.metadata, self._decoder)
        # A v2 manifest carried into a v3 snapshot gains a first_row_id there, which its
        # entries inherit: the same file decodes differently under the two lists. The
        # content label is part of the key too: decoding checks the entries against it.
        return self.cache.get(
            _cache_key(manifest),
            lambda: _read_manifest(self.io, manifest, self.metadata, self._decoder))

    def forget(self, manifests: Collection[ManifestFile]) -> None:
        """Drop these manifests from the cache: a stream that saw a commit take them out
        of the table (compaction, a merge of manifests, a rewrite) will not read them
        again, and a cache bounded only by its entries (`ManifestCache.max_entries`) kept
        every manifest a long-running stream ever read, 29 KB a commit in the soak.
        Another reader that still wants one decodes it again."""
        if self.cache is not None:
            self.cache.discard([_cache_key(m) for m in manifests])

    def entries_naming(self, manifest: ManifestFile,
                       paths: Collection[str]) -> tuple[ManifestEntry, ...]:
        """The entries (any status) whose file path is one of `paths`.

        For planning that knows which files it needs, such as a commit whose deletes all
        name their data file: the cost follows the files asked for, not the manifest. A
        cached manifest is filtered; otherwise only blocks that may hold the paths are
        decoded (`_read_manifest_naming`), and the partial result is not cached.

        A manifest asked for a second time is decoded whole and cached instead: a stream
        advancing one commit at a time asks every commit about the same base manifest,
        and filtering a cached one costs less than decoding even one block again. A v3
        manifest whose data files inherit row ids in entry order is always read whole,
        since an entry's id depends on every entry before it.
        """
        wanted = frozenset(paths)
        key = _cache_key(manifest)
        cached = self.cache.peek(key) if self.cache is not None else None
        if cached is None and manifest.first_row_id is None and (
                self.cache is None or self.cache.partial_read(key) == 1):
            return _read_manifest_naming(self.io, manifest, self.metadata, self._decoder,
                                         wanted)
        entries = cached if cached is not None else self.entries(manifest)
        return tuple(e for e in entries if e.file.file_path in wanted)
