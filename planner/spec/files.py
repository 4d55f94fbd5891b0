"""What manifests say about files: data and delete file descriptions, entries, manifests.

These are plain frozen dataclasses so that tasks built from them pickle to Spark executors.
Column metrics are read-only mappings by field id; bounds read as internal values (see
`meltwater.planner.spec.types`), decoded from the spec's single-value binary form on first
lookup (`meltwater.planner.spec.metric_maps`; they pickle as plain dicts), and
partition values are tuples in the spec's field order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class FileContent(IntEnum):
    """What a data file entry holds: rows, position deletes or equality deletes (the spec's
    `content` codes)."""

    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


class EntryStatus(IntEnum):
    """A manifest entry's status: whether the snapshot that wrote it added, kept or removed the
    file."""

    EXISTING = 0
    ADDED = 1
    DELETED = 2


class ManifestContent(IntEnum):
    """Whether a manifest lists data files or delete files."""

    DATA = 0
    DELETES = 1


@dataclass(frozen=True)
class DataFile:
    """A data file or a delete file (`content` tells which), as a manifest entry describes it."""

    content: FileContent
    file_path: str
    file_format: str  # PARQUET, ORC, AVRO or PUFFIN (deletion vectors)
    spec_id: int
    partition: tuple[Any, ...]
    record_count: int
    file_size_in_bytes: int
    column_sizes: Mapping[int, int] = field(default_factory=dict)
    value_counts: Mapping[int, int] = field(default_factory=dict)
    null_value_counts: Mapping[int, int] = field(default_factory=dict)
    nan_value_counts: Mapping[int, int] = field(default_factory=dict)
    lower_bounds: Mapping[int, Any] = field(default_factory=dict)
    upper_bounds: Mapping[int, Any] = field(default_factory=dict)
    split_offsets: tuple[int, ...] | None = None
    equality_ids: tuple[int, ...] | None = None
    sort_order_id: int | None = None
    first_row_id: int | None = None
    referenced_data_file: str | None = None
    content_offset: int | None = None
    content_size_in_bytes: int | None = None
    key_metadata: bytes | None = None

    @property
    def is_deletion_vector(self) -> bool:
        """Whether this is a v3 deletion vector (a blob in a Puffin file) rather than a delete
        file."""
        return self.file_format == "PUFFIN"

    @property
    def key(self) -> tuple[str, int | None]:
        """What tells this file from every other: its path, and for a deletion vector also
        its blob's offset, because the DVs of many data files share one Puffin file."""
        return self.file_path, self.content_offset

    @property
    def partition_key(self) -> PartitionKey:
        """The file's spec id and partition, as a key that finds files of the same partition
        (`partition_key`: NaN equals NaN)."""
        return self.spec_id, partition_key(self.partition)


class _NaN:
    """Stands for a NaN partition value in keys: equal to itself, unlike float('nan')."""

    def __repr__(self) -> str:
        return "NaN"


_NAN = _NaN()


PartitionKey = tuple[int, tuple[Any, ...]]
"""A data or delete file's spec id and partition, compared as Iceberg Java compares them
(`DataFile.partition_key`)."""


def partition_key(partition: tuple[Any, ...]) -> tuple[Any, ...]:
    """A partition tuple that compares and hashes the way Iceberg Java's partition maps
    compare them (`StructLikeWrapper`, `Float.compare`): NaN equals NaN. Two NaNs decoded
    from two manifests are different float objects, and `nan != nan`, so a delete file in
    the partition `x=NaN` would otherwise never reach that partition's data files."""
    if not any(isinstance(v, float) and math.isnan(v) for v in partition):
        return partition
    return tuple(_NAN if isinstance(v, float) and math.isnan(v) else v for v in partition)


@dataclass(frozen=True)
class ManifestEntry:
    """One row of a manifest: a file, whether it was added/kept/removed, and its lineage.

    `sequence_number` is the file's data sequence number after inheritance (for v1 tables
    always 0); `file_sequence_number` the sequence number of the commit that added it.
    """

    status: EntryStatus
    snapshot_id: int | None
    sequence_number: int
    file_sequence_number: int | None
    file: DataFile


@dataclass(frozen=True)
class PartitionFieldSummary:
    """A manifest's summary of one partition field over its files, for pruning whole manifests."""

    contains_null: bool
    contains_nan: bool | None
    lower_bound: Any
    upper_bound: Any


@dataclass(frozen=True)
class ManifestFile:
    """One row of a manifest list."""

    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    content: ManifestContent
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int | None
    added_files_count: int | None
    existing_files_count: int | None
    deleted_files_count: int | None
    added_rows_count: int | None
    existing_rows_count: int | None
    deleted_rows_count: int | None
    partitions: tuple[PartitionFieldSummary, ...] | None
    key_metadata: bytes | None = None
    first_row_id: int | None = None

    def has_added_files(self) -> bool:
        """Whether the manifest may list ADDED entries (unknown counts: it may)."""
        return self.added_files_count is None or self.added_files_count > 0

    def has_existing_files(self) -> bool:
        """Whether the manifest may list EXISTING entries (unknown counts: it may)."""
        return self.existing_files_count is None or self.existing_files_count > 0

    def has_deleted_files(self) -> bool:
        """Whether the manifest may list DELETED entries (unknown counts: it may)."""
        return self.deleted_files_count is None or self.deleted_files_count > 0
