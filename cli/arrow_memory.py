"""The allocator Arrow uses in a meltwater command's process.

pyarrow's default memory pool on Linux is mimalloc, which backs its large allocations
with transparent huge pages: the kernel zeroes (and at times compacts) 2 MiB pages as
they are first touched. `meltwater scan --format parquet` of the bench table, run from
cold with each pool, was slower and less steady with mimalloc, most of the difference
system time spent on those pages. jemalloc is
bundled in pyarrow's wheels on Linux and macOS; where it is not built in, the system
allocator is used, which measured between the two.

Arrow has two defaults to set, at two moments:

- its C++ default pool, which the Parquet reader and writer allocate their pages,
  dictionaries and compression buffers from, is read from ARROW_DEFAULT_MEMORY_POOL once,
  when Arrow loads: `choose_arrow_allocator` sets that variable, and must run before
  anything imports pyarrow (the console script's entry, `meltwater.cli.entry`, calls it
  first). Left at mimalloc, those buffers alone cost a scan to Parquet a few per cent of
  its time in runs from cold;
- pyarrow's own default (compute kernels, buffers, the Parquet parts of
  `meltwater.output.parquet_parts`) follows `pa.set_memory_pool`:
  `use_command_memory_pool`, once pyarrow is loaded.

A pool the user chose with ARROW_DEFAULT_MEMORY_POOL is left as it is. Neither function
is for library use: the pool is process-wide, and the variable is inherited by children.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import MutableMapping
from pathlib import Path

CHOICE_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def _pyarrow_has_jemalloc() -> bool:
    """Whether the installed pyarrow was built with jemalloc, told without loading it: its
    wheel ships Arrow's build configuration header (`arrow/util/config.h`)."""
    spec = importlib.util.find_spec("pyarrow")
    if spec is None or not spec.submodule_search_locations:
        return False
    for location in spec.submodule_search_locations:
        config = Path(location) / "include" / "arrow" / "util" / "config.h"
        try:
            text = config.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        return "#define ARROW_JEMALLOC\n" in text
    return False


def choose_arrow_allocator(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Before pyarrow is loaded: make jemalloc Arrow's C++ default pool, unless the user
    chose one or this pyarrow has no jemalloc (Arrow would warn about the variable).
    Returns the pool now chosen, or None to leave Arrow's own default."""
    if environ.get(CHOICE_VARIABLE):
        return environ[CHOICE_VARIABLE]
    if not _pyarrow_has_jemalloc():
        return None
    environ[CHOICE_VARIABLE] = "jemalloc"
    return "jemalloc"


def use_command_memory_pool() -> str:
    """Make jemalloc (else the system allocator) pyarrow's default pool, unless
    ARROW_DEFAULT_MEMORY_POOL chose one; returns the pool's name."""
    import pyarrow as pa

    if os.environ.get(CHOICE_VARIABLE):
        return pa.default_memory_pool().backend_name
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)
    return pool.backend_name
