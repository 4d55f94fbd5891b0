"""What Spark's JVM prints goes to the Spark log, not the service's log: a Python worker's
traceback of a socket a stop closed is dropped, every other line kept in order, and the
console sink's lines reach stdout (as JSON records with `log = "json"`).

The tracebacks are the two a stopped query's workers printed in `meltwater serve` (pyspark
4.3), relayed by the JVM on its stderr; only their paths are shortened.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

from meltwater.service.logs import setup_logging
from meltwater.service.spark_output import SparkOutput, TracebackFilter

# The streaming source's process, its socket closed by a stop while it waited for a call.
SOURCE_RUNNER_CLOSED = """\
Traceback (most recent call last):
  File "$SITE/pyspark/sql/streaming/python_streaming_source_runner.py", line 265, in main
    func_id = read_int(infile)
              ^^^^^^^^^^^^^^^^
  File "$SITE/pyspark/serializers.py", line 604, in read_int
    raise EOFError
EOFError

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "$SITE/pyspark/worker_util.py", line 253, in get_sock_file_to_executor
    yield sock_file
  File "$SITE/pyspark/sql/streaming/python_streaming_source_runner.py", line 314, in <module>
    main(sock_file, sock_file)
  File "$SITE/pyspark/sql/streaming/python_streaming_source_runner.py", line 299, in main
    outfile.flush()
  File "/usr/lib/python3.11/socket.py", line 724, in write
    return self._sock.send(b)
           ^^^^^^^^^^^^^^^^^^
BrokenPipeError: [Errno 32] Broken pipe

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "$SITE/pyspark/sql/streaming/python_streaming_source_runner.py", line 313, in <module>
    with get_sock_file_to_executor(timeout=None) as sock_file:
  File "/usr/lib/python3.11/contextlib.py", line 158, in __exit__
    self.gen.throw(typ, value, traceback)
  File "$SITE/pyspark/worker_util.py", line 255, in get_sock_file_to_executor
    sock_file.close()
  File "/usr/lib/python3.11/socket.py", line 724, in write
    return self._sock.send(b)
           ^^^^^^^^^^^^^^^^^^
BrokenPipeError: [Errno 32] Broken pipe
"""

# The daemon's worker, its socket closed by a stop while it flushed its output.
DAEMON_CLOSED = """\
Traceback (most recent call last):
  File "$SITE/pyspark/daemon.py", line 264, in manager
    code = worker(sock, authenticated)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "$SITE/pyspark/daemon.py", line 95, in worker
    outfile.flush()
BrokenPipeError: [Errno 32] Broken pipe
"""

# What a worker prints when meltwater's own code fails (kept: it is an error).
SOURCE_FAILED = """\
Traceback (most recent call last):
  File "$SITE/pyspark/sql/streaming/python_streaming_source_runner.py", line 258, in main
    reader = _streamReader(data_source, schema)
  File "/opt/meltwater/stream/spark/stream_reader.py", line 96, in __init__
    raise StreamError(
meltwater.planner.errors.StreamError: the stream's schema has no change metadata columns
"""

# A connection meltwater's code had open was reset: its frames are not pyspark's (kept).
MELTWATER_CONNECTION_RESET = """\
Traceback (most recent call last):
  File "$SITE/pyspark/daemon.py", line 264, in manager
    code = worker(sock, authenticated)
  File "/opt/meltwater/stream/engine/scans/reader.py", line 80, in read
    return source.read()
  File "$SITE/pyarrow/fs.py", line 12, in read
    raise ConnectionResetError(104, "Connection reset by peer")
ConnectionResetError: [Errno 104] Connection reset by peer
"""

SITE = "/opt/meltwater/lib/python3.11/site-packages"
SOURCE_RUNNER_CLOSED, DAEMON_CLOSED, SOURCE_FAILED, MELTWATER_CONNECTION_RESET = (
    text.replace("$SITE", SITE) for text in (SOURCE_RUNNER_CLOSED, DAEMON_CLOSED, SOURCE_FAILED,
                                              MELTWATER_CONNECTION_RESET))

WARN = ("26/11/26 22:47:45 WARN DAGScheduler: Failed to cancel job group 174d3002. Cannot "
        "find active jobs for it.")


def _filtered(lines: list[str]) -> list[str]:
    kept: list[str] = []
    traceback_filter = TracebackFilter()
    for line in lines:
        kept += traceback_filter.feed(line)
    return kept + traceback_filter.flush()


def test_a_stops_closed_socket_tracebacks_are_dropped_and_the_rest_kept_in_order():
    lines = [WARN, *SOURCE_RUNNER_CLOSED.splitlines(), WARN, *DAEMON_CLOSED.splitlines(),
             *SOURCE_FAILED.splitlines(), WARN, *MELTWATER_CONNECTION_RESET.splitlines(),
             "", *DAEMON_CLOSED.splitlines()]
    assert _filtered(lines) == [WARN, WARN, *SOURCE_FAILED.splitlines(), WARN,
                                *MELTWATER_CONNECTION_RESET.splitlines(), ""]


def test_a_traceback_is_written_whole_once_the_next_line_shows_it_ended():
    traceback_filter = TracebackFilter()
    held = [traceback_filter.feed(line) for line in SOURCE_FAILED.splitlines()]
    assert held == [[]] * len(held)  # its last line might yet be followed by a chained one
    assert traceback_filter.feed(WARN) == [*SOURCE_FAILED.splitlines(), WARN]


CHILD = """\
import sys
print("+---+", flush=True)
print("| id|", flush=True)
sys.stderr.write("WARNING: Using incubator modules: jdk.incubator.vector\\n")
sys.stderr.write(sys.argv[1])
sys.stderr.write("26/11/26 22:26:38 WARN NativeCodeLoader: Unable to load native-hadoop\\n")
"""


def _run_child(output: SparkOutput) -> None:
    """A process in the JVM's place: its stdout the console sink's, its stderr Spark's."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, DAEMON_CLOSED],
                             **output.streams())
    output.started()
    assert child.wait(timeout=60) == 0
    assert output.last_line() == ("26/11/26 22:26:38 WARN NativeCodeLoader: Unable to load "
                                  "native-hadoop")  # read once the pipes are drained


def test_the_jvms_stderr_goes_to_the_spark_log_and_its_stdout_to_ours(tmp_path):
    stdout = io.StringIO()
    output = SparkOutput(tmp_path / "logs" / "spark.log", json_lines=False, stdout=stdout)
    _run_child(output)
    assert (tmp_path / "logs" / "spark.log").read_text().splitlines() == [
        "WARNING: Using incubator modules: jdk.incubator.vector",
        "26/11/26 22:26:38 WARN NativeCodeLoader: Unable to load native-hadoop"]
    assert stdout.getvalue() == "+---+\n| id|\n"


def test_with_json_logs_the_console_sinks_lines_are_json_records(tmp_path, capfd):
    setup_logging("json")
    try:
        output = SparkOutput(None, json_lines=True, stdout=io.StringIO())
        _run_child(output)
    finally:
        logging.getLogger().handlers.clear()
    records = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert [(r["logger"], r["message"]) for r in records] == [
        ("spark.console", "+---+"), ("spark.console", "| id|")]
    assert not list(tmp_path.iterdir())  # spark-log "off": nothing written anywhere
