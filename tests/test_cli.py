"""The `meltwater` command as installed: the console script run as a child process.

What each command accepts is what the README's Usage section shows; what `snapshots` and
`plan` print is checked against Iceberg Java's record of the corpus tables. Reading rows
(`scan`, `changes`) is tested against Iceberg Java in test_scan_interop.py and
test_changes_interop.py; `watch` in stream_tests/test_watch_cli.py.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

MELTWATER = Path(sys.executable).parent / "meltwater"

# Each command with the options the README's examples give it (README.md, "Usage" and
# "As a service"): its --help must list them.
DOCUMENTED = {
    "version": [],
    "snapshots": ["--format", "--output"],
    "scan": ["--filter", "--columns", "--format", "--as-of", "--output", "--snapshot", "--ref"],
    "plan": ["--filter", "--format", "--snapshot"],
    "changes": ["--from-snapshot", "--from-timestamp", "--compute-updates", "--net",
                "--format", "--filter", "--columns", "--output"],
    "serve": ["--config", "--check"],
    "watch": ["--format", "--poll", "--interval", "--after"],
}
# Arguments that satisfy each command's required ones, so argparse gets to the bad option.
REQUIRED = {"version": [], "serve": ["--config", "/nonexistent.toml"]}


def meltwater(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MELTWATER), *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_command():
    result = meltwater("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: meltwater ")
    listed = result.stdout.split("positional arguments:", 1)[1].split("options:", 1)[0]
    names = {line.split()[0] for line in listed.splitlines()
             if line.startswith("    ") and not line.startswith("     ")}
    assert names == set(DOCUMENTED)


@pytest.mark.parametrize("command", DOCUMENTED)
def test_each_command_has_help_naming_its_options(command):
    result = meltwater(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: meltwater {command} ")
    for option in DOCUMENTED[command]:
        assert option in result.stdout, f"meltwater {command} --help does not list {option}"
    assert result.stderr == ""


@pytest.mark.parametrize("command", DOCUMENTED)
def test_an_unknown_option_is_a_usage_error(command, tmp_path):
    """Exit 2 with the error on one line that names the option; nothing runs (the table
    does not exist, and that is not what is reported)."""
    args = REQUIRED.get(command, [str(tmp_path / "no-table")])
    result = meltwater(command, *args, "--no-such-option")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0] == result.stderr.splitlines()[-1], result.stderr
    assert errors[0].endswith("error: unrecognized arguments: --no-such-option")
    assert "Traceback" not in result.stderr


def test_a_missing_table_argument_is_a_usage_error():
    result = meltwater("snapshots")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "meltwater snapshots: error: the following arguments are required: TABLE")


def _iso(timestamp_ms: int) -> str:
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).isoformat()


def _summary_int(summary: dict[str, str], key: str) -> int | None:
    return int(summary[key]) if key in summary else None


@pytest.mark.parametrize("name", ["mor_partitioned", "maintenance", "v3_deletion_vectors"])
def test_snapshots_lists_what_iceberg_java_committed(corpus, name):
    """One line per retained snapshot (branches and expired history included), in commit
    order, with the ids, sequence numbers, times, counts and refs Iceberg Java recorded."""
    scenario = corpus.scenarios[name]
    result = meltwater("snapshots", scenario.location, "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    retained = [s for s in scenario.snapshots if not s.expired]
    assert [r["snapshot_id"] for r in rows] == [s.snapshot_id for s in retained]
    refs: dict[int, list[str]] = {}
    for ref, target in scenario.record["refs"].items():
        refs.setdefault(target["snapshot_id"], []).append(ref)
    for row, truth in zip(rows, retained, strict=True):
        assert row == {
            "snapshot_id": truth.snapshot_id,
            "parent_id": truth.parent_id,
            "sequence_number": truth.sequence_number,
            "operation": truth.operation,
            "committed_at": _iso(truth.timestamp_ms),
            "added_records": _summary_int(truth.summary, "added-records"),
            "deleted_records": _summary_int(truth.summary, "deleted-records"),
            "added_data_files": _summary_int(truth.summary, "added-data-files"),
            "added_delete_files": _summary_int(truth.summary, "added-delete-files"),
            "total_records": _summary_int(truth.summary, "total-records"),
            "refs": ",".join(sorted(refs.get(truth.snapshot_id, []))) or None,
        }, truth.label


@pytest.mark.parametrize("name", ["mor_partitioned", "equality_deletes"])
def test_plan_reads_every_live_data_file_of_the_snapshot(corpus, name):
    """Unfiltered, at the newest snapshot and at an older one: one task per data file live
    there (Iceberg Java's summary counts them), holding all their records."""
    scenario = corpus.scenarios[name]
    current = scenario.snapshot(scenario.record["current_snapshot_id"])
    older = next(s for s in scenario.snapshots if s.operation == "delete")
    for truth, args in ((current, []), (older, ["--snapshot", str(older.snapshot_id)])):
        result = meltwater("plan", scenario.location, "--format", "json", *args)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        tasks = [task for group in report["groups"] for task in group]
        assert report["snapshot_id"] == truth.snapshot_id
        assert report["filter"] == "true"
        assert len({t["file"] for t in tasks}) == int(truth.summary["total-data-files"])
        assert all(t["start"] == 0 and t["length"] is None for t in tasks)  # small files
        assert sum(t["records"] for t in tasks) == int(truth.summary["total-records"])
        assert report["stats"]["tasks"] == len(tasks)
        assert report["stats"]["data_files_considered"] == len(tasks)
        deletes = {d["file"] for t in tasks for d in t["deletes"]}
        assert len(deletes) <= int(truth.summary["total-delete-files"])
        assert bool(deletes) == (int(truth.summary["total-delete-files"]) > 0)
