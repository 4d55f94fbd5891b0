"""The installed layout: one `meltwater` namespace, a working CLI, and the kernel/engine split."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import meltwater.planner

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_FOLDERS = ("planner", "stream", "output", "sinks", "service", "cli")


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


def _product_packages() -> list[str]:
    """Every folder of the product holding an `__init__.py`, as a relative path
    (`stream/watch`): each is meant to be the subpackage `meltwater.stream.watch`."""
    return sorted(str(init.parent.relative_to(ROOT)) for folder in PRODUCT_FOLDERS
                  for init in (ROOT / folder).rglob("__init__.py"))


def test_every_product_folder_is_a_subpackage_of_the_meltwater_namespace():
    """pyproject.toml maps each folder to `meltwater.<folder>` (`meltwater` itself is a
    namespace package, so nothing generic lands in site-packages): the wheel ships every
    package folder, and the installed `meltwater.*` are this checkout's folders."""
    import meltwater

    assert getattr(meltwater, "__file__", None) is None, "meltwater is a namespace package"
    folders = _product_packages()
    assert len(folders) >= 9  # planner, stream and its three, output, sinks, service, cli
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {name: setuptools["package-dir"].get(name) for name in setuptools["packages"]}
    assert mapped == {"meltwater." + f.replace("/", "."): f for f in folders}
    for folder in folders:
        package = importlib.import_module("meltwater." + folder.replace("/", "."))
        assert Path(package.__file__).resolve() == ROOT / folder / "__init__.py"


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
