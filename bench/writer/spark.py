"""The SparkSession both writer-side bench scripts use: Iceberg 1.10.2 on Spark 3.5.

Runs inside the writer virtualenv only (pyspark 3.5). The Hadoop catalog keeps every table
as a plain directory, so the Python peers can read the same tables by path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CATALOG = "bench"
NAMESPACE = "db"
SCAN_TABLE = "scan_mor"
PLAN_TABLE = "plan_many_manifests"


def ident(name: str) -> str:
    """The Spark identifier of a bench table."""
    return f"{CATALOG}.{NAMESPACE}.{name}"


def spark_session(warehouse: Path, jars: str, app: str) -> Any:
    """Two local cores and a 4g driver: the machine the issue's figures were measured on."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", jars)
        .config("spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", str(warehouse))
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
