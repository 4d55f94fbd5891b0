"""The console script's one-shot commands never load pandas or numpy
(`meltwater.cli.import_guard`): pyarrow would import numpy as it loads and pandas to ask
whether a Python list is a pandas Series, 0.3 s of a command's start. Each case runs in a
process of its own: the guard is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ENTRY = ("import sys; "
         "sys.argv = ['meltwater', *sys.argv[1:]]; "
         "from meltwater.cli.entry import main; sys.exit(main())")


def _python(code: str, *args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-c", code, *args], capture_output=True,
                          text=True, timeout=300)


def _loaded(stderr: str) -> set[str]:
    """Modules `-X importtime` reports as imported (a refused import is reported too, so
    pandas's own submodules tell whether it loaded)."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_pyarrow_finds_neither_pandas_nor_numpy_once_guarded() -> None:
    result = _python(
        "import sys\n"
        "from meltwater.cli.import_guard import keep_pandas_and_numpy_out\n"
        "assert keep_pandas_and_numpy_out()\n"
        "import pyarrow as pa\n"
        "assert pa.array([1, 2]).to_pylist() == [1, 2]\n"
        "print('pandas' in sys.modules, 'numpy' in sys.modules)\n"
        "for name in ('pandas', 'numpy.linalg'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ImportError as error:\n"
        "        print(error)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "False False",
        "pandas is not loaded by meltwater's one-shot commands (see meltwater.cli.import_guard)",
        "numpy is not loaded by meltwater's one-shot commands (see meltwater.cli.import_guard)"]


def test_a_process_that_loaded_pandas_keeps_it() -> None:
    pytest.importorskip("pandas")
    result = _python("import pandas, pyarrow as pa\n"
                     "from meltwater.cli.import_guard import keep_pandas_and_numpy_out\n"
                     "print(keep_pandas_and_numpy_out(),\n"
                     "      pa.array(pandas.Series([1])).to_pylist())\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "[1]"]


def test_a_change_read_from_the_console_script_loads_no_pandas_nor_numpy(corpus) -> None:
    pytest.importorskip("pandas")  # where pandas is not installed there is nothing to keep out
    location = corpus.scenarios["equality_deletes"].location
    read = _python(ENTRY, "changes", str(location), "--format", "jsonl", importtime=True)
    assert read.returncode == 0, read.stderr[-2000:]
    rows = [json.loads(line) for line in read.stdout.splitlines()]
    assert {r["_change_type"] for r in rows} >= {"INSERT", "DELETE"}
    loaded = _loaded(read.stderr)
    assert "pyarrow.lib" in loaded  # the report covers the command's imports
    assert not {m for m in loaded if m.startswith(("pandas.", "numpy."))}
    # the same read in-process (a test, a notebook) leaves pandas importable
    ordinary = _python("import sys; from meltwater.cli.main import main; "
                       "main(sys.argv[1:]); import pandas",
                       "changes", str(location), "--format", "jsonl")
    assert ordinary.returncode == 0, ordinary.stderr[-2000:]
    assert ordinary.stdout == read.stdout
