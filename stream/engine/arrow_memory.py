"""The allocator Arrow uses in a meltwater command's process.

pyarrow's default memory pool on Linux is mimalloc, which backs its large allocations
with transparent huge pages: the kernel zeroes (and at times compacts) 2 MiB pages as
they are first touched. `meltwater scan --format parquet` of the 5M-row bench table, run
6 times each from cold with each pool, took 1.47-2.15 s with mimalloc (1.95 s of system
time at worst) and 1.33-1.42 s with jemalloc (0.33-0.54 s of system time). jemalloc is
bundled in pyarrow's wheels on Linux and macOS; where it is not built in, the system
allocator is used, which measured between the two.

`pa.set_memory_pool` governs what pyarrow allocates (compute kernels, buffers, the
Parquet parts of `parquet_parts`); Arrow's own C++ defaults (the Parquet reader and
writer) follow ARROW_DEFAULT_MEMORY_POOL only, read when Arrow loads. A pool chosen with
that variable is left as it is.
"""

from __future__ import annotations

import os

import pyarrow as pa

CHOICE_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def use_command_memory_pool() -> str:
    """Make jemalloc (else the system allocator) Arrow's default pool, unless the user
    chose one; returns the pool's name."""
    if os.environ.get(CHOICE_VARIABLE):
        return pa.default_memory_pool().backend_name
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)
    return pool.backend_name
