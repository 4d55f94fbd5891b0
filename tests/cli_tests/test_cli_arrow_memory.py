"""A command's process allocates through jemalloc (else the system allocator), unless the
user chose Arrow's pool with ARROW_DEFAULT_MEMORY_POOL: pyarrow's own default, and Arrow's
C++ default, which the console script chooses before Arrow loads. Each case runs in a
process of its own: the pool is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from meltwater.cli import arrow_memory

PROBE = ("import pyarrow as pa; "
         "from meltwater.cli.arrow_memory import use_command_memory_pool; "
         "chosen = use_command_memory_pool(); "
         "print(chosen, pa.default_memory_pool().backend_name)")


def _probe(**env: str) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env={**environment, **env}, check=True)
    return result.stdout.split()


def _has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def test_a_command_allocates_through_jemalloc_or_the_system_allocator() -> None:
    expected = "jemalloc" if _has_jemalloc() else "system"
    assert _probe() == [expected, expected]


@pytest.mark.parametrize("pool", ["mimalloc", "system"])
def test_a_pool_the_user_chose_is_kept(pool: str) -> None:
    assert _probe(ARROW_DEFAULT_MEMORY_POOL=pool) == [pool, pool]


CPP_PROBE = ("from meltwater.cli.arrow_memory import choose_arrow_allocator; "
             "chosen = choose_arrow_allocator(); "
             "import pyarrow as pa; "
             "print(chosen, pa.default_memory_pool().backend_name)")


def _run(code: str, **env: str) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**environment, **env}, check=True)
    assert result.stderr == ""  # Arrow warns about a pool it cannot give
    return result.stdout.split()


def test_the_choice_made_before_arrow_loads_is_arrows_cpp_default() -> None:
    expected = ["jemalloc", "jemalloc"] if _has_jemalloc() else ["None", "mimalloc"]
    assert _run(CPP_PROBE) == expected
    assert _run(CPP_PROBE, ARROW_DEFAULT_MEMORY_POOL="system") == ["system", "system"]


def test_the_console_script_entry_loads_no_arrow_before_choosing() -> None:
    assert _run("import sys, meltwater.cli.entry; print('pyarrow' in sys.modules)") == [
        "False"]


def test_jemalloc_is_told_from_the_build_header_as_arrow_itself_tells_it() -> None:
    assert arrow_memory._pyarrow_has_jemalloc() == _has_jemalloc()


def test_no_jemalloc_in_the_build_leaves_arrows_default(monkeypatch) -> None:
    monkeypatch.setattr(arrow_memory, "_pyarrow_has_jemalloc", lambda: False)
    environ: dict[str, str] = {}
    assert arrow_memory.choose_arrow_allocator(environ) is None
    assert environ == {}
    monkeypatch.setattr(arrow_memory, "_pyarrow_has_jemalloc", lambda: True)
    assert arrow_memory.choose_arrow_allocator(environ) == "jemalloc"
    assert environ == {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    chosen = {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}
    assert arrow_memory.choose_arrow_allocator(chosen) == "mimalloc"
    assert chosen == {"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}
