"""The engine: reads data files with pyarrow, applies deletes, reconstructs changes.

Also hosts the Spark data source and the snapshot watcher; only the Spark adapter
modules import pyspark.
"""
