"""The live progress line: one line per table, where its sink is and how far behind.

On a terminal (`progress = "auto"`) the block of lines is redrawn in place twice a second;
elsewhere (`"lines"`, or `auto` into a file or pipe) a line is printed when it changes, so a
log file gets one line per batch rather than one per tick. With `log = "json"` each such
line is a JSON record (message `progress`, its values as fields) and never redrawn in
place, so that every line the service prints is one JSON object.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, TextIO

from meltwater.service.config_model import ProgressMode
from meltwater.service.logs import JsonFormatter
from meltwater.service.metrics import PipelineState
from meltwater.service.pipeline import PipelineRun

_SECONDS = re.compile(r"snapshots [0-9.]+s")


def progress_fields(run: PipelineRun) -> dict[str, Any]:
    """What a progress line says of a pipeline: its sink's snapshot and sequence number,
    the lag, rows per second, batches, and a state unless it runs."""
    state: str
    if run.query is None and run.failure is not None:
        state = f"{PipelineState.FAILED}: {run.failure.reason}"
    elif run.query is None and run.finished:
        state = PipelineState.FINISHED
    elif run.query is None and run.stopped:
        state = PipelineState.STOPPED
    elif run.query is None:
        state = PipelineState.RESTARTING if run.failures else PipelineState.STARTING
    else:
        state = PipelineState.RUNNING
    reached = run.reached
    snapshots, seconds = run.head.lag(reached)
    return {"pipeline": run.config.name, "snapshot": reached,
            "sequence_number": run.head.sequence_number(reached),
            "lag_snapshots": snapshots, "lag_seconds": round(seconds, 1),
            "rows_per_second": round(run.rows_per_second), "batches": run.last_batch + 1,
            "state": state}


def progress_line(run: PipelineRun) -> str:
    """`orders  snapshot 4411… seq 42  lag 0 snapshots 0.0s  1,204 rows/s  batches 17`."""
    values = progress_fields(run)
    reached = values["snapshot"]
    where = ("no snapshot yet" if reached is None
             else f"snapshot {reached} seq {values['sequence_number']}")
    parts = [f"{values['pipeline']:<16}", where,
             f"lag {values['lag_snapshots']} snapshots {values['lag_seconds']:.1f}s",
             f"{run.rows_per_second:,.0f} rows/s", f"batches {values['batches']}"]
    if values["state"] != PipelineState.RUNNING:
        parts.append(values["state"])
    return "  ".join(parts)


def _json_line(run: PipelineRun) -> str:
    record = logging.makeLogRecord({"name": "meltwater.progress", "levelno": logging.INFO,
                                    "levelname": "INFO", "msg": "progress",
                                    "fields": progress_fields(run)})
    return JsonFormatter().format(record)


class ProgressDisplay:
    """Prints the progress lines of `runs` to `stream` in `mode`, as JSON records with
    `json_lines`; AUTO redraws them in place on a terminal (`live`)."""

    def __init__(self, mode: ProgressMode, stream: TextIO | None = None, *,
                 json_lines: bool = False) -> None:
        self.stream = stream or sys.stdout
        interactive = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.off = mode == ProgressMode.OFF
        self.live = mode == ProgressMode.AUTO and interactive and not json_lines
        self.json_lines = json_lines
        self._last: list[str] = []
        self._drawn = 0

    def show(self, runs: list[PipelineRun]) -> None:
        """Print one progress line for each pipeline, redrawn in place on a terminal."""
        if self.off:
            return
        lines = [progress_line(run) for run in runs]
        if self.live:
            if self._drawn:
                self.stream.write(f"\x1b[{self._drawn}F")
            for line in lines:
                self.stream.write("\x1b[2K" + line + "\n")
            self._drawn = len(lines)
        else:
            for index, line in enumerate(lines):
                if index >= len(self._last) or _changed(self._last[index], line):
                    self.stream.write((_json_line(runs[index]) if self.json_lines else line)
                                      + "\n")
        self._last = lines
        self.stream.flush()


def _changed(old: str, new: str) -> bool:
    """A line changed in more than its clock: the lag's seconds tick on their own."""
    return _SECONDS.sub("", old) != _SECONDS.sub("", new)
