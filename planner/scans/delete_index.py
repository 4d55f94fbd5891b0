"""Which delete files apply to which data file, exactly as the spec says.

- A position delete applies when data seq <= delete seq and the spec and partition are equal;
  it applies to the same commit's data (equal sequence numbers) so a commit can delete rows
  it adds.
- An equality delete applies when data seq < delete seq and the partition is equal, or the
  delete file's spec is unpartitioned (a *global* delete).
- A delete file that names one data file (v3 `referenced_data_file`, or `file_path` lower and
  upper bounds that are equal) applies to that file only.
- A deletion vector (v3) supersedes older position deletes of its data file: writers merge
  those into the DV, so when a DV applies no position delete file is applied beside it.

Delete files are grouped once when the index is built (per partition, per referenced file,
global) and each group is sorted by sequence number, so finding a data file's position
deletes is a dictionary lookup and a binary search, not a scan over every delete file.
Equality deletes are not matched to data files at all when planning reads: tasks share
them as one `EqualityDeleteSet` (see `meltwater.planner.scans.tasks`), whose rule the engine
applies row by row with one lookup, so planning costs data files plus delete files, never
their product.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from meltwater.planner.errors import CorruptMetadataError
from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.partitioning import PartitionSpec
from meltwater.planner.spec.reserved_field_ids import DELETE_FILE_PATH_ID

# Types whose Python ordering of internal values equals Iceberg's comparator, so bounds can
# prove that a delete file's keys and a data file's values never meet. Floats (NaN) and
# uuids (signedness) are left out: for them pruning is skipped, never guessed.


@dataclass
class _BySequence:
    """Delete files sorted by data sequence number, for 'every delete newer than s'."""

    seqs: list[int] = field(default_factory=list)
    refs: list[DeleteFileRef] = field(default_factory=list)

    def add(self, ref: DeleteFileRef) -> None:
        at = bisect.bisect_right(self.seqs, ref.sequence_number)
        self.seqs.insert(at, ref.sequence_number)
        self.refs.insert(at, ref)

    def at_least(self, seq: int) -> list[DeleteFileRef]:
        return self.refs[bisect.bisect_left(self.seqs, seq):]

    def after(self, seq: int) -> list[DeleteFileRef]:
        return self.refs[bisect.bisect_right(self.seqs, seq):]


def referenced_data_file(delete: DataFile) -> str | None:
    """The one data file a delete file is scoped to, if it is scoped to one."""
    if delete.referenced_data_file is not None:
        return delete.referenced_data_file
    if delete.content == FileContent.POSITION_DELETES:
        lower: str | None = delete.lower_bounds.get(DELETE_FILE_PATH_ID)
        upper = delete.upper_bounds.get(DELETE_FILE_PATH_ID)
        if lower is not None and lower == upper:
            return lower
    return None


def is_global_equality_delete(delete: DataFile, specs: Mapping[int, PartitionSpec]) -> bool:
    """Whether an equality delete file applies to data files of every partition: the spec
    scopes one to its partition unless its partition spec is unpartitioned ("global"); a
    spec id the table does not list is read as Iceberg Java reads it, as unpartitioned."""
    spec = specs.get(delete.spec_id)
    return spec is None or spec.is_unpartitioned


class DeleteFileIndex:
    """The live delete files of a snapshot, indexed for matching to data files: position
    deletes and DVs per data file (`positional_for`), equality deletes as the one set every
    task shares (`equality_set`, which applies them by sequence number and scope)."""

    def __init__(self, specs: dict[int, PartitionSpec],
                 deletes: Iterable[DeleteFileRef] = ()) -> None:
        self._specs = specs
        self._global_eq = _BySequence()
        self._eq_by_partition: dict[tuple[int, tuple[Any, ...]], _BySequence] = defaultdict(
            _BySequence)
        self._pos_by_partition: dict[tuple[int, tuple[Any, ...]], _BySequence] = defaultdict(
            _BySequence)
        self._pos_by_file: dict[str, _BySequence] = defaultdict(_BySequence)
        self._dv_by_file: dict[str, DeleteFileRef] = {}
        self._equality: EqualityDeleteSet | None = None  # built on first use
        self.size = 0
        for ref in deletes:
            self.add(ref)

    def add(self, ref: DeleteFileRef) -> None:
        """Index one live delete file under its partition, referenced data file or as global."""
        delete = ref.file
        self.size += 1
        partition_key = delete.partition_key
        if delete.content == FileContent.EQUALITY_DELETES:
            self._equality = None
            if is_global_equality_delete(delete, self._specs):
                self._global_eq.add(ref)
            else:
                self._eq_by_partition[partition_key].add(ref)
            return
        target = referenced_data_file(delete)
        if delete.is_deletion_vector:
            if target is None:  # the spec requires it; Java would index it under no file
                raise CorruptMetadataError(
                    f"deletion vector {delete.file_path} (offset {delete.content_offset}) has "
                    "no referenced_data_file, which the Iceberg spec requires of a deletion "
                    "vector: the data file whose rows it deletes is unknown")
            current = self._dv_by_file.get(target)
            if current is None or current.sequence_number < ref.sequence_number:
                self._dv_by_file[target] = ref
        elif target is not None:
            self._pos_by_file[target].add(ref)
        else:
            self._pos_by_partition[partition_key].add(ref)

    def positional_for(self, data_seq: int, data_file: DataFile) -> tuple[DeleteFileRef, ...]:
        """The position delete files and deletion vectors that apply to a data file of
        sequence number `data_seq`."""
        path = data_file.file_path
        dv = self._dv_by_file.get(path)
        if dv is not None and dv.sequence_number >= data_seq:
            return (dv,)
        positional = [ref for ref in self._pos_by_partition_for(data_file, data_seq)
                      if _may_name_path(ref.file, path)]
        by_file = self._pos_by_file.get(path)
        if by_file is not None:
            positional.extend(by_file.at_least(data_seq))
        return tuple(positional)

    def equality_set(self) -> EqualityDeleteSet | None:
        """Every equality delete file of the index, as the set tasks share (None: none)."""
        if not self._global_eq.refs and not self._eq_by_partition:
            return None
        if self._equality is None:
            scoped = sorted((ref for group in self._eq_by_partition.values()
                             for ref in group.refs), key=lambda r: r.sequence_number)
            self._equality = EqualityDeleteSet(tuple(self._global_eq.refs), tuple(scoped))
        return self._equality

    def _pos_by_partition_for(self, data_file: DataFile, data_seq: int) -> list[DeleteFileRef]:
        group = self._pos_by_partition.get(data_file.partition_key)
        return group.at_least(data_seq) if group is not None else []

def _may_name_path(delete: DataFile, path: str) -> bool:
    """A partition-scoped position delete file's path bounds may exclude a data file."""
    lower = delete.lower_bounds.get(DELETE_FILE_PATH_ID)
    upper = delete.upper_bounds.get(DELETE_FILE_PATH_ID)
    return not ((lower is not None and path < lower) or (upper is not None and path > upper))
