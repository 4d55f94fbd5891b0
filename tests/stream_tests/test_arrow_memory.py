"""A command's process allocates through jemalloc (else the system allocator), unless the
user chose Arrow's pool with ARROW_DEFAULT_MEMORY_POOL. Each case runs in a process of its
own: the pool is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

PROBE = ("import pyarrow as pa; "
         "from meltwater.stream.engine.arrow_memory import use_command_memory_pool; "
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
