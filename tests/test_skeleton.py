"""The installed layout: one `meltwater` namespace, a working CLI, and the kernel/engine split."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import meltwater.planner


def test_console_script_help_lists_subcommands():
    exe = Path(sys.executable).parent / "meltwater"
    assert exe.exists(), "the meltwater console script is not installed beside python"
    result = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True)
    assert "usage: meltwater" in result.stdout
    assert "version" in result.stdout


def test_cli_without_subcommand_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "meltwater.cli.main"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "COMMAND" in result.stderr


def test_subpackages_share_the_meltwater_namespace():
    import meltwater.sinks
    import meltwater.stream

    for package in (meltwater.planner, meltwater.stream, meltwater.sinks):
        assert package.__name__.startswith("meltwater.")


def test_planner_imports_neither_spark_nor_data_readers():
    """The kernel must stay importable on a machine without Spark or a data reader."""
    modules = [m.name for m in pkgutil.walk_packages(meltwater.planner.__path__,
                                                     "meltwater.planner.")]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r} + ['meltwater.planner']:\n"
        "    importlib.import_module(name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'pyspark'\n"
        "       or m.startswith(('meltwater.stream', 'meltwater.sinks', 'pyarrow.parquet',\n"
        "                        'pyarrow.dataset', 'pyarrow.orc'))]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "", f"planner pulled in: {result.stdout.strip()}"
