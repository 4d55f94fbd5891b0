"""Why a pipeline's query failed, in meltwater's words, and whether restarting it can help.

A failure reaches the service in one of two shapes. Starting a query raises in the service's
own process: a meltwater error (a mirror's key is wrong), pyspark's AnalysisException, or
py4j's Py4JJavaError around a Java exception (`An error occurred while calling o99.start`);
`meltwater.stream.spark.spark_errors` reads what pyspark's exceptions carry.
A query that dies while running reports a StreamingQueryException whose text is Spark's:
the Java exception's message, a Python traceback where the error was raised in Python
(meltwater's data source in a Spark Python worker, or the mirror's `foreachBatch` in the
service's process), and a dump of the query's plan. Either way a meltwater error is named
in the text by its class, `meltwater.sinks.errors.DuplicateKeyError: <its message>`, the
last line of its traceback; `classify` finds that line, imports the class it names and
asks the class, so what may be retried is decided by the error types themselves
(`MeltwaterError.retryable`), never by the wording of a message.

What the service does (`Failure.action`):

- `RESTART`: the table's schema changed under the stream (`SchemaChangedError`): start
  the query again at once; it reads the new schema.
- `RETRY`: may heal by itself (a database, catalog or object store that did not answer;
  Spark's own trouble, which is everything meltwater cannot name): restart from the
  checkpoint with backoff.
- `STOP`: cannot heal (a null or duplicate key, a start snapshot the table does not have,
  a query Spark cannot analyze, a checkpoint under a regular file): the pipeline stops and
  `/health` answers 503 with the reason until the service is restarted, fixed.
- `EXIT`: the Spark session itself is broken (`java.io.OptionalDataException` in every task
  is the corrupted function environment `meltwater.stream.spark.query_start` explains);
  no query of this process can run again, so the service stops and exits 1 for its
  supervisor to start a fresh process.

`Failure.reason` is one line for logs and `/health`: meltwater's own message with its
class (`DuplicateKeyError: batch 3 of pipeline 'orders': key {'id': 7} arrives twice ...`),
else the Java exception's, else Spark's first line; never a stack frame or a line of a
plan, and never a URL's password.
"""

from __future__ import annotations

import enum
import importlib
import re
from dataclasses import dataclass

from meltwater.planner.errors import MeltwaterError, redact_url
from meltwater.stream.errors import SchemaChangedError
from meltwater.stream.spark.spark_errors import error_text, is_analysis_error


class Action(enum.Enum):
    """What the service does after a failure (see the module doc)."""

    RESTART = "restart"
    RETRY = "retry"
    STOP = "stop"
    EXIT = "exit"


# Java exceptions, by class, that no restart of the query heals. In the text of a failure
# they appear as `Caused by: <class>: ...` or `: <class>: ...`.
JAVA_STOP = (
    "org.apache.hadoop.fs.ParentNotDirectoryException",  # a checkpoint under a regular file
    "org.apache.hadoop.fs.FileAlreadyExistsException",  # a checkpoint that is a regular file
    "org.apache.hadoop.security.AccessControlException",  # a checkpoint it may not write
    "java.nio.file.AccessDeniedException",
)
# Java exceptions that mean this process's SparkSession can run nothing any more.
JAVA_EXIT = (
    "java.io.OptionalDataException",
)

_MELTWATER_LINE = re.compile(
    r"^\s*(meltwater(?:\.[a-z_][a-z0-9_]*)+)\.([A-Z][A-Za-z0-9]*Error): (.*?)\s*$", re.M)
_JAVA_LINE = re.compile(
    r"^[\s:]*(?:Caused by: )?((?:[a-z_$][\w$]*\.)+([A-Z][\w$]*(?:Exception|Error)))"
    r"(?:: (.*?))?\s*$", re.M)
_SPARK_SECTIONS = ("=== Streaming Query ===", "JVM stacktrace:")
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_CHAINED_TRACEBACK = ("During handling of the above exception",
                      "The above exception was the direct cause")
_PY4J_CALL = re.compile(r"^An error occurred while calling [\w.]+\.?$")
# `catalog.credential=id:secret` in a plan's options, `password=...` in a connection string
_SECRET_OPTION = re.compile(
    r"(\b[\w.-]*(?:credential|password|secret|token)[\w.-]*\s*=\s*)[^,\s\]\)}]+", re.I)
MAX_REASON = 500


@dataclass(frozen=True)
class Failure:
    """A classified failure: what to do, and the one line to say why."""

    action: Action
    reason: str
    error_class: type[BaseException] | None = None  # the meltwater error, when one is named


def classify(error: BaseException) -> Failure:
    """What the service does about `error`, raised by starting a query or reported by a
    failed one (see the module doc)."""
    if isinstance(error, MeltwaterError):
        return _meltwater(type(error), str(error))
    text = error_text(error)
    named = _named_meltwater_error(text)
    if named is not None:
        return _meltwater(*named)
    for names, action, note in ((JAVA_EXIT, Action.EXIT, " (the Spark session is unusable)"),
                                (JAVA_STOP, Action.STOP, "")):
        found = _java_named(text, names)
        if found is not None:
            return Failure(action, _reason(found + note))
    java = _java_exceptions(text)
    reason = _reason(_first_line(text, java))
    if is_analysis_error(error):
        return Failure(Action.STOP, reason)
    return Failure(Action.RETRY, reason)


def _meltwater(cls: type[BaseException], message: str) -> Failure:
    reason = _reason(f"{cls.__name__}: {message}")
    if issubclass(cls, SchemaChangedError):
        return Failure(Action.RESTART, reason, cls)
    retryable = bool(getattr(cls, "retryable", False))
    return Failure(Action.RETRY if retryable else Action.STOP, reason, cls)


def _named_meltwater_error(text: str) -> tuple[type[BaseException], str] | None:
    """The meltwater error a traceback in `text` ends with: the last line naming one (a
    chained traceback prints the error raised last, the one that escaped, last)."""
    for match in reversed(list(_MELTWATER_LINE.finditer(text))):
        module_name, class_name, message = match.groups()
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cls = getattr(module, class_name, None)
        if isinstance(cls, type) and issubclass(cls, MeltwaterError):
            return cls, message
    return None


def _java_exceptions(text: str) -> list[tuple[str, str]]:
    """(class, message) of the Java exceptions `text` names at the start of a line, in order."""
    return [(m.group(1), m.group(3) or "") for m in _JAVA_LINE.finditer(text)
            if not m.group(1).startswith(("meltwater.", "py4j.protocol"))]


def _java_named(text: str, names: tuple[str, ...]) -> str | None:
    """`Class: message` of the first of these Java exceptions `text` names anywhere (Spark
    quotes a task's exception inside its own message: `... most recent failure: Lost task
    0.0 ...: java.io.OptionalDataException`)."""
    for name in names:
        match = re.search(rf"(?<![\w.$]){re.escape(name)}(?![\w$])(?::[ \t]*([^\n]*))?", text)
        if match is not None:
            return f"{_short(name)}: {match.group(1) or ''}".rstrip(": ")
    return None


def _short(java_class: str) -> str:
    return java_class.rsplit(".", 1)[-1]


def _first_line(text: str, java: list[tuple[str, str]]) -> str:
    """Spark's own first words: the message above its query dump, without py4j's `An error
    occurred while calling ...`; the first Java exception named, if that is all there is."""
    for section in _SPARK_SECTIONS:
        text = text.split(section, 1)[0]
    for line in text.splitlines():
        line = line.strip().lstrip(": ").strip()
        if not line or _PY4J_CALL.match(line):
            continue
        match = _JAVA_LINE.match(line)
        if match is not None:
            return f"{match.group(2)}: {match.group(3) or ''}".rstrip(": ")
        if line.endswith(_TRACEBACK_HEAD):  # Spark's words, then a Python worker's traceback
            error = _python_error(text)
            if error is not None:
                return f"{line[:-len(_TRACEBACK_HEAD)].rstrip()} {error}"
        return line
    if java:
        return f"{_short(java[0][0])}: {java[0][1]}".rstrip(": ")
    return "(no message)"


def _python_error(text: str) -> str | None:
    """The error line a Python traceback in `text` ends with (the last of a chain): what
    went wrong in a Spark Python worker (`ModuleNotFoundError: No module named ...`), where
    the first line says only that a traceback follows."""
    found = None
    in_traceback = False
    for line in text.splitlines():
        if line.startswith(_TRACEBACK_HEAD) or line.endswith(_TRACEBACK_HEAD):
            in_traceback = True
        elif in_traceback and line.strip() and not line[0].isspace() \
                and not line.startswith(_CHAINED_TRACEBACK):
            found, in_traceback = line.strip(), False
    return found


def _reason(line: str) -> str:
    """One line, without secrets, of at most MAX_REASON characters."""
    line = redact(" ".join(line.split()))
    return line if len(line) <= MAX_REASON else line[:MAX_REASON - 1] + "…"


def redact(text: str) -> str:
    """`text` without URL passwords or values of options named like secrets."""
    return _SECRET_OPTION.sub(r"\1***", redact_url(text))
