"""The pipelines of a `tables` pattern's tables, started and stopped as the tables come and
go (`meltwater.service.discovery` says which tables, and what each one's pipeline is).

Each table found gets a `PipelineRun` of its own, its checkpoint under the template's
locked like any pipeline's; a table the pattern no longer names (dropped, or renamed away)
has its pipeline stopped, one log line and `meltwater_tables_dropped` saying so, and
leaves /health. A listing the catalog cannot answer is logged (once, until it answers)
and asked again next time; the pipelines running go on.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from meltwater.planner.errors import MeltwaterError
from meltwater.service.checkpoints import CheckpointLock
from meltwater.service.config_model import PipelineTemplate, ServiceConfig, local_path
from meltwater.service.discovery import expand, matching_tables, table_pattern
from meltwater.service.logs import fields
from meltwater.service.metrics import Health, PipelineState, ServiceMetrics
from meltwater.service.pipeline import PipelineRun
from meltwater.service.table_head import TableHead

log = logging.getLogger("meltwater.service")


class FollowedTables:
    """One template's tables and their pipelines."""

    def __init__(self, template: PipelineTemplate, config: ServiceConfig,
                 metrics: ServiceMetrics, health: Health) -> None:
        self.template = template
        self.config = config
        self.metrics = metrics
        self.health = health
        self.pattern = table_pattern(template.pattern, config.catalogs)
        self.runs: dict[str, PipelineRun] = {}
        self.refused: dict[str, str] = {}  # table -> why its pipeline could not be made
        self._locks: dict[str, CheckpointLock] = {}
        self._next_at = 0.0
        self._unlisted = False

    def refresh(self, spark: Any, stop_timeout_s: float
                ) -> tuple[list[PipelineRun], list[PipelineRun]]:
        """List the tables if it is time: the runs started and the runs stopped."""
        now = time.monotonic()
        if now < self._next_at:
            return [], []
        self._next_at = now + self.template.discovery_interval_s
        try:
            tables = matching_tables(self.pattern, self.config.catalogs)
        except MeltwaterError as error:
            if not self._unlisted:
                log.warning("tables not listed", extra=fields(
                    pipeline=self.template.name, tables=self.template.pattern,
                    error=str(error)))
            self._unlisted = True
            return [], []
        self._unlisted = False
        started = []
        for table in tables:
            if table not in self.runs and table not in self.refused:
                run = self._start(spark, table)
                if run is not None:
                    started.append(run)
        stopped = [self._stop(table, stop_timeout_s) for table in list(self.runs)
                   if table not in tables]
        for table in [t for t in self.refused if t not in tables]:
            del self.refused[table]
        self.metrics.tables_followed.labels(self.template.name).set(len(self.runs))
        return started, stopped

    def _start(self, spark: Any, table: str) -> PipelineRun | None:
        from meltwater.service.config import parse_pipeline

        try:
            config = expand(self.template, table, self.config.source, self.config.catalogs,
                            parse_pipeline)
            checkpoint = local_path(config.checkpoint)
            if checkpoint is not None:
                checkpoint.mkdir(parents=True, exist_ok=True)
                self._locks[table] = CheckpointLock(checkpoint).acquire()
        except (MeltwaterError, OSError) as error:
            self.refused[table] = str(error)
            log.error("table found, its pipeline refused", extra=fields(
                pipeline=self.template.name, table=table, error=str(error)))
            return None
        run = PipelineRun(spark, config, self.metrics, self.health,
                          TableHead(config.table_source, branch=config.branch).start())
        self.health.update(config.name, state=PipelineState.STARTING)
        log.info("table found: pipeline started", extra=fields(
            pipeline=config.name, table=table))
        run.launch()
        self.runs[table] = run
        return run

    def _stop(self, table: str, timeout_s: float) -> PipelineRun:
        run = self.runs.pop(table)
        run.stop(timeout_s)
        run.head.close()
        lock = self._locks.pop(table, None)
        if lock is not None:
            lock.release()
        self.health.remove(run.config.name)
        self.metrics.tables_dropped.labels(self.template.name).inc()
        log.warning("table gone: its pipeline stopped", extra=fields(
            pipeline=run.config.name, table=table))
        return run

    def close(self) -> None:
        """Let go of the checkpoints' locks (the runs are stopped by the service)."""
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()
