"""Spark Connect clients: the source runs in the server's Python, which must have meltwater.

With a Spark Connect client (`SparkSession.builder.remote(...)`, or the pure-Python
`pyspark-client`), `register` sends the data source class to the server by reference
(pickled as `meltwater.stream.spark.source.MeltwaterDataSource`), and every read runs
meltwater in the server's Python processes: planning in one on the server's driver, the
partitions in its executors'. A server whose Python lacks meltwater accepts the
registration and fails each read later, deep in Spark's PYTHON_DATA_SOURCE_ERROR, with
`ModuleNotFoundError: No module named 'meltwater'`; one whose Python is another minor
version than the client's cannot run the client's pickled Python code at all.

So `check_server` asks the server first, when `register` is given a Connect session: one
Python UDF (pickled by value: it needs nothing but Python itself) reports which Python the
server runs and whether that Python imports meltwater's data source. A server that cannot
serve meltwater is a `ConnectServerError` of one line naming the fix. The check costs one
small Spark job at registration (a second or two); classic sessions are not checked, their
driver being this process.
"""

from __future__ import annotations

import sys
from typing import Any

from meltwater.planner.errors import MeltwaterError

SOURCE_MODULE = "meltwater.stream.spark.source"


class ConnectServerError(MeltwaterError):
    """The Spark Connect server cannot run meltwater's data source (and says what to do)."""


def is_connect_session(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect client session (not a classic, JVM-backed one)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def _server_python(spark: Any) -> list[str]:
    """[python version, interpreter path, 'yes' or the import error] from one of the
    server's Python workers."""
    from pyspark.sql.functions import udf
    from pyspark.sql.types import ArrayType, StringType

    module = SOURCE_MODULE

    def probe(_: Any) -> list[str]:  # nested, so pickled by value (no meltwater import)
        import importlib
        import sys as worker_sys

        try:
            importlib.import_module(module)
            found = "yes"
        except Exception as error:  # noqa: BLE001 - reported to the client, whatever it is
            found = f"{type(error).__name__}: {error}"
        version = f"{worker_sys.version_info[0]}.{worker_sys.version_info[1]}"
        return [version, worker_sys.executable, found]

    row = spark.range(1).select(udf(probe, ArrayType(StringType()), useArrow=False)("id")) \
        .first()
    return list(row[0])


def check_server(spark: Any) -> None:
    """Raise ConnectServerError unless the Connect server's Python imports meltwater's data
    source (see the module doc)."""
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        version, executable, found = _server_python(spark)
    except Exception as error:
        text = str(error)
        if "PYTHON_VERSION_MISMATCH" in text or "different version" in text:
            raise ConnectServerError(
                f"the Spark Connect server runs its Python code on another Python than this "
                f"client's {ours}: Spark runs a client's code only on the same minor version; "
                f"point the server's spark.pyspark.python at a Python {ours} with meltwater "
                "installed") from error
        raise
    if found != "yes":
        raise ConnectServerError(
            f"the Spark Connect server's Python ({executable}, Python {version}) cannot import "
            f"meltwater ({found}): install meltwater there, the same version as this client's, "
            "or point the server's spark.pyspark.python at a Python that has it")
