"""`meltwater serve`: run a configuration's pipelines until SIGTERM or SIGINT.

Order matters for the promises the service makes:
1. everything that can be checked without starting is checked first (`preflight`): a bad
   table, sink or key is one line and exit status 2, before Spark or a database is touched;
2. each local checkpoint is locked for the life of the process (`lock_checkpoints`): a
   second service on one is refused in one line, exit 2;
3. then the HTTP status server (`/health` 503 `starting` until every pipeline's query has
   started), the SparkSession (its JVM out of the service's process group, what it prints
   going to the Spark log, `meltwater.service.spark_output`) and one streaming query per
   pipeline;
4. the loop folds each query's progress into metrics, health and the progress line, and
   restarts a failed query from its checkpoint with backoff when the failure may heal; one
   that cannot (`meltwater.service.failures`) stops its pipeline, `/health` says why;
5. on SIGTERM/SIGINT each running batch may finish (up to `shutdown-timeout`), the queries
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
from typing import Any

from meltwater.planner.changes.change_range import resolve_start
from meltwater.planner.errors import MeltwaterError
from meltwater.planner.table.table_loading import Table, load_table
from meltwater.service.checkpoints import (
    LOCK_NAME,
    CheckpointLock,
    has_offsets,
    holder,
    uncreatable,
)
from meltwater.service.config import parse_pipeline
from meltwater.service.config_model import (
    SPARK_LOG_OFF,
    PipelineConfig,
    PipelineTemplate,
    ServiceConfig,
    Trigger,
    local_path,
)
from meltwater.service.discovery import expand, matching_tables, table_pattern
from meltwater.service.errors import CheckpointInUseError, ConfigError
from meltwater.service.failures import Action
from meltwater.service.followed_tables import FollowedTables
from meltwater.service.logs import LogFormat, fields, setup_logging
from meltwater.service.metrics import (
    Health,
    PipelineState,
    ServiceMetrics,
    StatusServer,
    check_listen,
    exposure_warning,
)
from meltwater.service.pipeline import PipelineRun
from meltwater.service.progress import ProgressDisplay
from meltwater.service.spark_output import SparkOutput, spark_log_path
from meltwater.service.table_head import TableHead
from meltwater.sinks.errors import InvalidKeyColumnError, MissingKeyColumnsError
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
        _check_pipeline(pipeline, f"{config.source}: pipelines[{index}]")
    for template in config.templates:
        _check_template(config, template)
    log_path = spark_log_path(config)
    if config.spark_log not in (None, SPARK_LOG_OFF) and log_path is not None:
        problem = uncreatable(log_path.parent)
        if problem is None and log_path.exists() and not os.access(log_path, os.W_OK):
            problem = f"{log_path} is not writable"
        if problem is not None:
            raise ConfigError(f"{config.source}: service.spark-log: {problem}")
    return warnings


def _check_pipeline(pipeline: PipelineConfig, where: str) -> None:
    """A pipeline's table, checkpoint, start and sink, as far as they can be known without
    running: ConfigError naming `where` and the key."""
    try:
        table = load_table(pipeline.table_source)
    except MeltwaterError as error:
        raise ConfigError(f"{where}.table: {error}") from None
    checkpoint = local_path(pipeline.checkpoint)
    if checkpoint is not None:
        problem = uncreatable(checkpoint)
        if problem is not None:
            raise ConfigError(f"{where}.checkpoint: {problem}")
        if not has_offsets(checkpoint):
            _check_start(pipeline, table, f"{where}.options")
    check = sink_kind(pipeline.sink.type).check
    if check is not None:
        try:
            check(pipeline.sink.options, pipeline.sink_placement)
        except (MissingKeyColumnsError, InvalidKeyColumnError) as error:
            raise ConfigError(f"{where}.sink.key: {error}") from None
        except MeltwaterError as error:
            raise ConfigError(f"{where}.sink: {error}") from None


def _check_template(config: ServiceConfig, template: PipelineTemplate) -> None:
    """A `tables` pattern's pipeline, checked as `_check_pipeline` checks one, for the first
    table the pattern names now: every table's sink has the template's options, so a sink
    that cannot work (an Avro topic with no schema registry) is refused before any table's
    pipeline starts. A pattern naming no table yet has nothing to check against; one that
    cannot be listed is refused, as a table that cannot be loaded is."""
    where = f"{config.source}: pipelines[{template.index}]"
    try:
        tables = matching_tables(table_pattern(template.pattern, config.catalogs),
                                 config.catalogs)
    except MeltwaterError as error:
        raise ConfigError(f"{where}.tables: {error}") from None
    if tables:
        pipeline = expand(template, tables[0], config.source, config.catalogs, parse_pipeline)
        _check_pipeline(pipeline, f"{where} (table {tables[0]})")


def unstarted_master(config: ServiceConfig) -> str | None:
    """Why Spark would have no master: no `[spark] master` in the configuration and no
    spark-submit above this process to give one. pyspark would then start `local[*]` with
    Python workers running whatever `python3` is on PATH, which need not have meltwater:
    every query failing to create its source, retried forever. None when there is one."""
    if config.spark_master or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    return (f"{config.source}: spark.master: not set, and the service is not running under "
            "spark-submit (which would set it): set [spark] master = \"local[2]\", or start "
            "it with spark-submit (deploy/spark)")


def held_checkpoints(config: ServiceConfig) -> list[str]:
    """What `serve --check` says of checkpoints a running service holds (the lock is asked
    for, not taken: `--check` changes nothing): `serve` would refuse to start on them."""
    held = []
    for index, pipeline in enumerate(config.pipelines):
        checkpoint = local_path(pipeline.checkpoint)
        problem = None if checkpoint is None else holder(checkpoint)
        if problem is not None:
            held.append(f"{config.source}: pipelines[{index}].checkpoint: {problem}")
    return held


def lock_checkpoints(config: ServiceConfig) -> list[CheckpointLock]:
    """Take every local checkpoint's lock for the life of this process (see
    `meltwater.service.checkpoints`); ConfigError naming the first one another service
    holds. A remote checkpoint cannot be locked: that is said, once, and it is not."""
    locks: list[CheckpointLock] = []
    try:
        for index, pipeline in enumerate(config.pipelines):
            checkpoint = local_path(pipeline.checkpoint)
            where = f"{config.source}: pipelines[{index}].checkpoint"
            if checkpoint is None:
                log.warning("checkpoint not locked: it is not on this machine's file system; "
                            "make sure no other service runs this pipeline",
                            extra=fields(pipeline=pipeline.name, checkpoint=pipeline.checkpoint))
                continue
            try:
                locks.append(CheckpointLock(checkpoint).acquire())
            except CheckpointInUseError as error:
                raise ConfigError(f"{where}: {error}") from None
            except OSError as error:
                raise ConfigError(f"{where}: cannot lock {checkpoint / LOCK_NAME} "
                                  f"({_os_reason(error)})") from None
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks


def _os_reason(error: OSError) -> str:
    return error.strerror or str(error)


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


def spark_session(config: ServiceConfig, output: SparkOutput | None = None) -> Any:
    """The service's SparkSession: a local one for a configured master (as
    `meltwater.stream.local_session` builds it), else the one spark-submit configured.
    Either way its JVM, when this process starts it, runs in a session of its own, so that
    a signal to the service's process group does not reach it mid-batch
    (`meltwater.stream.spark.gateway`), its output going to `output`
    (`meltwater.service.spark_output`)."""
    from meltwater.stream.spark.session import (
        LOCAL_SESSION_CONF,
        configured_session,
        local_session,
        quiet_spark_logs,
    )

    conf = {"spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "60s"}
    if config.spark_master:
        conf["spark.sql.shuffle.partitions"] = "2"
        conf.update(config.spark_conf)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        _start_jvm({"spark.master": config.spark_master, "spark.app.name": "meltwater",
                    "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
                    **LOCAL_SESSION_CONF, **conf}, config.spark_master, output)
        spark = local_session(config.spark_master, "meltwater", conf)
    else:
        conf.update(config.spark_conf)
        _start_jvm({"spark.app.name": "meltwater", **conf}, None, output)
        spark = configured_session("meltwater", conf)
    quiet_spark_logs(spark)
    return spark


def _start_jvm(conf: dict[str, str], master: str | None, output: SparkOutput | None) -> None:
    """Start Spark's JVM apart (`meltwater.stream.spark.gateway`), unless spark-submit
    started this process or a session exists, and say where its output goes."""
    from meltwater.stream.spark.gateway import start_jvm_apart

    if start_jvm_apart(conf, master, output) and output is not None:
        log.info("Spark's JVM started; what it prints goes to its own log",
                 extra=fields(spark_log=str(output.log_path) if output.log_path
                              else "off (service.spark-log)"))


class Service:
    """The running service: its pipelines, metrics, health and status server."""

    def __init__(self, config: ServiceConfig, *, progress_stream: Any = None) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.health = Health()
        self.stopping = threading.Event()
        self.display = ProgressDisplay(config.progress, progress_stream,
                                       json_lines=config.log_format == LogFormat.JSON)
        self.server: StatusServer | None = None
        self.spark: Any = None
        self.runs: list[PipelineRun] = []
        self.followed: list[FollowedTables] = []
        self.locks: list[CheckpointLock] = []
        for pipeline in config.pipelines:  # /health: 503 "starting" until each has started
            self.health.update(pipeline.name, state=PipelineState.STARTING)

    def request_stop(self, signum: int | None = None, _frame: Any = None) -> None:
        """Ask the service to stop, from a signal handler or another thread."""
        if not self.stopping.is_set() and signum is not None:
            log.info("stopping", extra=fields(signal=signal.Signals(signum).name))
        self.stopping.set()

    def run(self, on_ready: Callable[[Service], None] | None = None) -> int:
        """Run every pipeline until a stop is requested (or all have finished); the exit status."""
        config = self.config
        self.locks = lock_checkpoints(config)
        try:
            return self._run(on_ready)
        finally:
            for lock in self.locks:
                lock.release()

    def _run(self, on_ready: Callable[[Service], None] | None) -> int:
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
            output = SparkOutput(spark_log_path(config),
                                 json_lines=config.log_format == LogFormat.JSON)
            self.spark = spark_session(config, output)
            self.runs = [PipelineRun(self.spark, p, self.metrics, self.health,
                                     TableHead(p.table_source, branch=p.branch).start())
                         for p in config.pipelines]
            for run in self.runs:
                if not self.stopping.is_set():
                    run.launch()
            self.followed = [FollowedTables(t, config, self.metrics, self.health)
                             for t in config.templates]
            if on_ready is not None:
                on_ready(self)
            while not self.stopping.is_set():
                self._follow_tables()
                if self._unusable() or self._all_ended():
                    break
                for run in self.runs:
                    run.poll()
                self.display.show(self.runs)
                self.stopping.wait(TICK_S)
        finally:
            self.shutdown()
        return self._exit_status()

    def _follow_tables(self) -> None:
        """Start the pipelines of tables the `tables` patterns name now, stop those of tables
        gone (`meltwater.service.followed_tables`)."""
        for followed in self.followed:
            started, stopped = followed.refresh(self.spark, self.config.shutdown_timeout_s)
            self.runs.extend(started)
            for run in stopped:
                self.runs.remove(run)

    def _unusable(self) -> bool:
        """Whether a pipeline found the Spark session broken (no query can run in it)."""
        return any(run.failure is not None and run.failure.action is Action.EXIT
                   for run in self.runs)

    def _all_ended(self) -> bool:
        """Whether the service is done by itself: every pipeline is available-now and has
        finished or failed. A long-running pipeline that failed keeps the service up, its
        `/health` 503 saying why, and the others running."""
        return not self.followed and all(
            run.config.trigger == Trigger.AVAILABLE_NOW and run.done for run in self.runs)

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
        for followed in self.followed:
            followed.close()
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
    the service is still starting.

    With `log = "json"` a refusal (a bad configuration, a checkpoint another service holds)
    is a JSON record too, and so is a bug's traceback (in the record's `exception`), so
    that every line the service prints is one JSON object; in the text format the CLI
    prints the one line (`meltwater.cli.main`)."""
    setup_logging(config.log_format)
    service = Service(config)
    previous = {sig: signal.signal(sig, service.request_stop)
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for warning in preflight(config):
            log.warning(warning)
        no_master = unstarted_master(config)
        if no_master is not None:
            raise ConfigError(no_master)
        return service.run()
    except MeltwaterError as error:
        if config.log_format != LogFormat.JSON:
            raise
        log.error(str(error), extra=fields(error=type(error).__name__))
        return error.exit_code
    except Exception:
        if config.log_format != LogFormat.JSON:
            raise
        log.exception("the service failed")
        return EXIT_SPARK_UNUSABLE
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
