"""How the service judges a failed query (meltwater.service.failures), on the texts Spark
really reports, and what a pipeline then does: retry, restart, stop, or stop the service.

The texts are cut down from failures seen in `meltwater serve` (pyspark 4.3): the Python
traceback and the shape of Spark's wrapping are kept, most stack frames are not.
"""

from __future__ import annotations

import importlib
import pkgutil

import meltwater.planner
import meltwater.sinks
import meltwater.stream
from meltwater.planner.errors import (
    CatalogError,
    MeltwaterError,
    MetadataInFlightError,
    StorageError,
)
from meltwater.service.config import parse_config
from meltwater.service.failures import Action, classify
from meltwater.service.metrics import Health, ServiceMetrics
from meltwater.service.pipeline import PipelineRun
from meltwater.service.runner import (
    EXIT_OK,
    EXIT_PIPELINE_FAILED,
    EXIT_SPARK_UNUSABLE,
    Service,
)
from meltwater.sinks.errors import DuplicateKeyError, SinkUnavailableError
from meltwater.stream.errors import SchemaChangedError

# A mirror's foreachBatch raised (in the service's own process, called back by the JVM).
FOREACH_BATCH = """\
An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/opt/meltwater/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "/opt/meltwater/lib/python3.11/site-packages/pyspark/sql/utils.py", line 163, in call
    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)
  File "/opt/meltwater/sinks/net_effect.py", line 152, in _raise_duplicate
    raise DuplicateKeyError(f"{what}: key {key} arrives twice without leaving in between (second "
meltwater.sinks.errors.DuplicateKeyError: batch 0 of pipeline 'dup@fed0e3dc': key {'part': 'a'} \
arrives twice without leaving in between (second time in snapshot 4809803005023084746): the \
table holds two live rows with that key; choose key columns that are unique

=== Streaming Query ===
Identifier: dup [id = 95a644ec-57ab-40b3-bd09-64a5bcbf117b, runId = a5dc84a1]
Current Committed Offsets: {}

Logical Plan:
~WriteToMicroBatchDataSourceV1 ForeachBatchSink, 95a644ec, [queryName=dup], Append
+- ~CollectMetrics meltwater_changes, [sum(CASE WHEN (_change_type#4 = INSERT) THEN 1 ...
   +- ~StreamingDataSourceV2ScanRelation[id#0, name#1, _change_type#4] meltwater
"""

# The source's schema() refused a start snapshot (Spark's analysis of the query).
SOURCE_AT_START = """\
[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback (most \
recent call last):
  File "/opt/meltwater/stream/spark/source.py", line 95, in schema
    read = resolve_read(self.options)
  File "/opt/meltwater/planner/changes/change_range.py", line 314, in _check_unreached_start
    raise NoSuchSnapshotError(f"{bound} is not a snapshot of table {metadata.location} "
meltwater.planner.errors.NoSuchSnapshotError: start-snapshot-id 12345 is not a snapshot of \
table /warehouse/db/orders (expired or never committed)
 SQLSTATE: 38000
"""

# writer.start() with a checkpoint under a regular file.
CHECKPOINT_UNDER_FILE = """\
An error occurred while calling o209.start.
: org.apache.hadoop.fs.ParentNotDirectoryException: Parent path is not a directory: \
file:/var/lib/meltwater/afile
\tat org.apache.hadoop.fs.RawLocalFileSystem.mkOneDirWithMode(RawLocalFileSystem.java:809)
\tat org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.mkdirs
"""

# A session whose Python function environment is corrupted: every task fails so.
POISONED = """\
Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: \
Lost task 0.0 in stage 3.0 (TID 3) (10.0.0.5 executor driver): java.io.OptionalDataException
\tat java.base/java.io.ObjectInputStream.readObject0(ObjectInputStream.java:1767)
\tat java.base/java.util.HashMap.readObject(HashMap.java:1511)

=== Streaming Query ===
Identifier: orders [id = 1, runId = 2]
"""

# An executor lost in the middle of a batch: Spark's trouble, worth another try.
EXECUTOR_LOST = """\
Job aborted due to stage failure: Task 1 in stage 7.0 failed 4 times, most recent failure: \
Lost task 1.3 in stage 7.0 (TID 31) (worker-2 executor 3): ExecutorLostFailure (executor 3 \
exited caused by one of the running tasks) Reason: Container killed on request. Exit code 137
Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2898)

=== Streaming Query ===
Logical Plan:
+- ~StreamingRelationV2 meltwater, [path=lake.db.orders, catalog.credential=id:s3cr3t], [id#0]
"""


# A source's Python worker could not import meltwater (a worker Python without it).
WORKER_WITHOUT_MELTWATER = """\
[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback (most \
recent call last):
  File "/usr/lib/python3/site-packages/pyspark/python/lib/pyspark.zip/pyspark/sql/worker/\
utils.py", line 98, in worker_run
    main(infile, outfile)
  File "/usr/lib/python3/site-packages/pyspark/python/lib/pyspark.zip/pyspark/serializers.py\
", line 483, in loads
    return cloudpickle.loads(obj, encoding=encoding)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ModuleNotFoundError: No module named 'meltwater'
 SQLSTATE: 38000

=== Streaming Query ===
Identifier: p [id = 9e1c6196, runId = 585fdfbb]
"""


class ReportedError(Exception):
    """An exception carrying Spark's text, as StreamingQueryException / Py4JJavaError do."""


def test_meltwater_errors_are_found_in_spark_text_and_named_in_their_words():
    failure = classify(ReportedError(FOREACH_BATCH))
    assert failure.action is Action.STOP and failure.error_class is DuplicateKeyError
    assert failure.reason.startswith("DuplicateKeyError: batch 0 of pipeline 'dup@fed0e3dc'")
    assert failure.reason.endswith("choose key columns that are unique")
    failure = classify(ReportedError(SOURCE_AT_START))
    assert failure.action is Action.STOP
    assert failure.reason == ("NoSuchSnapshotError: start-snapshot-id 12345 is not a snapshot "
                              "of table /warehouse/db/orders (expired or never committed)")


def test_a_python_workers_traceback_is_named_by_its_error_not_its_first_line():
    failure = classify(ReportedError(WORKER_WITHOUT_MELTWATER))
    assert failure.reason == ("[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source "
                              "instance: ModuleNotFoundError: No module named 'meltwater'")


def test_java_failures_that_cannot_heal_stop_and_a_poisoned_session_exits():
    failure = classify(ReportedError(CHECKPOINT_UNDER_FILE))
    assert failure.action is Action.STOP
    assert failure.reason == ("ParentNotDirectoryException: Parent path is not a directory: "
                              "file:/var/lib/meltwater/afile")
    failure = classify(ReportedError(POISONED))
    assert failure.action is Action.EXIT and "OptionalDataException" in failure.reason


def test_other_failures_retry_with_spark_s_first_line_and_no_secrets():
    failure = classify(ReportedError(EXECUTOR_LOST))
    assert failure.action is Action.RETRY
    assert failure.reason.startswith("Job aborted due to stage failure: Task 1 in stage 7.0")
    assert "\n" not in failure.reason and "at org." not in failure.reason
    failure = classify(ReportedError("An error occurred while calling o7.start.\n: java.lang."
                                "IllegalStateException: no [catalog.credential=id:s3cr3t, "
                                "uri=postgresql://app:s3cr3t@db/cat]\n\tat x.y(Z.java:1)"))
    assert failure.action is Action.RETRY
    assert failure.reason == ("IllegalStateException: no [catalog.credential=***, "
                              "uri=postgresql://app:***@db/cat]")


def test_spark_s_analysis_errors_stop():
    from pyspark.errors import AnalysisException

    error = AnalysisException(
        message="[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter "
                "with name `_change_type` cannot be resolved. SQLSTATE: 42703;\n'CollectMetrics "
                "meltwater_changes\n+- ~StreamingRelationV2 meltwater, [path=/t], [id#0]")
    failure = classify(error)
    assert failure.action is Action.STOP
    assert failure.reason.startswith("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column")
    assert "StreamingRelationV2" not in failure.reason


def _meltwater_errors() -> list[type[MeltwaterError]]:
    found = set()
    for package in (meltwater.planner, meltwater.stream, meltwater.sinks):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith(".errors"):
                module = importlib.import_module(info.name)
                found |= {v for v in vars(module).values()
                          if isinstance(v, type) and issubclass(v, MeltwaterError)}
    return sorted(found, key=lambda cls: cls.__name__)


def test_which_errors_may_heal_is_said_by_the_error_classes():
    """The list, in one place: the classes' `retryable`. A new error is not retryable until
    its class says so (and this test is told)."""
    errors = _meltwater_errors()
    assert len(errors) > 25
    actions = {cls.__name__: classify(cls("x")).action for cls in errors}
    assert {n for n, a in actions.items() if a is Action.RETRY} == {
        CatalogError.__name__, StorageError.__name__, SinkUnavailableError.__name__,
        MetadataInFlightError.__name__}
    assert {n for n, a in actions.items() if a is Action.RESTART} == {
        SchemaChangedError.__name__}
    # and the same when only Spark's text names them
    for cls in errors:
        text = f"Traceback (most recent call last):\n{cls.__module__}.{cls.__name__}: why\n"
        assert classify(ReportedError(text)).action is actions[cls.__name__], cls


# -- what a pipeline and the service do about each ----------------------------------------


def _run(trigger: str = "event") -> PipelineRun:
    config = parse_config({"pipelines": [{
        "name": "orders", "table": "/t", "checkpoint": "/tmp/chk", "trigger": trigger,
        "sink": {"type": "console"}}]}).pipelines[0]
    return PipelineRun(None, config, ServiceMetrics(), Health(), head=None)  # type: ignore[arg-type]


def test_a_pipeline_retries_restarts_or_stops_as_its_failure_says():
    run = _run()
    run._failed(classify(SinkUnavailableError("database is locked")))
    assert not run.done and run.failures == 1 and run.retry_at > 0
    assert run.health.document()[1]["pipelines"]["orders"]["state"] == "failing"

    run = _run()
    run._failed(classify(SchemaChangedError("table /t changed its schema at snapshot 5")))
    assert not run.done and run.failures == 0 and run.retry_at == 0.0

    run = _run()
    run._failed(classify(ReportedError(FOREACH_BATCH)))
    assert run.done and run.failure is not None
    status, document = run.health.document()
    assert status == 503
    assert document["pipelines"]["orders"]["state"] == "failed"
    assert document["pipelines"]["orders"]["last_error"].startswith("DuplicateKeyError: ")
    run.poll()  # a stopped pipeline is not started again
    assert run.query is None and run.metrics.errors.labels("orders")._value.get() == 1


def test_the_service_exit_status_names_what_ended_it():
    service = Service(parse_config({"pipelines": [{
        "name": "orders", "table": "/t", "checkpoint": "/tmp/chk", "trigger": "available-now",
        "sink": {"type": "console"}}]}))
    service.runs = [_run("available-now")]
    assert not service._all_ended()
    service.runs[0].finished = True
    assert service._all_ended() and service._exit_status() == EXIT_OK
    service.runs[0].failure = classify(ReportedError(FOREACH_BATCH))
    assert service._exit_status() == EXIT_PIPELINE_FAILED
    service.runs[0].failure = classify(ReportedError(POISONED))
    assert service._unusable() and service._exit_status() == EXIT_SPARK_UNUSABLE
    service.runs = [_run("event")]
    service.runs[0].failure = classify(ReportedError(FOREACH_BATCH))
    assert not service._all_ended()  # a long-running service stays up, its /health 503
    service.stopping.set()
    assert service._exit_status() == EXIT_OK  # a stop that was asked for
