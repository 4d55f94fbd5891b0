"""Planning the current snapshot of a table with hundreds of manifests, cold caches.

Both planners get a table already loaded (metadata JSON parsing is not planning) and an
empty manifest cache before every timed run, so each run reads the manifest list and every
manifest from disk and builds the delete index, as a first scan of a snapshot would.
"""

from __future__ import annotations

from timing import Measurement, Peer, RunFn, measure


def _meltwater_table(location: str):
    from meltwater.planner.table.table_loading import load_table

    return load_table(location)


def _meltwater_planner(location: str) -> RunFn:
    from meltwater.planner.scans.scan import TableScan

    table = _meltwater_table(location)
    return lambda: len(TableScan(table).plan_files())


def _clear_meltwater_cache() -> None:
    from meltwater.planner.table.manifests import MANIFEST_CACHE

    MANIFEST_CACHE.clear()


def _pyiceberg_planner(metadata_location: str) -> RunFn:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    return lambda: len(table.scan().plan_files())


def _clear_pyiceberg_cache() -> None:
    from pyiceberg.manifest import clear_manifest_cache

    clear_manifest_cache()


def time_planning(location: str, metadata_location: str, repeats: int) -> list[Measurement]:
    """meltwater's `TableScan.plan_files()` against pyiceberg's `scan().plan_files()`."""
    return measure([
        Peer("meltwater", "TableScan(load_table(location)).plan_files()",
             lambda: _meltwater_planner(location), _clear_meltwater_cache),
        Peer("pyiceberg", "StaticTable.from_metadata(m).scan().plan_files()",
             lambda: _pyiceberg_planner(metadata_location), _clear_pyiceberg_cache),
    ], repeats)


def delete_matches(location: str, metadata_location: str) -> dict[str, int | str]:
    """How many (data file, delete file) pairs each planner found; they must agree."""
    out: dict[str, int | str] = {}
    try:
        from meltwater.planner.scans.scan import TableScan

        tasks = TableScan(_meltwater_table(location)).plan_files()
        out["meltwater"] = sum(len(t.deletes) for t in tasks)
    except Exception as error:  # reported beside the timings
        out["meltwater"] = f"error: {error}"
    from pyiceberg.table import StaticTable

    tasks = StaticTable.from_metadata(metadata_location).scan().plan_files()
    out["pyiceberg"] = sum(len(t.delete_files) for t in tasks)
    return out
