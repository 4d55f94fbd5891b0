"""A SPARK_HOME for local Spark whose Python processes start in a third of the time.

A pip-installed pyspark is its own SPARK_HOME, and Spark puts
`$SPARK_HOME/python/lib/pyspark.zip` first on the `PYTHONPATH` of every Python process it
starts. zipimport never caches bytecode, so each such process compiles pyspark's modules
again before it does anything, several times what importing the same pyspark from
site-packages takes (bench/README.md, "Where meltwater's time goes"). Spark starts a fresh,
unpooled process for each Python streaming source, so every streaming query, and every
`Trigger.AvailableNow` job, pays it.

`local_spark_home()` is a directory of symlinks to the installed pyspark without its
`python/` folder: Spark finds its jars and scripts there, the zip paths it adds name no file
and are skipped, and its Python processes import the installed pyspark (with its bytecode
cache) instead. That is right only where those processes run the driver's interpreter with
the same site-packages, i.e. local and local-cluster masters on this machine, which is the
only place meltwater uses it. `local_session()` builds such a session; pyspark is imported
only inside it. `configured_session()` is the other kind `meltwater serve` runs in: the one
spark-submit configured. `quiet_spark_logs()` turns down what Spark reports on its own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from meltwater.stream.engine.local_cache import cache_root

# Settings every local session of meltwater's gets unless its caller sets them otherwise.
# Python workers (and a streaming source's per-query process) send Arrow batches to the JVM
# over a Unix domain socket instead of TCP on loopback: about 7% less time per micro-batch
# of the streaming benchmark (bench/README.md). Spark's default is TCP.
LOCAL_SESSION_CONF: dict[str, str] = (
    {"spark.python.unix.domain.socket.enabled": "true"} if os.name == "posix" else {})


def local_spark_home() -> str | None:
    """The SPARK_HOME to use for a local master, or None to keep Spark's own.

    None when SPARK_HOME is set already (the user's choice wins), when pyspark is not a pip
    install with `python/lib/pyspark.zip`, or when the directory cannot be made.
    """
    if os.environ.get("SPARK_HOME"):
        return None
    import pyspark

    source = Path(pyspark.__file__).resolve().parent
    if not (source / "python" / "lib" / "pyspark.zip").exists():
        return None
    key = hashlib.sha256(f"{source}:{pyspark.__version__}".encode()).hexdigest()[:12]
    home = cache_root() / f"spark-home-{key}"
    if (home / "jars").exists():
        return str(home)
    try:
        home.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".spark-home-", dir=home.parent))
        for entry in source.iterdir():
            if entry.name != "python" and not entry.name.startswith("__"):
                (staging / entry.name).symlink_to(entry)
        try:
            staging.rename(home)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
    except OSError:
        return None
    return str(home) if (home / "jars").exists() else None


def use_local_spark_home(master: str | None) -> str | None:
    """Point SPARK_HOME at `local_spark_home()` before a local session's JVM starts."""
    if master is None or not master.startswith("local"):  # local[N] and local-cluster
        return None
    home = local_spark_home()
    if home is not None:
        os.environ["SPARK_HOME"] = home
    return home


def local_session(master: str = "local[2]", app_name: str = "meltwater",
                  conf: dict[str, str] | None = None) -> Any:
    """A local SparkSession ready for `format("meltwater")`, the way meltwater runs its own.

    Spark's Python processes run this interpreter (`PYSPARK_PYTHON`, as Spark requires of a
    driver and its workers), they import the installed pyspark rather than pyspark.zip
    (`use_local_spark_home`), they talk to the JVM over Unix domain sockets
    (`LOCAL_SESSION_CONF`), and the source is registered. Must be called before any other
    SparkSession starts in this process (SPARK_HOME is read when the JVM starts).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    use_local_spark_home(master)
    from pyspark.sql import SparkSession

    from meltwater.stream.spark.source import register

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"]))
    for key, value in {**LOCAL_SESSION_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def configured_session(app_name: str = "meltwater", conf: dict[str, str] | None = None) -> Any:
    """The SparkSession spark-submit configured (its master, its settings), with `conf` on
    top and the source registered."""
    from pyspark.sql import SparkSession

    from meltwater.stream.spark.source import register

    builder = SparkSession.builder.appName(app_name)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def quiet_spark_logs(spark: Any) -> None:
    """Spark's own log at WARN, and pyspark's loggers of every AnalysisException it converts
    (JSON lines of their own on stderr, handled or not) off: a caller that reports failures
    itself, as the service does, would have them said twice."""
    from pyspark.logger import PySparkLogger

    spark.sparkContext.setLogLevel("WARN")
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)
