"""Pruning, proven the way Iceberg's own tests prove it: files that a filter must prune are
made unreadable, and the filtered scan still returns exactly the truth.

Which files must be pruned is decided here from the files' partition directories (written
by Iceberg Java), not by asking meltwater's planner.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import mmh3
import pyarrow as pa

import meltwater.stream
from corpus.compare import assert_same_rows
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.errors import NoSuchFileError
from meltwater.planner.scans.manifest_group import PlanStats
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.planner.table.manifests import ManifestReader
from meltwater.planner.table.table_loading import load_table


class UnavailableIO(PyArrowFileIO):
    """A FileIO on which some files cannot be opened, like Iceberg's withUnavailableLocations."""

    def __init__(self, unavailable: set[str]) -> None:
        super().__init__()
        self.unavailable = unavailable
        self.opened: list[str] = []

    def open_input(self, location: str):
        if location in self.unavailable:
            raise NoSuchFileError(f"{location}: made unavailable by the test")
        self.opened.append(location)
        return super().open_input(location)


def _data_files(location: str) -> list[Path]:
    return [p for p in Path(location, "data").rglob("*.parquet") if "-deletes" not in p.name]


def _filtered_truth(scenario, predicate) -> pa.Table:
    truth = scenario.snapshots[-1].rows()
    return pa.Table.from_pylist([r for r in truth.to_pylist() if predicate(r)],
                                schema=truth.schema)


def test_partition_pruning_on_identity_partitions(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    pruned = {str(p) for p in _data_files(scenario.location) if "category=a" not in str(p)}
    assert pruned
    io = UnavailableIO(pruned)
    table = load_table(scenario.location, io)
    planned = meltwater.stream.plan(table, filter="category = 'a'")
    stats = planned.stats
    assert stats.data_files_skipped_by_partition > 0
    assert stats.manifests_skipped_by_partition + stats.data_files_skipped_by_partition > 0
    got = meltwater.stream.read_plan(planned).read_all()
    assert_same_rows(got, _filtered_truth(scenario, lambda r: r["category"] == "a"),
                     "category = 'a' with other partitions unreadable")


def _bucket(value: int, n: int) -> int:
    """The spec's bucket transform for a long, written out independently of meltwater."""
    return (mmh3.hash(struct.pack("<q", value), 0) & 0x7FFFFFFF) % n


def test_bucket_pruning(corpus):
    scenario = corpus.scenarios["random_mix"]
    bucket = _bucket(9, 4)
    pruned = {str(p) for p in _data_files(scenario.location)
              if f"id_bucket={bucket}" not in str(p)}
    io = UnavailableIO(pruned)
    got = meltwater.stream.scan(load_table(scenario.location, io), filter="id = 9").read_all()
    assert_same_rows(got, _filtered_truth(scenario, lambda r: r["id"] == 9), "id = 9")
    assert not any(p in pruned for p in io.opened)


def test_metrics_pruning_skips_files_by_column_bounds(corpus):
    scenario = corpus.scenarios["cow_partitioned"]
    table = load_table(scenario.location)
    planned = meltwater.stream.plan(table, filter="id = 600")
    assert planned.stats.data_files_skipped_by_metrics > 0
    assert len(planned.tasks) < planned.stats.data_files_considered
    got = meltwater.stream.read_plan(planned).read_all()
    assert_same_rows(got, _filtered_truth(scenario, lambda r: r["id"] == 600), "id = 600")


def test_delete_files_are_pruned_by_their_own_metrics(corpus):
    """The seed's example: equality deletes whose keys lie elsewhere are not applied."""
    scenario = corpus.scenarios["equality_deletes"]
    table = load_table(scenario.location)
    planned = meltwater.stream.plan(table, filter="id = 30")
    assert planned.stats.delete_files_skipped_by_metrics > 0
    got = meltwater.stream.read_plan(planned).read_all()
    assert_same_rows(got, _filtered_truth(scenario, lambda r: r["id"] == 30), "id = 30")


def test_plan_command_reports_pruning(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    exe = Path(sys.executable).parent / "meltwater"
    result = subprocess.run([str(exe), "plan", scenario.location, "--filter", "category = 'b'",
                             "--format", "json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stats"]["data_files_skipped_by_partition"] > 0
    files = [t["file"] for g in report["groups"] for t in g]
    assert files and all("category=b" in f for f in files)
    text = subprocess.run([str(exe), "plan", scenario.location], capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    tasks = sum(len(g) for g in json.loads(subprocess.run(
        [str(exe), "plan", scenario.location, "--format", "json"],
        capture_output=True, text=True, check=True).stdout)["groups"])
    assert "manifests:" in text.stdout and f"as {tasks} tasks in " in text.stdout



def test_change_planning_reads_each_manifest_once(corpus):
    """Planning a history carries the table's state from commit to commit: each manifest
    is read once however many commits list it (where planning each commit alone read every
    manifest its deletes might reach, commit after commit), and every commit's tasks are
    those planned for it alone, from the state its own manifest list gives."""
    for name in ("equality_deletes", "position_deletes_with_rows", "v3_deletion_vectors"):
        table = load_table(corpus.scenarios[name].location)
        metadata = table.metadata
        history = metadata.ancestors(metadata.current_snapshot_id)[::-1]
        stats = PlanStats()
        carried = IncrementalPlanner(table, stats=stats)
        assert [carried.plan_commit(s, i).tasks for i, s in enumerate(history)] == [
            IncrementalPlanner(table).plan_commit(s, i).tasks
            for i, s in enumerate(history)], name
        reader = ManifestReader(metadata, table.io)
        listed = {m.manifest_path for s in history for m in reader.manifest_list(s)}
        assert 0 < stats.manifests_read <= len(listed), name
        assert stats.manifests_read < stats.data_manifests + stats.delete_manifests, name
