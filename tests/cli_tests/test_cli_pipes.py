"""A reader that stops early: `meltwater ... | head` ends quietly with status 0.

The console script writes into a pipe whose reading end is already closed, so its first
write fails with EPIPE wherever it happens (Python's print, pyarrow's CSV writer, a
flush), however small the output: what `head -1` does to a long output once it has its
line. Like `cat` or `grep`, the command then stops, says nothing and exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from meltwater.cli import main as cli_main
from meltwater.cli import snapshots_run

MELTWATER = str(Path(sys.executable).parent / "meltwater")

COMMANDS = [["snapshots"], ["snapshots", "--format", "jsonl"], ["snapshots", "--format", "csv"],
            ["scan"], ["scan", "--format", "jsonl"], ["scan", "--format", "csv"],
            ["scan", "--format", "jsonl", "--limit", "1"],
            ["plan"], ["plan", "--format", "json"], ["plan", "--summary"],
            ["changes"], ["changes", "--format", "jsonl"], ["changes", "--format", "csv"],
            ["changes", "--format", "debezium-jsonl"], ["changes", "--net"]]


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Run the command with stdout a pipe nobody reads any more."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([MELTWATER, *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_a_closed_pipe_ends_the_command_quietly_with_status_0(corpus, args):
    table = corpus.scenarios["mor_partitioned"].location
    result = into_closed_pipe(args[0], table, *args[1:])
    assert (result.returncode, result.stderr) == (0, "")


def test_version_and_help_into_a_closed_pipe():
    for args in (["version"], ["--help"], ["changes", "--help"]):
        result = into_closed_pipe(*args)
        assert (result.returncode, result.stderr) == (0, ""), args


def test_watch_into_a_closed_pipe_ends_at_its_first_line(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    first = scenario.snapshots[0].snapshot_id
    result = into_closed_pipe("watch", scenario.location, "--after", str(first), "--poll")
    assert result.returncode == 0
    assert result.stderr.startswith("watching ") and result.stderr.count("\n") == 1


@pytest.mark.parametrize(("command", "head"), [("changes", "head"), ("scan", "head -1"),
                                             ("plan --format json", "head")])
def test_piped_into_head(corpus, command, head):
    """The issue's own command lines, through a shell: `set -o pipefail` reports the
    command's status."""
    table = corpus.scenarios["mor_partitioned"].location
    name, *rest = command.split()
    result = subprocess.run(["bash", "-o", "pipefail", "-c",
                             f"{MELTWATER} {name} {table} {' '.join(rest)} | {head}"],
                            capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout


def test_a_broken_pipe_elsewhere_is_no_quiet_success(monkeypatch):
    """A BrokenPipeError that is not our stdout's reader going away (a socket of some
    library, say) is a bug to see, not an ending to hide."""
    def command(_args) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(snapshots_run, "cmd_snapshots", command)
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(BrokenPipeError):
        cli_main.main(["snapshots", "/nowhere"])
    assert {s: signal.getsignal(s) for s in previous} == previous
