"""The engine: reads data files with pyarrow, applies deletes, reconstructs changes.

Also hosts the Spark data source and the snapshot watcher; only the Spark adapter
modules (`spark_*.py`) import pyspark.

The Python API for users without Spark::

    import meltwater.stream
    reader = meltwater.stream.scan("/warehouse/db/events", filter="id > 100")
    plan = meltwater.stream.plan("/warehouse/db/events", filter="id > 100")
    changes = meltwater.stream.changes("/warehouse/db/events", from_snapshot_id=42)

and on Spark (importing this package does not import pyspark; `register` does)::

    meltwater.stream.register(spark)
    df = spark.read.format("meltwater").load("/warehouse/db/events")

or, on one machine, a local session set up as meltwater's service runs one (its Python
processes start from site-packages, not pyspark.zip: see `spark_home`)::

    spark = meltwater.stream.local_session("local[2]")
"""

from meltwater.stream.change_feed import ChangeFeed, change_feed, changes
from meltwater.stream.scan import Plan, plan, read_plan, scan


def register(spark):
    """Register the `meltwater` Spark data source in a session (see `spark_source`)."""
    from meltwater.stream.spark_source import register as register_source

    return register_source(spark)


def local_session(master: str = "local[2]", **kwargs):
    """A local SparkSession with the source registered (see `spark_home.local_session`)."""
    from meltwater.stream.spark_home import local_session as build

    return build(master, **kwargs)


__all__ = ["ChangeFeed", "Plan", "change_feed", "changes", "local_session", "plan", "read_plan",
           "register", "scan"]
