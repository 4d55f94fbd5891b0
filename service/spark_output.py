"""What Spark's JVM prints, kept out of the service's own log.

On its stderr the JVM the service starts (`meltwater.stream.spark.gateway`)
prints Spark's log4j lines (`WARN Utils: Your hostname ... resolves to a loopback
address`, `WARN NativeCodeLoader`, `WARN DAGScheduler: Failed to cancel job group` at every
stop, a failed query's whole Java stack), the JVM launcher's notes, and, relayed by Spark,
whatever Spark's Python workers print on theirs (a `BrokenPipeError` traceback when a stop
closes a worker's socket). None of it is the service's to say: a
failed query is reported by the service itself in one line (`meltwater.service.failures`),
and mixed into the service's log it broke `log = "json"` for every log shipper. So it goes
to the file `[service] spark-log` names (by default `spark.log` in the first pipeline's
checkpoint directory, when that is on this machine; `"off"` drops it), rotated at
`MAX_LOG_BYTES` with one old file kept. The workers' tracebacks of a closed socket, noise
of stops, are dropped even there (`TracebackFilter`). The last lines are also kept in
memory (`tail`), so a JVM that dies while starting is explained in the service's one line.

On its stdout the JVM prints what Spark prints for the user: the `console` sink's tables.
They go to the service's stdout line by line; with `log = "json"` each as a JSON record
(logger `spark.console`), so that every line the service prints is one JSON object.

Under spark-submit the JVM is spark-submit's, not the service's, and prints where
spark-submit's log4j configuration says.
"""

from __future__ import annotations

import collections
import logging
import logging.handlers
import os
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from meltwater.service.config_model import SPARK_LOG_OFF, ServiceConfig, local_path

MAX_LOG_BYTES = 16 * 1024 * 1024
TAIL_LINES = 40
MAX_HELD_LINES = 400  # a traceback longer than this is written as it comes
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct")
# The pyspark daemon's note that precedes its traceback when a worker's socket is gone.
_DAEMON_NOTE = "PySpark daemon failed to flush the output to the worker process:"
_CLOSED_SOCKET = ("BrokenPipeError", "ConnectionResetError")
# What a JVM that cannot start prints after the reason, whatever the reason.
_JVM_BOILERPLATE = ("Error: Could not create the Java Virtual Machine.",
                    "Error: A fatal exception has occurred.")
_PYSPARK_FRAME = "/pyspark/"  # pyspark's own worker code (daemon.py, worker_util.py)
_STDLIB_FRAME = "/lib/python3"  # Python's own modules (socket.py, contextlib.py)

SPARK_LOG_NAME = "spark.log"

console = logging.getLogger("spark.console")


def spark_log_path(config: ServiceConfig) -> Path | None:
    """Where the JVM's stderr goes: `[service] spark-log`, else `spark.log` in the first
    pipeline's checkpoint directory if that is on this machine; None ("off", or a remote
    first checkpoint and no `spark-log`) drops it."""
    if config.spark_log == SPARK_LOG_OFF:
        return None
    if config.spark_log is not None:
        return Path(config.spark_log).expanduser()
    first = config.pipelines[0].checkpoint if config.pipelines else \
        config.templates[0].checkpoint
    checkpoint = local_path(first)
    return None if checkpoint is None else checkpoint / SPARK_LOG_NAME


class TracebackFilter:
    """Passes lines through, except the tracebacks of Spark's Python workers whose last
    error is a socket the JVM side closed (`_CLOSED_SOCKET`) in pyspark's own code: a query
    stopped while its streaming source's process waits for a call (`EOFError`, then
    `BrokenPipeError` writing that back), or while the daemon flushes a worker's output. A
    traceback is held until the line after its last error line, chained ones included,
    says it is whole."""

    def __init__(self) -> None:
        self._held: list[str] = []
        self._error: str | None = None  # the held traceback's last error line so far

    def feed(self, line: str) -> list[str]:
        """The lines to write now, `line` included or held."""
        if not self._held:
            if line.startswith((_TRACEBACK, _DAEMON_NOTE)):
                self._held = [line]
                return []
            return [line]
        if line.startswith(_TRACEBACK) and self._error is not None:
            return self.flush() + self.feed(line)  # another traceback, not a chained one
        part_of_it = (not line.strip() or line.startswith((" ", "\t", _TRACEBACK, *_CHAINED))
                      or self._error is None)
        if part_of_it:
            self._held.append(line)
            if line.startswith(_CHAINED):
                self._error = None  # another traceback follows, with its own error line
            elif self._error is None and line.strip() and \
                    not line.startswith((" ", "\t", _TRACEBACK)):
                self._error = line
            return [] if len(self._held) < MAX_HELD_LINES else self.flush()
        return self.flush() + self.feed(line)

    def flush(self) -> list[str]:
        """The held traceback, unless it is a worker's of a closed socket (at a line after
        it, or at the end of the stream)."""
        held, error = self._held, self._error
        self._held, self._error = [], None
        if error is not None and error.startswith(_CLOSED_SOCKET) and _in_plumbing(held):
            return []
        return held


def _in_plumbing(traceback: list[str]) -> bool:
    """Whether the last traceback of a chain ran only in pyspark's worker code and Python's
    own (a socket pyspark was writing to closed), not in meltwater's or any other."""
    last = max(i for i, line in enumerate(traceback) if line.startswith(_TRACEBACK))
    frames = [line.strip() for line in traceback[last:] if line.startswith('  File "')]
    return bool(frames) and all(
        _PYSPARK_FRAME in frame or frame.startswith('File "<frozen ')
        or (_STDLIB_FRAME in frame and "-packages/" not in frame) for frame in frames)


class _SparkLogFile(logging.handlers.RotatingFileHandler):
    """The Spark log file. A line it cannot write (a full disk) is lost quietly: logging's
    own complaint, a traceback on stderr, would land in the service's log."""

    def handleError(self, _record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        return


class SparkOutput:
    """The JVM's stdout and stderr, read by two threads of this process (see the module
    doc). `streams()` gives the descriptors to start the JVM with; `started()` is called
    once it has been."""

    def __init__(self, log_path: Path | None, *, json_lines: bool,
                 stdout: TextIO | None = None) -> None:
        self.log_path = log_path
        self.json_lines = json_lines
        self.stdout = stdout or sys.stdout
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._file = logging.getLogger("meltwater.spark-log")  # never the service's log
        self._file.propagate = False
        self._file.setLevel(logging.INFO)
        for old in list(self._file.handlers):
            self._file.removeHandler(old)
            old.close()
        handler: logging.Handler = logging.NullHandler()
        if log_path is not None:
            handler = _SparkLogFile(log_path, maxBytes=MAX_LOG_BYTES, backupCount=1,
                                    encoding="utf-8", delay=True)  # no file until it prints
            handler.setFormatter(logging.Formatter("%(message)s"))
        self._file.addHandler(handler)
        self._write_ends: list[int] = []
        self._readers: list[threading.Thread] = []

    def streams(self) -> dict[str, Any]:
        """`Popen` arguments sending the JVM's stdout and stderr here; the threads reading
        them run before the JVM starts, so it never blocks on a full pipe."""
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        readers = {"stdout": self._relay_stdout, "stderr": self._relay_stderr}
        kwargs: dict[str, Any] = {}
        for name, relay in readers.items():
            read_end, write_end = os.pipe()
            self._write_ends.append(write_end)
            kwargs[name] = write_end
            reader = threading.Thread(target=relay, args=(os.fdopen(read_end, "rb"),),
                                      name=f"meltwater-spark-{name}", daemon=True)
            reader.start()
            self._readers.append(reader)
        return kwargs

    def started(self) -> None:
        """Close this process's copies of the pipes' write ends: the JVM has its own, and a
        reader then sees the end of its stream when the JVM exits."""
        for fd in self._write_ends:
            os.close(fd)
        self._write_ends = []

    def last_line(self, timeout_s: float = 5.0) -> str | None:
        """The last line the JVM printed on stderr that says why it exited (not the JVM's
        own `Error: Could not create the Java Virtual Machine.`): read once the readers
        have drained its pipes (for up to `timeout_s`)."""
        self.started()
        for reader in self._readers:
            reader.join(timeout_s)
        lines = [line.strip() for line in self.tail if line.strip()]
        telling = [line for line in lines if not line.startswith(_JVM_BOILERPLATE)]
        said = telling or lines
        return said[-1] if said else None

    def _relay_stderr(self, pipe: BinaryIO) -> None:
        traceback_filter = TracebackFilter()
        with pipe:
            for raw in pipe:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                self.tail.append(line)
                for kept in traceback_filter.feed(line):
                    self._file.info(kept)
        for kept in traceback_filter.flush():
            self._file.info(kept)

    def _relay_stdout(self, pipe: BinaryIO) -> None:
        with pipe:
            for raw in pipe:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                if self.json_lines:
                    console.info(line)
                else:
                    self.stdout.write(line + "\n")
                    self.stdout.flush()
