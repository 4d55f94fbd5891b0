"""Structured logs: key=value text for people, one JSON object per line for log shippers.

Log calls pass their fields in `extra={"fields": {...}}` (pipeline, batch, snapshot, rows,
...), so both formats carry the same data and a JSON line never needs parsing of a message.
Spark's and py4j's own chatter is turned down to warnings (py4j's tracebacks of errors in
callbacks, which the service reports as the query's failure, off). What Python itself would
print on stderr outside logging (a `warnings.warn`, an exception escaping a thread, an
error in a finalizer) is logged instead, so with `log = "json"` it is a JSON record too.
What Spark's JVM prints is not logged here at all (`meltwater.service.spark_output`).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any, TextIO

from meltwater.planner.str_enum import StrEnum


class LogFormat(StrEnum):
    """How the service's log lines are written (`[service] log`)."""

    TEXT = "text"  # short key=value lines, for people
    JSON = "json"  # one JSON object per line, for log shippers


class JsonFormatter(logging.Formatter):
    """Log records as one JSON object a line, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object: time, level, logger, message, its fields and any
        traceback."""
        document: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        document.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


def _text(value: object) -> str:
    """A field's value as a text line shows it: a mapping as `key:value,...`."""
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


class TextFormatter(logging.Formatter):
    """Log records as short readable lines, for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line: time, level, message and its fields as key=value."""
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        fields = getattr(record, "fields", {}) or {}
        text = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
        line = f"{stamp} {record.levelname.lower():7} {record.getMessage()}"
        if text:
            line += "  " + text
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(log_format: LogFormat, stream: TextIO | None = None,
                  level: int = logging.INFO) -> None:
    """Route meltwater's logs to `stream` (stderr) in `log_format`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == LogFormat.JSON else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # py4j logs each error raised in a callback (a mirror's foreachBatch) with its traceback;
    # the query then fails with it, and the service reports that, in meltwater's words.
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    logging.captureWarnings(True)
    threading.excepthook = _thread_failed
    sys.unraisablehook = _unraisable


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """An exception that escaped a thread: logged (Python would print its traceback)."""
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("meltwater.service").error(
        "a thread failed", exc_info=args.exc_value, extra=fields(thread=name))


def _unraisable(args: Any) -> None:
    """An exception Python cannot raise (in a finalizer, at exit): logged, not printed."""
    logging.getLogger("meltwater.service").warning(
        "ignored an exception", extra=fields(
            error=f"{args.exc_type.__name__}: {args.exc_value}",
            where=args.err_msg or repr(args.object)))


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a log call: `log.info("batch", extra=fields(pipeline=..., rows=...))`."""
    return {"fields": values}
