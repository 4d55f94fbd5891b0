"""Spark's JVM (pyspark's py4j gateway), started in a session of its own.

Supervisors often stop a service by signalling its whole process group (a shell's job
control, `timeout`, supervisord's `stopasgroup`, `kill -TERM -PGID`). pyspark starts the
JVM in its caller's group, so SIGTERM reached the JVM and Spark's Python workers too: they
died mid-batch and `meltwater serve`, finding its JVM gone, exited 1 with py4j errors.
Started apart (`start_new_session`), the JVM and the Python workers it starts are out of the
group; SIGTERM reaches only the caller, which can let the batch finish and stop them. The
JVM still ends with the caller however it ends: pyspark's gateway exits when its stdin, a
pipe from the caller, closes. (systemd's default `KillMode=control-group` signals every
process of the unit, whatever its group: the unit in deploy/systemd says `KillMode=mixed`.)

`start_jvm_apart` starts it the way `SparkSession.builder.getOrCreate()` would, with the
same settings, and installs the gateway where pyspark looks for it (`SparkContext._gateway`
and `_jvm`), so the session built next uses it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from meltwater.stream.errors import SparkStartError


class JvmOutput(Protocol):
    """Where the JVM's stdout and stderr go (the service's `SparkOutput`)."""

    log_path: Path | None  # where the rest of what it printed is, if anywhere

    def streams(self) -> dict[str, Any]:
        """`Popen` arguments (`stdout`, `stderr`) to start the JVM with."""
        ...

    def started(self) -> None:
        """Called once the JVM is started, or failed to start."""
        ...

    def last_line(self) -> str | None:
        """The last line the JVM printed that says why it exited; None if none."""
        ...


def start_jvm_apart(conf: Mapping[str, str], master: str | None,
                    output: JvmOutput | None = None) -> bool:
    """Start Spark's JVM in a session of its own (see the module doc) with the settings
    `conf`; False if there is nothing to start (spark-submit started this process from its
    JVM, or a session exists already). For a local `master` its Python processes import the
    installed pyspark (`session.use_local_spark_home`).

    The JVM's stdout and stderr go to `output` (inherited without one); a JVM that exits
    while starting is a SparkStartError naming its last words and where the rest is.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    from meltwater.stream.spark.session import use_local_spark_home

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return False
        use_local_spark_home(master)
        spark_conf = SparkConf()
        for key, value in conf.items():
            spark_conf.set(key, value)
        streams = output.streams() if output is not None else {}
        try:
            gateway = launch_gateway(spark_conf,
                                     popen_kwargs={"start_new_session": True, **streams})
        except PySparkRuntimeError as error:
            raise SparkStartError(_start_failure(error, output)) from None
        finally:
            if output is not None:
                output.started()
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
    return True


def _start_failure(error: Exception, output: JvmOutput | None) -> str:
    """One line for a JVM that exited while starting: its last words, and where the rest
    is."""
    said = output.last_line() if output is not None else None
    where = "" if output is None or output.log_path is None else \
        f" (its output: {output.log_path})"
    return (f"Spark's JVM exited while starting: {said or str(error).splitlines()[0]}"
            f"{where}")


__all__ = ["JvmOutput", "start_jvm_apart"]
