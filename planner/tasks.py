"""Scan tasks: what the engine must read, and nothing it must work out for itself.

A task names one data file (or a byte range of it), every delete file that applies to it,
and the residual filter rows must still pass. Tasks are frozen dataclasses of plain values,
so they pickle to Spark executors; the engine (`meltwater.stream`) needs no table metadata
beyond the projected schema carried in the task group.
"""

from __future__ import annotations

from dataclasses import dataclass

from meltwater.planner.expressions import TRUE, Expression
from meltwater.planner.files import DataFile, FileContent


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
class FileScanTask:
    """Read `data_file` (bytes [start, start + length) when split), apply `deletes` and
    `residual`.

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

    @property
    def size_in_bytes(self) -> int:
        """Bytes this task reads: its range plus its delete files, for bin-packing."""
        own = self.data_file.file_size_in_bytes if self.length is None else self.length
        return own + sum(d.file.file_size_in_bytes for d in self.deletes)

    @property
    def files_count(self) -> int:
        """The files reading the task opens: the data file and its delete files."""
        return 1 + len(self.deletes)


@dataclass(frozen=True)
class ScanTaskGroup:
    """Tasks bin-packed together: one Spark partition, read by one executor task."""

    tasks: tuple[FileScanTask, ...]

    @property
    def size_in_bytes(self) -> int:
        """The bytes the group's tasks read."""
        return sum(t.size_in_bytes for t in self.tasks)
