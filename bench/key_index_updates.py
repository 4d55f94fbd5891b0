"""How a key index's update cost follows its history (issue 33): many one-file updates, as
a long-running stream adds one commit's files at a time, each file used only once (as the
files a compaction removes are), timed as the index grows.

Usage: .venv/bin/python bench/key_index_updates.py [--updates 3000] [--every 500]

Prints, every --every updates: the median update of the last 100, a fresh reader's first
lookup (it parses the catalog), and the catalog's size. Before 40ca355 the catalog named
every file ever added (3 ms an update at 500, 21 ms at 3,000); files no reader has reached
in `STALE_GENERATIONS` updates now leave it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.stream.engine.keys.index_store import CATALOG, IndexStore
from meltwater.stream.engine.keys.key_index import KeyIndex
from meltwater.stream.engine.keys.key_runs import sorted_run

IDENTITY: dict[str, object] = {"table": "bench", "field_id": 1, "key_type": "int64"}


def data_file(number: int, rows: int) -> DataFile:
    return DataFile(content=FileContent.DATA,
                    file_path=f"/warehouse/db/orders/data/00000-{number}-0123456789ab.parquet",
                    file_format="PARQUET", spec_id=0, partition=(), record_count=rows,
                    file_size_in_bytes=1000 + rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--every", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work)
        index = KeyIndex(IndexStore(directory, dict(IDENTITY)))
        took: list[float] = []
        for number in range(args.updates):
            file = data_file(number, 10)
            run = sorted_run(pa.array(range(number * 10, number * 10 + 10), pa.int64()))
            started = time.perf_counter()
            index.add({file.file_path: (file, run)}, used=[file.file_path])
            took.append(time.perf_counter() - started)
            if (number + 1) % args.every == 0:
                started = time.perf_counter()
                KeyIndex(IndexStore(directory, dict(IDENTITY))).covering(
                    [data_file(n, 10) for n in range(number - 9, number + 1)])
                first_lookup = time.perf_counter() - started
                update = statistics.median(took[-100:]) * 1000
                print(f"{number + 1:6d} updates: update {update:5.1f} ms (median of the last "
                      "100); a fresh reader's first lookup "
                      f"{first_lookup * 1000:5.1f} ms; catalog "
                      f"{(directory / CATALOG).stat().st_size / 1024:6.0f} KiB")


if __name__ == "__main__":
    main()
