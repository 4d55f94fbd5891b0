"""What planning looked at and what pruning saved, counted for `meltwater plan`.

Snapshot scans (`manifest_group`) and change planning (`meltwater.planner.changes.
incremental`) count into the same `PlanStats`: a plan that reads less says so in numbers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

from meltwater.planner.spec.files import ManifestContent, ManifestFile
from meltwater.planner.table.manifests import ManifestReader
from meltwater.planner.table.metadata import Snapshot


@dataclass
class PlanStats:
    """What planning looked at and what pruning saved, for `meltwater plan` and benchmarks."""

    data_manifests: int = 0
    delete_manifests: int = 0
    manifests_skipped_by_partition: int = 0
    manifests_skipped_by_counts: int = 0
    manifests_read: int = 0
    data_files_considered: int = 0
    data_files_skipped_by_partition: int = 0
    data_files_skipped_by_metrics: int = 0
    delete_files_considered: int = 0
    delete_files_skipped_by_partition: int = 0
    delete_files_skipped_by_metrics: int = 0
    delete_files_matched: int = 0
    tasks: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add to counters by name; thread-safe, as manifests are read in parallel."""
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, int]:
        """The counters by name, as `meltwater plan` and the benchmarks report them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


def listed_manifests(reader: ManifestReader, snapshot: Snapshot,
                     stats: PlanStats) -> tuple[list[ManifestFile], list[ManifestFile]]:
    """A snapshot's data manifests and delete manifests, counted in `stats` as what
    planning looked at (once per manifest list, however many plans then use it)."""
    manifests = reader.manifest_list(snapshot)
    data = [m for m in manifests if m.content == ManifestContent.DATA]
    deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
    stats.add(data_manifests=len(data), delete_manifests=len(deletes))
    return data, deletes
