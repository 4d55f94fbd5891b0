"""A command imports what it uses: `meltwater --version`, `--help` and each command's
`--help` build the parsers and print, loading neither Arrow, numpy, the planner's table
loading nor Spark (they were 0.33 s of every such process). Each case is a process of its
own, as the console script runs, with `-X importtime` naming what it loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

ENTRY = ("import sys; "
         "sys.argv = ['meltwater', *sys.argv[1:]]; "
         "from meltwater.cli.entry import main; sys.exit(main())")
# What only reading a table needs.
HEAVY = ("pyarrow", "numpy", "pandas", "pyspark", "fastavro",
         "meltwater.planner.table.table_loading", "meltwater.stream.engine.scans.scan")


def _loaded(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", ENTRY, *args],
                            capture_output=True, text=True, timeout=300)
    modules = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    return result, modules


@pytest.mark.parametrize("args", [
    ("--version",), ("--help",), ("version",), ("snapshots", "--help"), ("scan", "--help"),
    ("plan", "--help"), ("changes", "--help"), ("watch", "--help"), ("serve", "--help"),
])
def test_asking_about_the_command_loads_no_reader(args):
    result, modules = _loaded(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip(), "it printed nothing"
    assert "meltwater.cli.main" in modules  # the listing is real: the CLI itself is in it
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY)
    assert heavy == [], f"meltwater {' '.join(args)} loaded {heavy}"


def test_a_command_that_reads_loads_its_handler_and_arrow(tmp_path):
    """The other side: a reading command resolves its handler module when it runs (a
    refusal of the missing table is still one line, status 2)."""
    result, modules = _loaded("scan", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert said == [f"meltwater: {tmp_path / 'nowhere'}: not an Iceberg table "
                    "(no metadata/*.metadata.json)"]
    # (`-X importtime` does not list a module importlib.import_module loads, as the
    # handler's is: what it imports shows it ran)
    assert {"meltwater.stream.engine.scans.scan", "pyarrow"} <= modules
