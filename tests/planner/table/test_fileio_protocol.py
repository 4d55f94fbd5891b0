"""`FileIO.properties` is part of the protocol (as are `resolve` and `is_local`, which
readers call without probing for them): a FileIO that cannot say the properties it
reads with fails the type check, instead of shipping no credentials to Spark's executors.

The check is mypy's, so the test runs mypy (as `make typecheck` does, on the planner as
`meltwater.planner`) on a caller passing two FileIOs to `load_table`: one without
`properties`, refused, and one with them, accepted. That the properties then reach a
Spark partition is tests/test_catalog_tables.py's vended-credentials test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CALLER = '''\
from typing import Any

from meltwater.planner.table.table_loading import load_table


class BareIO:
    def open_input(self, location: str) -> Any: ...
    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        return b""
    def exists(self, location: str) -> bool:
        return True
    def list_dir(self, location: str) -> list[str]:
        return []
    def resolve(self, location: str) -> None:
        return None
    def is_local(self, location: str) -> bool:
        return True


class PropertiedIO(BareIO):
    def __init__(self) -> None:
        self.properties = {"s3.endpoint": "http://store"}


load_table("/warehouse/t", BareIO())  # line 25
load_table("/warehouse/t", PropertiedIO())
'''


def test_a_file_io_without_properties_fails_the_type_check(tmp_path):
    tree = tmp_path / "typecheck" / "meltwater"
    tree.mkdir(parents=True)
    (tree / "planner").symlink_to(ROOT / "planner")
    (tmp_path / "caller.py").write_text(CALLER)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-version", "3.10", "--follow-imports=silent",
         "--ignore-missing-imports", "--cache-dir", str(tmp_path / "cache"), "caller.py"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(tmp_path / "typecheck")},
        capture_output=True, text=True, timeout=600)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["25"], result.stdout
    assert '"BareIO" is missing following "FileIO" protocol member' in result.stdout
    assert re.search(r"^caller\.py:25: note:\s+properties$", result.stdout, re.M), result.stdout
