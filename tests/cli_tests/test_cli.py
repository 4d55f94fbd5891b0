"""The `meltwater` command as installed: the console script run as a child process.

What each command accepts is what the README's Usage section shows; what `snapshots` and
`plan` print is checked against Iceberg Java's record of the corpus tables. Reading rows
(`scan`, `changes`) is tested against Iceberg Java in test_scan_interop.py and
test_changes_interop.py; `watch` in watch_tests/test_watch_cli.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

MELTWATER = Path(sys.executable).parent / "meltwater"

# Each command with the options the README's examples give it (README.md, "Usage" and
# "As a service"): its --help must list them.
DOCUMENTED = {
    "version": [],
    "snapshots": ["--format", "--output"],
    "scan": ["--filter", "--columns", "--format", "--as-of", "--output", "--snapshot", "--ref",
             "--limit"],
    "plan": ["--filter", "--format", "--snapshot", "--summary"],
    "changes": ["--from-snapshot", "--from-timestamp", "--compute-updates", "--net",
                "--format", "--filter", "--columns", "--output", "--limit", "--skip-expired"],
    "serve": ["--config", "--check"],
    "watch": ["--format", "--poll", "--interval", "--after"],
}
# Arguments that satisfy each command's required ones, so argparse gets to the bad option.
REQUIRED = {"version": [], "serve": ["--config", "/nonexistent.toml"]}


def meltwater(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(MELTWATER), *args], capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


def refused(result: subprocess.CompletedProcess) -> str:
    """The one line of a refusal: exit status 2, nothing on stdout, one line on stderr."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_version_prints_meltwater_s_version():
    result = meltwater("--version")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"meltwater {metadata.version('meltwater')}\n"


def _undocumented(help_text: str) -> list[str]:
    """The arguments a --help lists without a line saying what they do: an entry (two
    spaces in) with no text after it and no deeper-indented line below it."""
    lines = help_text.splitlines()
    missing, listing = [], False
    for i, line in enumerate(lines):
        if line and not line.startswith(" "):
            listing = line in ("options:", "positional arguments:")
            continue
        if not listing or not line.startswith("  ") or line.startswith("   "):
            continue
        invocation, _, text = line.strip().partition("  ")
        below = lines[i + 1] if i + 1 < len(lines) else ""
        if not text.strip() and not below.startswith("   "):
            missing.append(invocation)
    return missing


@pytest.mark.parametrize("command", [None, *DOCUMENTED])
def test_every_help_names_and_explains_every_argument(command):
    """`meltwater --help` lists every command and --version; each command's --help lists
    the options the README's examples give it; in both, each argument (TABLE included) has
    a line saying what it does. One child process per help text."""
    result = meltwater(*([command] if command else []), "--help", env={"COLUMNS": "100"})
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert _undocumented(result.stdout) == [], result.stdout
    if command is None:
        assert result.stdout.startswith("usage: meltwater ")
        listed = result.stdout.split("positional arguments:", 1)[1].split("options:", 1)[0]
        names = {line.split()[0] for line in listed.splitlines()
                 if line.startswith("    ") and not line.startswith("     ")}
        assert names == set(DOCUMENTED)
        assert "--version" in result.stdout
        return
    assert result.stdout.startswith(f"usage: meltwater {command} ")
    for option in DOCUMENTED[command]:
        assert option in result.stdout, f"meltwater {command} --help does not list {option}"
    if command not in ("version", "serve"):
        assert "TABLE                 the table: catalog.namespace.table" in result.stdout


def test_time_options_say_they_take_iso_8601_as_well_as_ms(corpus):
    """--from-timestamp, --to-timestamp and --as-of take a TIME, ms or ISO-8601, and say so."""
    for command, options in (("changes", ["--from-timestamp", "--to-timestamp"]),
                             ("scan", ["--as-of"]), ("plan", ["--as-of"])):
        text = meltwater(command, "--help", env={"COLUMNS": "200"}).stdout
        for option in options:
            entry = text.split(f"\n  {option} ", 1)[1].split("\n  -", 1)[0]
            assert entry.startswith("TIME") and "ISO-8601" in entry, entry
            assert "milliseconds" in entry and "MS" not in entry.split()
    scenario = corpus.scenarios["mor_partitioned"]
    first = scenario.snapshots[0]
    iso = dt.datetime.fromtimestamp(first.timestamp_ms / 1000, dt.timezone.utc).isoformat()
    by_ms = meltwater("changes", scenario.location, "--from-timestamp",
                      str(first.timestamp_ms), "--format", "jsonl")
    by_iso = meltwater("changes", scenario.location, "--from-timestamp", iso,
                       "--format", "jsonl")
    assert by_ms.returncode == 0 and by_iso.returncode == 0, by_iso.stderr
    assert by_iso.stdout == by_ms.stdout and by_ms.stdout


def usage_error(capsys, *args: str) -> subprocess.CompletedProcess:
    """`meltwater.cli.main.main(args)` run in this process, as a completed process: argparse
    refuses a command line before any command runs, so nothing but the parser is touched.
    `test_usage_errors_are_the_installed_scripts` holds the console script to the same."""
    from meltwater.cli.main import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["meltwater", *args], stopped.value.code, out, err)


@pytest.mark.parametrize("command", DOCUMENTED)
def test_an_unknown_option_is_a_usage_error(command, tmp_path, capsys):
    """Exit 2 with the error on one line that names the option; nothing runs (the table
    does not exist, and that is not what is reported)."""
    args = REQUIRED.get(command, [str(tmp_path / "no-table")])
    result = usage_error(capsys, command, *args, "--no-such-option")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0] == result.stderr.splitlines()[-1], result.stderr
    assert errors[0] == f"meltwater {command}: error: unrecognized arguments: --no-such-option"
    assert "Traceback" not in result.stderr


BAD_COMMAND_LINES = {
    "no table": (["snapshots"],
                 "meltwater snapshots: error: the following arguments are required: TABLE"),
    "no command": ([], "meltwater: error: the following arguments are required: COMMAND"),
    "unknown command": (["snapshot", "t"], "meltwater: error: argument COMMAND: invalid choice"),
    "bad choice": (["scan", "t", "--format", "xml"],
                   "meltwater scan: error: argument --format: invalid choice: 'xml'"),
    "not an integer": (["changes", "t", "--from-snapshot", "abc"],
                       "meltwater changes: error: argument --from-snapshot: invalid int value"),
    "not a number": (["watch", "t", "--interval", "soon"],
                     "meltwater watch: error: argument --interval: invalid float value"),
    "two starts": (["changes", "t", "--from-snapshot", "1", "--from-sequence", "2"],
                   "meltwater changes: error: argument --from-sequence: not allowed with "
                   "argument --from-snapshot"),
    "missing value": (["scan", "t", "--filter"],
                      "meltwater scan: error: argument --filter: expected one argument"),
}


@pytest.mark.parametrize("case", list(BAD_COMMAND_LINES))
def test_a_bad_command_line_is_one_line_and_status_2(case, capsys):
    """argparse's refusal without the usage lines above it: one line naming the command."""
    args, start = BAD_COMMAND_LINES[case]
    assert refused(usage_error(capsys, *args)).startswith(start)


@pytest.mark.parametrize("args", [["scan", "t", "--no-such-option"], ["scan", "t", "--filter"],
                                  []], ids=["unknown option", "missing value", "no command"])
def test_usage_errors_are_the_installed_scripts(args, capsys):
    """The console script, a child process, refuses a command line exactly as `main` does
    in process (status, stdout, stderr), which the two tests above check case by case."""
    child = meltwater(*args)
    assert child.returncode == 2, child.stderr
    in_process = usage_error(capsys, *args)
    assert (child.returncode, child.stdout, child.stderr) == (
        in_process.returncode, in_process.stdout, in_process.stderr)


def _iso(timestamp_ms: int) -> str:
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).isoformat()


def _summary_int(summary: dict[str, str], key: str) -> int:
    """A summary count as Iceberg Java records it: left out when zero."""
    return int(summary.get(key, 0))


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
            **{key.replace("-", "_"): _summary_int(truth.summary, key) for key in (
                "added-records", "deleted-records", "added-data-files", "deleted-data-files",
                "added-delete-files", "removed-delete-files", "added-position-deletes",
                "added-equality-deletes", "total-records", "total-data-files",
                "total-delete-files")},
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


def test_plan_summary_is_the_counts_without_the_tasks(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    full = meltwater("plan", scenario.location, "--filter", "id = 3")
    summary = meltwater("plan", scenario.location, "--filter", "id = 3", "--summary")
    assert full.returncode == 0 and summary.returncode == 0, full.stderr + summary.stderr
    assert full.stdout.startswith(summary.stdout)
    lines = summary.stdout.splitlines()
    assert len(lines) == 5 and not any(line.startswith("group") for line in lines)
    assert lines[-1].startswith("to read: 4 data files (")
    report = json.loads(meltwater("plan", scenario.location, "--filter", "id = 3",
                                  "--summary", "--format", "json").stdout)
    assert "groups" not in report
    whole = json.loads(meltwater("plan", scenario.location, "--filter", "id = 3",
                                 "--format", "json").stdout)
    tasks = [t for group in whole["groups"] for t in group]
    assert report["summary"] == whole["summary"] == {
        "groups": len(whole["groups"]), "tasks": len(tasks),
        "data_files": len({t["file"] for t in tasks}),
        "delete_files": len({d["file"] for t in tasks for d in t["deletes"]}),
        "records": sum(t["records"] for t in tasks),
        "bytes": report["summary"]["bytes"]}
    assert report["stats"] == whole["stats"]


def test_plan_counts_one_in_the_singular(corpus):
    """`1 record`, `1 delete file`, `1 group`: never `1 records`."""
    scenario = corpus.scenarios["mor_partitioned"]
    text = meltwater("plan", scenario.location, "--filter", "id = 3").stdout
    assert "(1 record, " in text and "1 delete file," in text and "in 1 group" in text
    assert not re.search(r"(?<![\d,])1 (records|delete files|data files|tasks|groups)\b", text)
    one = meltwater("scan", scenario.location, "--filter", "id = 3")
    assert one.stdout.endswith("\n(1 row)\n"), one.stdout


def test_snapshots_show_zero_counts_and_delete_files(corpus):
    """Iceberg Java leaves zero counts out of a summary: 0, not null. The table format
    pairs the counts, delete files and the rows they delete included."""
    scenario = corpus.scenarios["mor_partitioned"]
    rows = [json.loads(line) for line in
            meltwater("snapshots", scenario.location, "--format", "jsonl").stdout.splitlines()]
    assert all(value is not None for row in rows for key, value in row.items()
               if key not in ("parent_id", "refs"))
    deletes = [r for r in rows if r["operation"] == "delete"]
    assert deletes and all(r["deleted_records"] == 0 and r["added_delete_files"] > 0
                           and r["added_position_deletes"] > 0 for r in deletes)
    table = meltwater("snapshots", scenario.location).stdout.splitlines()
    header = table[0].split()
    assert header == ["snapshot_id", "parent_id", "seq", "operation", "committed_at", "records",
                      "data_files", "delete_files", "added_deletes", "total_records", "refs"]
    assert table[-1] == f"({len(rows)} rows)"
    for line, row in zip(table[2:-1], rows, strict=True):
        assert line.split()[:11] == [
            str(row["snapshot_id"]), str(row["parent_id"]) if row["parent_id"] else "null",
            str(row["sequence_number"]), row["operation"],
            dt.datetime.fromisoformat(row["committed_at"]).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
            + "Z",
            f"+{row['added_records']}/-{row['deleted_records']}",
            f"+{row['added_data_files']}/-{row['deleted_data_files']}",
            f"+{row['added_delete_files']}/-{row['removed_delete_files']}",
            f"{row['added_position_deletes']}", "pos,", f"{row['added_equality_deletes']}",
        ][:11]


def test_changes_limit_returns_at_most_n_rows(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    every = meltwater("changes", scenario.location, "--format", "jsonl").stdout.splitlines()
    assert len(every) > 5
    for limit, expected in ((5, 5), (0, 0), (len(every) + 10, len(every))):
        result = meltwater("changes", scenario.location, "--format", "jsonl",
                           "--limit", str(limit))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == expected and set(lines) <= set(every)
    assert "--limit must be zero or more" in refused(
        meltwater("changes", scenario.location, "--limit", "-1"))


def test_a_filter_of_500_terms_is_read_not_a_recursion_error(corpus):
    """`id = 0 or id = 1 or ... or id = 499` reads what `id in (0, ..., 499)` reads."""
    scenario = corpus.scenarios["mor_partitioned"]
    ors = " or ".join(f"id = {i}" for i in range(500))
    ands = " and ".join(f"id != {i}" for i in range(500))
    listed = f"id in ({', '.join(map(str, range(500)))})"
    for command in ("scan", "changes"):
        by_or = meltwater(command, scenario.location, "--filter", ors, "--format", "jsonl")
        by_in = meltwater(command, scenario.location, "--filter", listed, "--format", "jsonl")
        assert by_or.returncode == 0, by_or.stderr[-2000:]
        assert sorted(by_or.stdout.splitlines()) == sorted(by_in.stdout.splitlines())
        assert by_in.stdout
        by_and = meltwater(command, scenario.location, "--filter", ands, "--format", "jsonl")
        assert by_and.returncode == 0, by_and.stderr[-2000:]
    plan = meltwater("plan", scenario.location, "--filter", ors, "--summary")
    assert plan.returncode == 0, plan.stderr[-2000:]
    deep = "(" * 101 + "id = 1" + ")" * 101
    assert refused(meltwater("scan", scenario.location, "--filter", deep)) == (
        "meltwater: filter: nested more than 100 levels deep (parentheses or 'not') at "
        "position 100")


def test_expired_history_refusal_names_skip_expired(corpus):
    scenario = corpus.scenarios["maintenance"]
    line = refused(meltwater("changes", scenario.location, "--format", "jsonl"))
    assert "has expired" in line and line.endswith(
        "or give --skip-expired to skip the expired snapshots with a warning")
    skipped = meltwater("changes", scenario.location, "--format", "jsonl", "--skip-expired")
    assert skipped.returncode == 0 and skipped.stdout, skipped.stderr
    assert "skipping expired snapshots" in skipped.stderr
