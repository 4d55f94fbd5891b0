"""Scan tasks: what the engine must read, and nothing it must work out for itself.

A task names one data file (or a byte range of it), the position deletes and deletion
vectors that apply to it, the table's equality deletes (`EqualityDeleteSet`, shared by every
task of a scan) and the residual filter rows must still pass. Tasks are frozen dataclasses
of plain values, so they pickle to Spark executors (a set shared by a partition's tasks
pickles once); the engine (`meltwater.stream`) needs no table metadata beyond the projected
schema carried in the task group.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from meltwater.planner.expressions.tree import TRUE, Expression
from meltwater.planner.spec.files import DataFile, FileContent


@dataclass(frozen=True)
class DeleteFileRef:
    """A delete file that applies to a task's data file, with its data sequence number."""

    file: DataFile
    sequence_number: int

    @property
    def key(self) -> tuple[str, int | None]:
        """The delete file's `DataFile.key`: two refs with equal keys are one delete file."""
        return self.file.key

    @property
    def is_position(self) -> bool:
        """Whether the file deletes rows by position (a position delete file or DV)."""
        return self.file.content == FileContent.POSITION_DELETES

    @property
    def is_equality(self) -> bool:
        """Whether the file deletes rows by column values."""
        return self.file.content == FileContent.EQUALITY_DELETES


@dataclass(frozen=True)
class DataFileRef:
    """A live data file with its data sequence number (what decides which deletes apply)
    and, when known, the snapshot that added it."""

    file: DataFile
    sequence_number: int
    snapshot_id: int | None = None


@dataclass(frozen=True)
class EqualityDeleteSet:
    """The live equality delete files of one table state, shared by the tasks reading in it
    instead of listed on each.

    Which of them apply to a data file follows from the spec's rule: a delete file applies
    when its data sequence number is greater than the data file's and it is *global*
    (written under an unpartitioned spec) or of the data file's spec and partition. So the
    engine applies the whole set as one key lookup built once per scan, and planning never
    pairs data files with delete files: an upsert job's backlog of 200 global equality
    deletes over 220 data files is 44,000 pairs, each of which Iceberg Java's
    `DeleteFileIndex` checks against column bounds. A delete that bounds would prove
    unable to match a file costs a lookup that finds nothing; the rows read are the same.

    Example: deletes E1 (sequence 5, global) and E2 (sequence 7, partition p=a) apply to a
    data file of sequence 4 in p=a as (E1, E2), in p=b as (E1,), and to one of sequence 6
    in p=a as (E2,).
    """

    global_refs: tuple[DeleteFileRef, ...] = ()  # ascending sequence numbers
    scoped_refs: tuple[DeleteFileRef, ...] = ()  # ascending sequence numbers
    _by_partition: dict[Any, tuple[list[int], list[DeleteFileRef]]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        for ref in self.scoped_refs:
            seqs, refs = self._by_partition.setdefault(ref.file.partition_key, ([], []))
            seqs.append(ref.sequence_number)
            refs.append(ref)

    def __getstate__(self) -> dict[str, Any]:
        return {"global_refs": self.global_refs, "scoped_refs": self.scoped_refs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "global_refs", state["global_refs"])
        object.__setattr__(self, "scoped_refs", state["scoped_refs"])
        object.__setattr__(self, "_by_partition", {})
        self.__post_init__()

    @cached_property
    def _global_seqs(self) -> list[int]:
        return [ref.sequence_number for ref in self.global_refs]

    @cached_property
    def key(self) -> tuple[tuple[str, int | None], ...]:
        """The delete files' keys, in order: equal keys, equal sets (for caches)."""
        return tuple(ref.key for ref in self.global_refs + self.scoped_refs)

    def __len__(self) -> int:
        return len(self.global_refs) + len(self.scoped_refs)

    def applying_to(self, data_seq: int, data_file: DataFile) -> tuple[DeleteFileRef, ...]:
        """The delete files that apply to a data file of sequence number `data_seq`, by the
        rule alone (global ones first, each part by ascending sequence number)."""
        found = self.global_refs[bisect.bisect_right(self._global_seqs, data_seq):]
        scoped = self._by_partition.get(data_file.partition_key)
        if scoped is not None:
            seqs, refs = scoped
            found += tuple(refs[bisect.bisect_right(seqs, data_seq):])
        return found

    def applies_to(self, data_seq: int, data_file: DataFile) -> bool:
        """Whether any delete file of the set applies to the data file."""
        if self.global_refs and self.global_refs[-1].sequence_number > data_seq:
            return True
        scoped = self._by_partition.get(data_file.partition_key)
        return scoped is not None and scoped[0][-1] > data_seq


@dataclass(frozen=True)
class FileScanTask:
    """Read `data_file` (bytes [start, start + length) when split), apply `deletes`, the
    members of `equality` that apply to it, and `residual`.

    `deletes` are the position delete files and deletion vectors that apply to the file;
    equality delete files are never listed per task but shared (`EqualityDeleteSet`).
    Row positions for position deletes are positions in the whole file, so a split task
    still counts rows from the file's start; `start`/`length` select row groups (Parquet)
    or stripes (ORC) whose first byte lies in the range, as Iceberg's readers do.
    """

    data_file: DataFile
    sequence_number: int
    deletes: tuple[DeleteFileRef, ...] = ()
    residual: Expression = TRUE
    start: int = 0
    length: int | None = None
    equality: EqualityDeleteSet | None = None

    def __post_init__(self) -> None:
        if any(ref.is_equality for ref in self.deletes):
            raise ValueError(f"task of {self.data_file.file_path}: equality delete files "
                             "belong in the task's shared `equality` set, not its `deletes`")

    @property
    def equality_deletes(self) -> tuple[DeleteFileRef, ...]:
        """The equality delete files that apply to the task's data file."""
        if self.equality is None:
            return ()
        return self.equality.applying_to(self.sequence_number, self.data_file)

    @property
    def size_in_bytes(self) -> int:
        """Bytes this task reads: its range plus its own delete files, for bin-packing
        (the shared equality deletes are read once per reader, not per task)."""
        own = self.data_file.file_size_in_bytes if self.length is None else self.length
        return own + sum(d.file.file_size_in_bytes for d in self.deletes)

    @property
    def files_count(self) -> int:
        """The files reading the task opens: the data file and its own delete files."""
        return 1 + len(self.deletes)


@dataclass(frozen=True)
class ScanTaskGroup:
    """Tasks bin-packed together: one Spark partition, read by one executor task."""

    tasks: tuple[FileScanTask, ...]

    @property
    def size_in_bytes(self) -> int:
        """The bytes the group's tasks read."""
        return sum(t.size_in_bytes for t in self.tasks)
