"""Row and change streams from Iceberg tables: the engine, the watcher, the Spark source.

Three subpackages, each importing only those before it:

- `engine/`: data and delete files in, Arrow batches of rows or changes out (decoding,
  field-id projection, deletes, change reconstruction);
- `watch/`: following a table over time (the snapshot watcher, the change stream);
- `spark/`: the `format("meltwater")` data source and the rest of the Spark adapter, the
  only code that imports pyspark.

The Python API for users without Spark::

    import meltwater.stream
    reader = meltwater.stream.scan("/warehouse/db/events", filter="id > 100")
    plan = meltwater.stream.plan("/warehouse/db/events", filter="id > 100")
    changes = meltwater.stream.changes("/warehouse/db/events", from_snapshot_id=42)

and on Spark (importing this package does not import pyspark; `register` does)::

    meltwater.stream.register(spark)
    df = spark.read.format("meltwater").load("/warehouse/db/events")

or, on one machine, a local session set up as meltwater's service runs one (its Python
processes start from site-packages, not pyspark.zip: see `spark.session`)::

    spark = meltwater.stream.local_session("local[2]")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meltwater.stream.engine.changes.change_feed import (
        ChangeFeed,
        change_feed,
        changes,
        range_request,
    )
    from meltwater.stream.engine.scans.scan import Plan, plan, read_plan, scan

# The API's names, each loaded from its module on first use (PEP 562): importing one
# engine module (the CLI's `scan` imports a few) does not load the change feed and the
# incremental planner too, which every command's start-up would pay.
_LAZY = {
    "ChangeFeed": "meltwater.stream.engine.changes.change_feed",
    "change_feed": "meltwater.stream.engine.changes.change_feed",
    "changes": "meltwater.stream.engine.changes.change_feed",
    "range_request": "meltwater.stream.engine.changes.change_feed",
    "Plan": "meltwater.stream.engine.scans.scan",
    "plan": "meltwater.stream.engine.scans.scan",
    "read_plan": "meltwater.stream.engine.scans.scan",
    "scan": "meltwater.stream.engine.scans.scan",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def register(spark):
    """Register the `meltwater` Spark data source in a session (see `spark.source`)."""
    from meltwater.stream.spark.source import register as register_source

    return register_source(spark)


def local_session(master: str = "local[2]", **kwargs):
    """A local SparkSession with the source registered (see `spark.session.local_session`)."""
    from meltwater.stream.spark.session import local_session as build

    return build(master, **kwargs)


__all__ = ["ChangeFeed", "Plan", "change_feed", "changes", "local_session", "plan",
           "range_request", "read_plan", "register", "scan"]
