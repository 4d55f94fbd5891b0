"""`meltwater serve`: run a configuration's pipelines until SIGTERM or SIGINT.

Order matters for the promises the service makes:
1. everything that can be checked without starting is checked first (`preflight`): a bad
   table, sink or key is one line and exit status 2, before Spark or a database is touched;
2. then the HTTP status server, the SparkSession and one streaming query per pipeline;
3. the loop folds each query's progress into metrics, health and the progress line, and
   restarts a failed query from its checkpoint with backoff when the failure may heal; one
   that cannot (`meltwater.service.failures`) stops its pipeline, `/health` says why;
4. on SIGTERM/SIGINT each running batch may finish (up to `shutdown-timeout`), the queries
   stop, and the process exits 0. A kill -9 instead loses nothing either: the next start
   resumes from the checkpoint, and the sinks skip a batch they already hold.

Exit statuses: 0 after a stop that was asked for, or when every pipeline is available-now
and all finished; 2 for a bad configuration, or when available-now pipelines ended with
one failed for good (restarting will not help: the systemd unit does not); 1 when the
Spark session became unusable, for the supervisor to start a fresh process.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from meltwater.planner.change_range import resolve_start
from meltwater.planner.errors import MeltwaterError
from meltwater.planner.metadata import Table, load_table
from meltwater.service.config import AVAILABLE_NOW, ConfigError, PipelineConfig, ServiceConfig
from meltwater.service.failures import Action
from meltwater.service.logs import fields, setup_logging
from meltwater.service.metrics import (
    Health,
    ServiceMetrics,
    StatusServer,
    check_listen,
    exposure_warning,
)
from meltwater.service.pipeline import PipelineRun
from meltwater.service.progress import ProgressDisplay
from meltwater.service.table_head import TableHead
from meltwater.sinks.kinds import sink_kind

log = logging.getLogger("meltwater.service")
TICK_S = 0.5
EXIT_OK = 0
EXIT_SPARK_UNUSABLE = 1
EXIT_PIPELINE_FAILED = 2


def preflight(config: ServiceConfig) -> list[str]:
    """Check what can be checked without starting anything or changing anything (`serve
    --check` runs only this): raise ConfigError naming the key; the warnings to give."""
    warnings = []
    if config.http_host is not None:
        where = f"{config.source}: service.http"
        try:
            check_listen(config.http_host, config.http_port)
        except OSError as error:
            raise ConfigError(f"{where}: cannot listen on {config.http_host}:"
                              f"{config.http_port} ({_os_reason(error)})") from None
        warning = exposure_warning(config.http_host, config.http_port)
        if warning is not None:
            warnings.append(f"{where}: {warning}")
    for index, pipeline in enumerate(config.pipelines):
        where = f"{config.source}: pipelines[{index}]"
        try:
            table = load_table(pipeline.table_source)
        except MeltwaterError as error:
            raise ConfigError(f"{where}.table: {error}") from None
        checkpoint = _local_path(pipeline.checkpoint)
        if checkpoint is not None:
            problem = _uncreatable(checkpoint)
            if problem is not None:
                raise ConfigError(f"{where}.checkpoint: {problem}")
            if not _has_offsets(checkpoint):
                _check_start(pipeline, table, f"{where}.options")
        check = sink_kind(pipeline.sink.type).check
        if check is not None:
            try:
                check(pipeline.sink.options, pipeline.sink_placement)
            except MeltwaterError as error:
                raise ConfigError(f"{where}.sink: {error}") from None
    return warnings


def _os_reason(error: OSError) -> str:
    return error.strerror or str(error)


def _local_path(location: str) -> Path | None:
    """A checkpoint location on this machine's file system (a path or a file: URI); None
    for a remote one (s3://, hdfs://, ...), which is not checked."""
    if location.startswith("file:"):
        return Path(unquote(urlsplit(location).path)).expanduser()
    if "://" in location:
        return None
    return Path(location).expanduser()


def _has_offsets(checkpoint: Path) -> bool:
    """Whether a query has run from this checkpoint (Spark's `offsets/N` files): it resumes
    there, and the pipeline's start options no longer matter."""
    offsets = checkpoint / "offsets"
    try:
        return any(entry.name.isdigit() for entry in offsets.iterdir())
    except OSError:
        return False


def _check_start(pipeline: PipelineConfig, table: Table, where: str) -> None:
    """Resolve where a new query of the pipeline starts, as its stream will (an unknown or
    expired start snapshot, a start off the table's lineage fail here, not at the start)."""
    from meltwater.stream.spark.options import stream_read

    read = stream_read({**pipeline.source_options, "path": pipeline.table})
    if read.start is None:
        return
    try:
        resolve_start(table, read.start, skip_expired=read.skip_expired)
    except MeltwaterError as error:
        raise ConfigError(f"{where}: {error}") from None


def _uncreatable(path: Path) -> str | None:
    """Why the directory `path` could not be created (or used), judged without creating
    anything: `--check` changes nothing on disk. None when it can be."""
    path = path.resolve()
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else f"{path} is not writable"
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create {path}: {ancestor} is a file"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create {path}: {ancestor} is not writable"
    return None


def spark_session(config: ServiceConfig) -> Any:
    """The service's SparkSession: a local one for a configured master (as
    `meltwater.stream.local_session` builds it), else the one spark-submit configured.
    Either way its JVM, when this process starts it, runs apart (`start_jvm_apart`)."""
    conf = {"spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "60s"}
    if config.spark_master:
        from meltwater.stream.spark.session import LOCAL_SESSION_CONF, local_session

        conf["spark.sql.shuffle.partitions"] = "2"
        conf.update(config.spark_conf)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        start_jvm_apart({"spark.master": config.spark_master, "spark.app.name": "meltwater",
                         "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
                         **LOCAL_SESSION_CONF, **conf}, config.spark_master)
        spark = local_session(config.spark_master, "meltwater", conf)
    else:
        from pyspark.sql import SparkSession

        from meltwater.stream.spark.source import register

        conf.update(config.spark_conf)
        start_jvm_apart({"spark.app.name": "meltwater", **conf}, None)
        builder = SparkSession.builder.appName("meltwater")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        register(spark)
    spark.sparkContext.setLogLevel("WARN")
    _quiet_pyspark_loggers()
    return spark


def start_jvm_apart(conf: dict[str, str], master: str | None) -> bool:
    """Start Spark's JVM (pyspark's gateway) in a session of its own, with the settings
    `SparkSession.builder.getOrCreate()` would start it with; False if there is nothing to
    start (spark-submit started this process from its JVM, or a session exists already).

    Supervisors often stop a service by signalling its whole process group (a shell's job
    control, `timeout`, supervisord's `stopasgroup`, `kill -TERM -PGID`). pyspark starts
    the JVM in the service's group, so SIGTERM reached the JVM and Spark's Python workers
    too: they died mid-batch and the service, finding its JVM gone, exited 1 with py4j
    errors. Started apart, the JVM and the Python workers it starts are out of the group;
    SIGTERM reaches only this process, which lets the batch finish and stops them
    (`Service.shutdown`). The JVM still ends with this process however it ends: pyspark's
    gateway exits when its stdin, a pipe from this process, closes. (systemd's default
    `KillMode=control-group` signals every process of the unit, whatever its group: the
    unit in deploy/systemd says `KillMode=mixed`.)
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway

    from meltwater.stream.spark.session import use_local_spark_home

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return False
        use_local_spark_home(master)
        spark_conf = SparkConf()
        for key, value in conf.items():
            spark_conf.set(key, value)
        gateway = launch_gateway(spark_conf, popen_kwargs={"start_new_session": True})
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
    return True


def _quiet_pyspark_loggers() -> None:
    """Silence the loggers with which pyspark reports every AnalysisException it converts
    (JSON lines of their own on stderr, handled or not): the service reports failures."""
    from pyspark.logger import PySparkLogger

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


class Service:
    """The running service: its pipelines, metrics, health and status server."""

    def __init__(self, config: ServiceConfig, *, progress_stream: Any = None) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.health = Health()
        self.stopping = threading.Event()
        self.display = ProgressDisplay(config.progress, progress_stream)
        self.server: StatusServer | None = None
        self.spark: Any = None
        self.runs: list[PipelineRun] = []

    def request_stop(self, signum: int | None = None, _frame: Any = None) -> None:
        """Ask the service to stop, from a signal handler or another thread."""
        if not self.stopping.is_set() and signum is not None:
            log.info("stopping", extra=fields(signal=signal.Signals(signum).name))
        self.stopping.set()

    def run(self, on_ready: Callable[[Service], None] | None = None) -> int:
        """Run every pipeline until a stop is requested (or all have finished); the exit status."""
        config = self.config
        if config.http_host is not None:
            try:
                self.server = StatusServer(config.http_host, config.http_port, self.metrics,
                                           self.health).start()
            except OSError as error:  # taken since preflight checked it
                raise ConfigError(f"{config.source}: service.http: cannot listen on "
                                  f"{config.http_host}:{config.http_port} "
                                  f"({_os_reason(error)})") from None
            log.info("status server listening", extra=fields(
                url=f"http://{self.server.host}:{self.server.port}/", health="/health",
                metrics="/metrics"))
        try:
            self.spark = spark_session(config)
            self.runs = [PipelineRun(self.spark, p, self.metrics, self.health,
                                     TableHead(p.table_source).start()) for p in config.pipelines]
            for run in self.runs:
                self.health.update(run.config.name, state="starting")
                if not self.stopping.is_set():
                    run.launch()
            if on_ready is not None:
                on_ready(self)
            while not self.stopping.is_set():
                if self._unusable() or self._all_ended():
                    break
                for run in self.runs:
                    run.poll()
                self.display.show(self.runs)
                self.stopping.wait(TICK_S)
        finally:
            self.shutdown()
        return self._exit_status()

    def _unusable(self) -> bool:
        """Whether a pipeline found the Spark session broken (no query can run in it)."""
        return any(run.failure is not None and run.failure.action is Action.EXIT
                   for run in self.runs)

    def _all_ended(self) -> bool:
        """Whether the service is done by itself: every pipeline is available-now and has
        finished or failed. A long-running pipeline that failed keeps the service up, its
        `/health` 503 saying why, and the others running."""
        return all(run.config.trigger == AVAILABLE_NOW and run.done for run in self.runs)

    def _exit_status(self) -> int:
        failed = [run for run in self.runs if run.failure is not None]
        if self._unusable():
            return EXIT_SPARK_UNUSABLE
        if self.stopping.is_set() or not failed:
            return EXIT_OK
        log.error("pipelines failed", extra=fields(failed="; ".join(
            f"{run.config.name}: {run.failure.reason}" for run in failed if run.failure)))
        return EXIT_PIPELINE_FAILED

    def shutdown(self) -> None:
        """Stop the pipelines, letting running batches finish (all within `shutdown-timeout`),
        then Spark and the status server."""
        deadline = time.monotonic() + self.config.shutdown_timeout_s
        for run in self.runs:
            run.stop(max(0.0, deadline - time.monotonic()))
            run.head.close()
        if self.runs:
            self.display.show(self.runs)
        if self.spark is not None:
            self.spark.stop()
            self.spark = None
        if self.server is not None:
            self.server.close()
            self.server = None
        log.info("stopped")


def serve(config: ServiceConfig) -> int:
    """Run `config` until a signal; 0 on a clean stop, also when the signal comes while
    the service is still starting."""
    setup_logging(config.log_format)
    service = Service(config)
    previous = {sig: signal.signal(sig, service.request_stop)
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for warning in preflight(config):
            log.warning(warning)
        return service.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
