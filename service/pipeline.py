"""One pipeline of the service: a table's change stream, a sink, and what the query reports.

`PipelineRun.start()` builds the Structured Streaming query
`readStream.format("meltwater") -> observe(change counts) -> sink` with the pipeline's
checkpoint and trigger. The stream's schema is given to Spark (`stream_schema_for`), so
every trigger reads change rows whatever the options say, and a start option is resolved
only by a query that has no checkpoint yet. Before the query starts, the sink's position
is read from the checkpoint (the last committed batch and where its read ended), so lag is
measured from there at once: a pipeline restarted at the table's head reports none.
`poll()`, called by the service loop, reads the query's progress (the offset it committed,
the batch's duration and change counts) into metrics, health and the progress line.

A failed query, or one that fails to start, is judged by `meltwater.service.failures`:
one that may heal (a database or store that did not answer, Spark's own trouble) is
logged, counted and restarted with backoff, resuming from its checkpoint; one that cannot
(a bad key, an unknown start snapshot, a checkpoint under a file) stops the pipeline,
state `failed` with its reason in `/health`, until the service is restarted. A query that
stopped because the table's schema changed (mirror pipelines run with
`schema-change=fail`, see `meltwater.sinks.mirror_stream`) is restarted at once, not
counted as a failure: the new query reads the new schema.

The event-driven trigger is a zero-interval processing-time trigger whose source blocks in
`latestOffset` until the table's watcher reports a commit (`watch-wait-ms`): a micro-batch
starts when a commit lands, and an idle stream costs a few wake-ups a second, not a listing
of the table every 10 ms.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from meltwater.planner.errors import OffsetError
from meltwater.service.config_model import PipelineConfig, Trigger
from meltwater.service.failures import Action, Failure, classify
from meltwater.service.logs import fields
from meltwater.service.metrics import Health, PipelineState, ServiceMetrics
from meltwater.service.table_head import TableHead
from meltwater.sinks.kinds import sink_kind
from meltwater.stream.engine.keys.index_location import default_index_root
from meltwater.stream.spark.change_counts import observe_change_counts, observed_change_counts
from meltwater.stream.spark.checkpoint import open_checkpoint, running_batches
from meltwater.stream.spark.query_start import start_query
from meltwater.stream.spark.source import stream_schema_for
from meltwater.stream.watch.stream_offsets import StreamOffset

log = logging.getLogger("meltwater.service")

EVENT_WAIT_MS = "250"
MAX_BACKOFF_S = 60.0
STOP_POLL_S = 0.1


def _source_offset(progress: dict[str, Any] | None, which: str) -> dict[str, Any] | None:
    """The source's `endOffset` or `latestOffset` in a progress report, as a dict (Spark
    gives it as JSON text, pyspark's own objects as a dict); None if it has no snapshot."""
    sources = (progress or {}).get("sources") or []
    offset = sources[0].get(which) if sources else None
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return None
    if not isinstance(offset, dict) or offset.get("snapshot_id") is None:
        return None
    return offset


def held_snapshot(end: StreamOffset, head: TableHead) -> int | None:
    """The snapshot the sink holds whole once a batch ending at `end` committed
    (`StreamOffset.held_snapshot`: a batch ending inside a commit, as read limits split
    one, holds that commit's parent). The mirror's ledger records the same snapshot, read
    from the same offset (`meltwater.sinks.spark_writer`), so every line about a batch
    names one snapshot."""
    head.know(end.snapshot_id)
    return end.held_snapshot(head.parent_of)


def reached_snapshot(progress: dict[str, Any], head: TableHead) -> int | None:
    """The snapshot the sink holds after the batch of a progress report (`held_snapshot`);
    None if the report names no offset of the meltwater source."""
    end = _source_offset(progress, "endOffset")
    if end is None:
        return None
    try:
        offset = StreamOffset.from_json(end)
    except OffsetError:
        return None
    return held_snapshot(offset, head)


def latest_snapshot(progress: dict[str, Any] | None) -> int | None:
    """The newest snapshot the source has seen, by its last progress report (idle reports
    included): how a catalog table's head learns of commits without asking the catalog."""
    latest = _source_offset(progress, "latestOffset")
    return None if latest is None else int(latest["snapshot_id"])


class PipelineRun:
    """A pipeline's query, restarted from its checkpoint whenever it fails."""

    def __init__(self, spark: Any, config: PipelineConfig, metrics: ServiceMetrics,
                 health: Health, head: TableHead) -> None:
        self.spark = spark
        self.config = config
        self.metrics = metrics
        self.health = health
        self.head = head
        self.query: Any = None
        self.failures = 0
        self.retry_at = 0.0
        self.last_batch = -1
        self.reached: int | None = None
        self.rows_per_second = 0.0
        self.finished = False  # available-now: the query ended by itself
        self.stopped = False  # the service stopped it
        self.failure: Failure | None = None  # a failure restarting cannot heal (STOP, EXIT)

    @property
    def done(self) -> bool:
        """Whether the pipeline will not run again in this service: finished or failed."""
        return self.finished or self.failure is not None

    # -- the query ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the pipeline's streaming query, from its checkpoint if it has one."""
        config = self.config
        kind = sink_kind(config.sink.type)
        # e.g. schema-change; a kafka sink's key (which loads the table, and may refuse)
        options = {**config.source_options,
                   **kind.stream_options(config.sink.options, config.sink_placement)}
        if config.event_driven:
            options["watch-wait-ms"] = EVENT_WAIT_MS
        if not any(name.lower() == "key-index-dir" for name in options):
            # upserts find the rows they replaced by lookups, the index kept across restarts
            options["key-index-dir"] = str(default_index_root())
        schema = stream_schema_for({**options, "path": config.table})
        reader = self.spark.readStream.format("meltwater").schema(schema).options(**options)
        frame = reader.load(config.table)
        frame = observe_change_counts(frame)
        writer = kind.writer(frame, config.sink.options, config.sink_placement)
        writer = writer.queryName(config.name).option("checkpointLocation", config.checkpoint)
        if config.trigger == Trigger.AVAILABLE_NOW:
            writer = writer.trigger(availableNow=True)
        elif config.event_driven:
            writer = writer.trigger(processingTime="0 seconds")
        else:
            writer = writer.trigger(processingTime=f"{config.interval_s} seconds")
        self._resume_position()
        self.query = start_query(writer)  # one at a time: see stream.query_start
        self.metrics.up.labels(config.name).set(1)
        self.health.update(config.name, state=PipelineState.RUNNING)
        log.info("pipeline started", extra=fields(pipeline=config.name, table=config.table,
                                                   sink=config.sink.type,
                                                   trigger=config.trigger))

    def _resume_position(self) -> None:
        """Take where the sink is from the checkpoint, before the query starts: the last
        batch Spark committed and the snapshot its read ended at. Without this a pipeline
        restarted at the table's head reported every snapshot of the table as lag (`reached`
        unknown) until its next batch, which an idle table may never bring. A checkpoint
        that cannot be read leaves the position unknown (logged), as before."""
        committed = self._committed()
        if committed is None:
            return
        batch, end = committed
        self.last_batch = max(self.last_batch, batch)
        self.reached = held_snapshot(end, self.head)
        self._show_position(self.config.name, batch)
        self._update_lag()

    def _committed(self) -> tuple[int, StreamOffset] | None:
        """The checkpoint's last committed batch and where its read ended; None before
        the first, or if the checkpoint cannot be read (logged)."""
        checkpoint = open_checkpoint(self.spark, self.config.checkpoint)
        if checkpoint is None:
            return None
        try:
            return checkpoint.committed_offset()
        # Blind on purpose: whatever py4j raises reading the checkpoint, the query's own
        # start says what is wrong with it; the position is only a report.
        except Exception as error:  # noqa: BLE001
            log.warning("cannot read the checkpoint's position", extra=fields(
                pipeline=self.config.name, checkpoint=self.config.checkpoint,
                error=classify(error).reason))
            return None

    def _report_unrecorded_batch(self) -> None:
        """A batch the stopped query committed without reporting its progress (a stop
        between the two): its line and position come from the checkpoint, so the log has a
        line for every batch the sink holds."""
        committed = self._committed()
        if committed is None or committed[0] <= self.last_batch:
            return
        batch, end = committed
        self.last_batch = batch
        self.reached = held_snapshot(end, self.head)
        self.metrics.batches.labels(self.config.name).inc()
        self._show_position(self.config.name, batch)
        log.info("batch committed", extra=fields(pipeline=self.config.name, batch=batch,
                                                 snapshot=self.reached))

    def _show_position(self, name: str, batch: int) -> None:
        """Put the sink's position (`reached`, after batch `batch`) in metrics and health."""
        sequence = self.head.sequence_number(self.reached)
        if sequence is not None:
            self.metrics.snapshot.labels(name).set(sequence)
        self.health.update(name, batches=batch + 1, snapshot_id=self.reached,
                           sequence_number=sequence)

    def stop(self, timeout_s: float) -> None:
        """Let the micro-batch running now finish, for up to `timeout_s`, then stop the
        query (which interrupts at most the start of the next one: planned, nothing
        written, run again from the checkpoint by the next start)."""
        query = self.query
        if query is None:
            return
        deadline = time.monotonic() + timeout_s
        try:
            batches = running_batches(query)
            if batches is not None:  # the batch in flight: planned, not committed
                planned = batches.planned()
                while query.isActive and time.monotonic() < deadline \
                        and batches.committed() < planned:
                    time.sleep(STOP_POLL_S)
            else:
                while query.isActive and query.status.get("isTriggerActive") \
                        and time.monotonic() < deadline:
                    time.sleep(STOP_POLL_S)
            for progress in self._new_progress():
                self._record(progress)
            query.stop()
            for progress in self._new_progress():  # reported while the query stopped
                self._record(progress)
            self._report_unrecorded_batch()
        # Blind on purpose: the service stops whatever Spark or py4j raise; a query failing
        # while stopping is still stopped.
        except Exception as error:  # noqa: BLE001
            log.warning("pipeline stopped with an error", extra=fields(
                pipeline=self.config.name, error=classify(error).reason))
        self.metrics.up.labels(self.config.name).set(0)
        self.health.update(self.config.name, state=PipelineState.STOPPED)
        self.query = None
        self.stopped = True

    # -- progress ------------------------------------------------------------------------------

    def poll(self) -> None:
        """Fold the query's newest progress into metrics and health; restart it if it died."""
        if self.query is None:
            if not self.done and time.monotonic() >= self.retry_at:
                self.launch()
            return
        if not self.query.isActive:
            self._ended()
            return
        for progress in self._new_progress():
            self._record(progress)
        self._update_lag()

    def _new_progress(self) -> list[dict[str, Any]]:
        """Progress reports of batches not recorded yet (idle reports carry no addBatch)."""
        return [p for p in self.query.recentProgress
                if int(p.get("batchId", -1)) > self.last_batch
                and "addBatch" in (p.get("durationMs") or {})]

    def _record(self, progress: dict[str, Any]) -> None:
        name = self.config.name
        batch = int(progress["batchId"])
        self.last_batch = batch
        durations = progress.get("durationMs") or {}
        seconds = durations.get("triggerExecution", 0) / 1000
        counts = observed_change_counts(progress)
        for kind, count in counts.items():
            if count:
                self.metrics.rows.labels(name, kind).inc(count)
        self.metrics.batches.labels(name).inc()
        self.metrics.batch_duration.labels(name).observe(seconds)
        rows = int(progress.get("numInputRows") or 0)
        self.rows_per_second = rows / seconds if seconds > 0 else 0.0
        reached = reached_snapshot(progress, self.head)
        if reached is not None:
            self.reached = reached
        self.failures = 0
        self._show_position(name, batch)
        log.info("batch committed", extra=fields(
            pipeline=name, batch=batch, snapshot=self.reached, rows=rows,
            seconds=round(seconds, 3),
            **{kind.lower(): count for kind, count in counts.items() if count},
            # where the batch's time went, in Spark's words (addBatch: reading the changes
            # and applying them to the sink; latestOffset: looking for new snapshots)
            phases_ms={k: int(v) for k, v in durations.items() if k != "triggerExecution"}))

    def _update_lag(self) -> None:
        self.head.know(latest_snapshot(self.query.lastProgress if self.query else None))
        snapshots, seconds = self.head.lag(self.reached)
        name = self.config.name
        self.metrics.lag_snapshots.labels(name).set(snapshots)
        self.metrics.lag_seconds.labels(name).set(seconds)
        self.health.update(name, lag_snapshots=snapshots, lag_seconds=round(seconds, 3))

    def _ended(self) -> None:
        name = self.config.name
        error = self.query.exception()
        for progress in self._new_progress():
            self._record(progress)
        self._update_lag()
        self.query = None
        self.metrics.up.labels(name).set(0)
        if error is None:
            self.finished = True
            self.health.update(name, state=PipelineState.FINISHED)
            log.info("pipeline finished", extra=fields(pipeline=name))
            return
        self._failed(classify(error))

    def _failed(self, failure: Failure) -> None:
        """Act on a failure as `meltwater.service.failures` says: restart now, retry with
        backoff, or stop the pipeline for good (EXIT also stops the service)."""
        name = self.config.name
        if failure.action is Action.RESTART:  # schema-change=fail: restart in the new schema
            self.retry_at = 0.0
            self.health.update(name, state=PipelineState.RESTARTING)
            log.info("table schema changed; restarting the query in the new schema",
                     extra=fields(pipeline=name, reason=failure.reason))
            return
        self.metrics.errors.labels(name).inc()
        if failure.action is not Action.RETRY:
            self.failure = failure
            self.health.update(name, state=PipelineState.FAILED, last_error=failure.reason)
            message = ("the Spark session is unusable; the service stops so that its "
                       "supervisor starts a new process" if failure.action is Action.EXIT
                       else "pipeline stopped: restarting cannot fix this; fix it, then "
                            "restart the service")
            log.error(message, extra=fields(pipeline=name, error=failure.reason))
            return
        self.failures += 1
        backoff = min(MAX_BACKOFF_S, 2.0 ** (self.failures - 1))
        self.retry_at = time.monotonic() + backoff
        self.health.update(name, state=PipelineState.FAILING, last_error=failure.reason)
        log.error("pipeline failed; restarting from its checkpoint", extra=fields(
            pipeline=name, error=failure.reason, retry_in_s=backoff, failures=self.failures))

    def launch(self) -> None:
        """Start the query; a failure to start is judged like a failed query's."""
        try:
            self.start()
        # meltwater's errors, Spark's analysis errors, py4j's and any other: the service
        # outlives them, and `classify` says whether to start again.
        except Exception as error:  # noqa: BLE001
            self._failed(classify(error))
