"""The README's command lines (section "Usage"), run as written against a corpus table.

Every `meltwater ...` line of the section's sh blocks is read from README.md itself, so an
example that stops working, or a new one, is caught here. The README's placeholders stand
for a corpus table (`equality_deletes`, which has identifier fields, as
`--compute-updates` needs): `lake.sales.orders` is that table registered in a SQLite
catalog named `lake` (pyiceberg's SqlCatalog, configured through the
`PYICEBERG_CATALOG__LAKE__*` variables the README's exports set for its REST catalog),
`/warehouse/db/orders` a link to its directory, and the snapshot ids, times and columns
are the table's own. Each command exits 0; `watch` runs until Ctrl-C, which ends it with
status 0 too.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from meltwater.planner.table.table_loading import load_table

MELTWATER = str(Path(sys.executable).parent / "meltwater")
README = Path(__file__).resolve().parent.parent / "README.md"
SCENARIO = "equality_deletes"


def usage_blocks() -> list[list[str]]:
    """The lines of each sh block of the README's Usage section, comments dropped."""
    usage = README.read_text().split("\n## Usage\n", 1)[1].split("\n## ", 1)[0]
    return [[line for line in block.splitlines() if line.strip()]
            for block in re.findall(r"```sh\n(.*?)```", usage, re.DOTALL)]


def examples() -> list[list[str]]:
    """Each `meltwater` command line of the Usage section, as the shell would split it."""
    return [shlex.split(line, comments=True)[1:] for block in usage_blocks() for line in block
            if line.startswith("meltwater ")]


@pytest.fixture(scope="module")
def orders(corpus, tmp_path_factory):
    """What the README's placeholders stand for, and the environment its catalog needs."""
    from pyiceberg.catalog import load_catalog

    scenario = corpus.scenarios[SCENARIO]
    root = tmp_path_factory.mktemp("readme")
    (root / "warehouse" / "db").mkdir(parents=True)
    (root / "warehouse" / "db" / "orders").symlink_to(scenario.location)
    table = load_table(scenario.location)
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db",
               "warehouse": f"file://{root}/catalog-warehouse"}
    sql = load_catalog("lake", **catalog)
    sql.create_namespace("sales")
    sql.register_table(("sales", "orders"), table.metadata_location)
    main = table.metadata.ancestors(table.metadata.current_snapshot_id)[::-1]
    middle = main[len(main) // 2]
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("PYICEBERG_")}
    env.update({f"PYICEBERG_CATALOG__LAKE__{key.upper()}": value
                for key, value in catalog.items()})
    env["PYICEBERG_HOME"] = str(root)  # no ~/.pyiceberg.yaml of the machine's
    placeholders = {
        "/warehouse/db/orders": str(root / "warehouse" / "db" / "orders"),
        "5003": str(middle.snapshot_id),
        "1767225600000": str(middle.timestamp_ms),
        "2026-11-01T00:00:00Z": dt.datetime.fromtimestamp(
            middle.timestamp_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "id > 100": "id > 10",
        "id,total": "id,val",
        "region = 'eu'": "part = 'a'",
        "o.parquet": str(root / "o.parquet"),
    }
    return placeholders, env


def test_the_usage_section_has_the_examples_this_test_expects():
    """The README's catalog block sets the catalog's variables, then runs commands on
    `lake.sales.orders`; the location block runs every command on a location."""
    blocks = usage_blocks()
    assert len(blocks) == 2
    assert all(line.startswith("export PYICEBERG_CATALOG__LAKE__") for line in blocks[0][:3])
    commands = sorted({args[0] for args in examples()})
    assert commands == ["changes", "plan", "scan", "snapshots", "watch"]
    assert len(examples()) >= 11


def _substituted(args: list[str], placeholders: dict[str, str]) -> list[str]:
    args = [placeholders.get(arg, arg) for arg in args]
    leftover = [arg for arg in args if "/warehouse" in arg and not os.path.isabs(arg)]
    assert not leftover, f"a README placeholder this test does not know: {leftover}"
    return args


@pytest.mark.parametrize("args", examples(), ids=lambda args: " ".join(args))
def test_each_readme_example_runs(orders, args):
    placeholders, env = orders
    args = _substituted(args, placeholders)
    if args[0] == "watch":
        process = subprocess.Popen([MELTWATER, *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env)
        try:
            first = process.stderr.readline()  # printed once the table is loaded
            assert first.startswith("watching "), first + process.stderr.read()
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == 0, stderr
        return
    result = subprocess.run([MELTWATER, *args], capture_output=True, text=True, timeout=180,
                            env=env, cwd=Path(placeholders["o.parquet"]).parent)
    assert result.returncode == 0, result.stderr
    if "--output" in args:
        assert Path(args[args.index("--output") + 1]).stat().st_size > 0
    else:
        assert result.stdout


def test_every_placeholder_is_in_the_readme(orders):
    """So that the substitutions above are the README's, not left over from an older one."""
    placeholders, _ = orders
    used = {arg for args in examples() for arg in args}
    assert set(placeholders) <= used, set(placeholders) - used
