"""The readers the benchmark compares, each as a zero-argument function returning a row count.

Every peer materialises the whole table as Arrow (or, for Spark, decodes every row) so the
timings compare complete reads; set-up that is not part of a read (connecting DuckDB and
loading its extensions, listing data files for the ceiling) happens before timing.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tables import BenchTables, writer_child_env

WRITER_DIR = Path(__file__).resolve().parent / "writer"
ReadFn = Callable[[], int]


# -- meltwater ---------------------------------------------------------------------------
def _meltwater_scan_function() -> Callable:
    """`meltwater.stream.scan`, whether the package re-exports it or only the module has it."""
    import meltwater.stream

    scan = getattr(meltwater.stream, "scan", None)
    if callable(scan):
        return scan
    from meltwater.stream.engine.scans.scan import scan as module_scan

    return module_scan


def meltwater_reader(location: str) -> ReadFn:
    """meltwater's public API on the table directory: plan, read, apply deletes."""
    scan = _meltwater_scan_function()
    return lambda: scan(location).read_all().num_rows


# -- pyiceberg ---------------------------------------------------------------------------
def pyiceberg_reader(metadata_location: str) -> ReadFn:
    """pyiceberg's own merge-on-read path, from the metadata file (no catalog)."""
    from pyiceberg.table import StaticTable

    return lambda: StaticTable.from_metadata(metadata_location).scan().to_arrow().num_rows


def live_data_files(metadata_location: str) -> list[str]:
    """Local paths of the current snapshot's data files, as pyiceberg plans them."""
    from pyiceberg.table import StaticTable

    tasks = StaticTable.from_metadata(metadata_location).scan().plan_files()
    return [_local_path(task.file.file_path) for task in tasks]


def _local_path(uri: str) -> str:
    for prefix in ("file://", "file:"):
        if uri.startswith(prefix):
            return uri[len(prefix):]
    return uri


# -- raw pyarrow ---------------------------------------------------------------------------
def raw_pyarrow_reader(paths: list[str]) -> ReadFn:
    """The ceiling: the same Parquet files, multi-threaded, no deletes and no Iceberg at all."""
    import pyarrow.dataset as ds

    return lambda: ds.dataset(paths, format="parquet").to_table(use_threads=True).num_rows


# -- DuckDB ---------------------------------------------------------------------------------
def _extension_file(package: str) -> str:
    """The `.duckdb_extension` binary a duckdb-extension-* wheel ships inside its package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is not installed; pip install '.[bench]'")
    root = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(root.rglob("*.duckdb_extension"))
    if not found:
        raise RuntimeError(f"{package} ships no .duckdb_extension file under {root}")
    return str(found[-1])


def duckdb_connection(first: tuple[str, ...] = ()):
    """An offline DuckDB with avro and iceberg loaded from the wheels, never downloaded;
    `first`: more extension packages to load before them (`duckdb_extension_httpfs`)."""
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true",
                                 "autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    for package in (*first, "duckdb_extension_avro", "duckdb_extension_iceberg"):
        con.execute(f"LOAD '{_extension_file(package)}'")
    return con


def duckdb_reader(metadata_location: str) -> ReadFn:
    """DuckDB's `iceberg_scan` on the metadata file, fetched as one Arrow table."""
    con = duckdb_connection()
    query = f"SELECT * FROM iceberg_scan('{metadata_location}')"
    return lambda: con.execute(query).fetch_arrow_table().num_rows


# -- Iceberg Java on Spark 3.5 -------------------------------------------------------------
@dataclass(frozen=True)
class JavaTimings:
    """What the child Spark process measured: timed runs only, start-up reported apart."""

    seconds: list[float]
    rows: int
    startup_seconds: float


def java_spark_read(tables: BenchTables, table: str, repeats: int) -> JavaTimings:
    """Run writer/java_read.py in the writer venv: one JVM, one warm-up, `repeats` timed reads."""
    env = tables.env
    result = subprocess.run(
        [str(env.python), str(WRITER_DIR / "java_read.py"), "--warehouse",
         str(tables.warehouse), "--jars", env.spark_jars(), "--table", table,
         "--repeats", str(repeats)],
        env=writer_child_env(env), capture_output=True, text=True,
    )
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-10:])
        raise RuntimeError(f"java_read.py failed:\n{tail}")
    record = json.loads(result.stdout.strip().splitlines()[-1])
    return JavaTimings(record["seconds"], record["rows"], record["startup_seconds"])
