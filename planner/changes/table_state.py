"""The live files of one snapshot, carried from commit to commit: what change planning knows.

Planning a commit's changes needs the live data files its deletes may reach and the delete
files that applied to them before the commit and after it. Reading those from every
manifest of every commit costs a range (commits x files). Instead the state at the first
commit of a range is read from its manifests once, and each later commit is applied as
what it changed: its own manifests' ADDED and DELETED entries (`CommitDelta`). A range
then costs its files once plus each commit's own entries, which is what the commit
changed.

Example: S1 appends F1 and F2; S2 adds equality delete E (global); S3 appends F3 and
removes F1. The state at S1 is {F1, F2}, no deletes. S2's delta adds E: the state after S2
is {F1, F2} with E. S3's delta adds F3 and removes F1: {F2, F3} with E. Planning S3 never
reads S1's or S2's manifests again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from meltwater.planner.scans.delete_index import DeleteFileIndex, is_global_equality_delete
from meltwater.planner.scans.tasks import DataFileRef, DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestEntry,
    PartitionKey,
)
from meltwater.planner.spec.partitioning import PartitionSpec


@dataclass(frozen=True)
class CommitDelta:
    """What one commit changed: the data and delete files it added and removed."""

    added_data: tuple[DataFileRef, ...] = ()
    removed_data: tuple[DataFileRef, ...] = ()
    added_deletes: tuple[DeleteFileRef, ...] = ()
    removed_deletes: tuple[DeleteFileRef, ...] = ()

    @classmethod
    def of(cls, entries: Iterable[ManifestEntry]) -> CommitDelta:
        """The delta from a commit's own ADDED and DELETED entries."""
        added_data: list[DataFileRef] = []
        removed_data: list[DataFileRef] = []
        added_deletes: list[DeleteFileRef] = []
        removed_deletes: list[DeleteFileRef] = []
        for entry in entries:
            if entry.status == EntryStatus.EXISTING:
                continue
            added = entry.status == EntryStatus.ADDED
            if entry.file.content == FileContent.DATA:
                (added_data if added else removed_data).append(
                    DataFileRef(entry.file, entry.sequence_number, entry.snapshot_id))
            else:
                (added_deletes if added else removed_deletes).append(
                    DeleteFileRef(entry.file, entry.sequence_number))
        return cls(tuple(added_data), tuple(removed_data), tuple(added_deletes),
                   tuple(removed_deletes))

    @property
    def equality_added(self) -> tuple[DeleteFileRef, ...]:
        """The equality delete files the commit added."""
        return tuple(r for r in self.added_deletes if r.is_equality)

    @property
    def equality_removed(self) -> tuple[DeleteFileRef, ...]:
        """The equality delete files the commit removed."""
        return tuple(r for r in self.removed_deletes if r.is_equality)

    @property
    def positional_changed(self) -> tuple[DeleteFileRef, ...]:
        """The position delete files and DVs the commit added or removed."""
        return tuple(r for r in self.added_deletes + self.removed_deletes if r.is_position)


@dataclass
class TableState:
    """The live data and delete files of one snapshot (see the module doc).

    A state is never changed once built: `advanced` makes the next one, sharing what did
    not change, so the state a task was planned against stays as it was."""

    snapshot_id: int | None
    specs: dict[int, PartitionSpec]
    data: dict[str, DataFileRef] = field(default_factory=dict)  # by path
    by_partition: dict[PartitionKey, dict[str, DataFileRef]] = field(default_factory=dict)
    positional: dict[tuple[str, int | None], DeleteFileRef] = field(default_factory=dict)
    equality: dict[tuple[str, int | None], DeleteFileRef] = field(default_factory=dict)
    # built on first use
    _index: DeleteFileIndex | None = field(default=None, repr=False)
    _equality_set: EqualityDeleteSet | None = field(default=None, repr=False)
    _equality_built: bool = field(default=False, repr=False)

    @classmethod
    def of(cls, snapshot_id: int | None, entries: Iterable[ManifestEntry],
           specs: dict[int, PartitionSpec]) -> TableState:
        """The state of a snapshot from its manifests' live entries."""
        state = cls(snapshot_id, specs)
        for entry in entries:
            if entry.status == EntryStatus.DELETED:
                continue
            if entry.file.content == FileContent.DATA:
                state._add_data(DataFileRef(entry.file, entry.sequence_number,
                                            entry.snapshot_id))
            else:
                state._add_delete(DeleteFileRef(entry.file, entry.sequence_number))
        return state

    def _add_data(self, ref: DataFileRef) -> None:
        self.data[ref.file.file_path] = ref
        self.by_partition.setdefault(ref.file.partition_key, {})[ref.file.file_path] = ref

    def _remove_data(self, ref: DataFileRef) -> None:
        self.data.pop(ref.file.file_path, None)
        members = self.by_partition.get(ref.file.partition_key)
        if members is not None:
            members.pop(ref.file.file_path, None)
            if not members:
                del self.by_partition[ref.file.partition_key]

    def replace_data(self, ref: DataFileRef) -> None:
        """Put a newer description of a live data file in place (the same file decoded
        under a newer manifest list, which may give it row ids); only while the state is
        being built, before a task names it."""
        self.data[ref.file.file_path] = ref
        members = self.by_partition.get(ref.file.partition_key)
        if members is not None and ref.file.file_path in members:
            self.by_partition[ref.file.partition_key] = {**members,
                                                         ref.file.file_path: ref}

    def _add_delete(self, ref: DeleteFileRef) -> None:
        (self.equality if ref.is_equality else self.positional)[ref.key] = ref

    def _remove_delete(self, ref: DeleteFileRef) -> None:
        (self.equality if ref.is_equality else self.positional).pop(ref.key, None)

    def advanced(self, snapshot_id: int, delta: CommitDelta) -> TableState:
        """The state after a commit with this delta: a new state, this one unchanged."""
        touched = {r.file.partition_key for r in delta.added_data + delta.removed_data}
        state = TableState(snapshot_id, self.specs, dict(self.data),
                           {key: (dict(members) if key in touched else members)
                            for key, members in self.by_partition.items()},
                           dict(self.positional) if delta.positional_changed
                           else self.positional,
                           dict(self.equality) if (delta.equality_added
                                                   or delta.equality_removed)
                           else self.equality)
        if not delta.positional_changed:
            state._index = self._index
        if not (delta.equality_added or delta.equality_removed):
            state._equality_set, state._equality_built = (self._equality_set,
                                                          self._equality_built)
        for data in delta.removed_data:
            state._remove_data(data)
        for data in delta.added_data:
            state._add_data(data)
        for delete in delta.removed_deletes:
            state._remove_delete(delete)
        for delete in delta.added_deletes:
            state._add_delete(delete)
        return state

    def reverted(self, snapshot_id: int | None, delta: CommitDelta) -> TableState:
        """The state before a commit with this delta, this being the state after it."""
        undo = CommitDelta(delta.removed_data, delta.added_data, delta.removed_deletes,
                           delta.added_deletes)
        state = self.advanced(0, undo)
        state.snapshot_id = snapshot_id
        return state

    @property
    def positional_index(self) -> DeleteFileIndex:
        """The live position deletes and DVs, indexed for `positional_for`."""
        if self._index is None:
            self._index = DeleteFileIndex(self.specs, self.positional.values())
        return self._index

    def positional_for(self, ref: DataFileRef) -> tuple[DeleteFileRef, ...]:
        """The position deletes and DVs that apply to a data file in this state."""
        if not self.positional:
            return ()
        return self.positional_index.positional_for(ref.sequence_number, ref.file)

    @property
    def equality_set(self) -> EqualityDeleteSet | None:
        """The live equality delete files, as the set tasks share (None: none)."""
        if not self._equality_built:
            refs = sorted(self.equality.values(), key=lambda r: (r.sequence_number, r.key))
            global_refs = tuple(r for r in refs if self.is_global(r.file))
            scoped = tuple(r for r in refs if not self.is_global(r.file))
            self._equality_set = (EqualityDeleteSet(global_refs, scoped) if refs else None)
            self._equality_built = True
        return self._equality_set

    def is_global(self, delete: DataFile) -> bool:
        """Whether an equality delete file reaches every partition (see
        `is_global_equality_delete`)."""
        return is_global_equality_delete(delete, self.specs)

    def reached_by(self, delete: DeleteFileRef) -> list[DataFileRef]:
        """The live data files an equality delete may apply to: older ones of its scope."""
        if self.is_global(delete.file):
            members: Iterable[DataFileRef] = self.data.values()
        else:
            members = self.by_partition.get(delete.file.partition_key, {}).values()
        return [ref for ref in members if ref.sequence_number < delete.sequence_number]

    def in_partition(self, key: PartitionKey) -> Iterable[DataFileRef]:
        """The live data files of one spec and partition."""
        return self.by_partition.get(key, {}).values()
