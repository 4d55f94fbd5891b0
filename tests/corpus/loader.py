"""Reads a generated corpus: scenarios, their snapshot lists and per-snapshot ground truth."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds


@dataclass(frozen=True)
class SnapshotTruth:
    """One snapshot as Iceberg Java recorded it, and where its table contents are stored."""

    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    operation: str
    timestamp_ms: int
    schema_id: int | None
    label: str
    expired: bool
    row_count: int
    added_delete_files: dict[str, int]
    added_data_files: int
    removed_data_files: int
    summary: dict[str, str]
    truth_dir: Path

    def rows(self) -> pa.Table:
        """The full table contents Iceberg Java reads at this snapshot (time travel)."""
        return ds.dataset(self.truth_dir, format="parquet").to_table()


@dataclass(frozen=True)
class Scenario:
    name: str
    root: Path
    record: dict[str, Any] = field(repr=False)

    @property
    def location(self) -> str:
        return self.record["location"]

    @property
    def metadata_location(self) -> str:
        return self.record["metadata_location"]

    @property
    def format_version(self) -> int:
        return self.record["format_version"]

    @property
    def features(self) -> list[str]:
        return self.record["features"]

    @property
    def delete_files(self) -> dict[str, int]:
        return self.record["delete_files"]

    @cached_property
    def snapshots(self) -> list[SnapshotTruth]:
        fields = SnapshotTruth.__dataclass_fields__
        return [
            SnapshotTruth(truth_dir=self.root / entry["truth"],
                          **{k: v for k, v in entry.items() if k in fields})
            for entry in self.record["snapshots"]
        ]

    def snapshot(self, snapshot_id: int) -> SnapshotTruth:
        return next(s for s in self.snapshots if s.snapshot_id == snapshot_id)


@dataclass(frozen=True)
class Corpus:
    root: Path

    @cached_property
    def scenarios(self) -> dict[str, Scenario]:
        names = json.loads((self.root / "index.json").read_text())["scenarios"]
        return {
            name: Scenario(name, self.root / name,
                           json.loads((self.root / name / "scenario.json").read_text()))
            for name in names
        }
