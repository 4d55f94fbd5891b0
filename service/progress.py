"""The live progress line: one line per table, where its sink is and how far behind.

On a terminal (`progress = "auto"`) the block of lines is redrawn in place twice a second;
elsewhere (`"lines"`, or `auto` into a file or pipe) a line is printed when it changes, so a
log file gets one line per batch rather than one per tick.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

from meltwater.service.pipeline import PipelineRun

_SECONDS = re.compile(r"snapshots [0-9.]+s")


def progress_line(run: PipelineRun) -> str:
    """`orders  snapshot 4411… seq 42  lag 0 snapshots 0.0s  1,204 rows/s  batches 17`."""
    name = run.config.name
    if run.query is None and run.failure is not None:
        state = "failed: " + run.failure.reason
    elif run.query is None and run.finished:
        state = "finished"
    elif run.query is None and run.stopped:
        state = "stopped"
    elif run.query is None:
        state = "restarting" if run.failures else "starting"
    else:
        state = ""
    reached = run.reached
    sequence = run.head.sequence_number(reached)
    where = "no snapshot yet" if reached is None else f"snapshot {reached} seq {sequence}"
    snapshots, seconds = run.head.lag(reached)
    parts = [f"{name:<16}", where, f"lag {snapshots} snapshots {seconds:.1f}s",
             f"{run.rows_per_second:,.0f} rows/s", f"batches {run.last_batch + 1}"]
    if state:
        parts.append(state)
    return "  ".join(parts)


class ProgressDisplay:
    """Prints the progress lines of `runs` to `stream` in `mode` (auto, lines, off)."""

    def __init__(self, mode: str, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        interactive = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.mode = ("live" if interactive else "lines") if mode == "auto" else mode
        self._last: list[str] = []
        self._drawn = 0

    def show(self, runs: list[PipelineRun]) -> None:
        """Print one progress line for each pipeline, redrawn in place on a terminal."""
        if self.mode == "off":
            return
        lines = [progress_line(run) for run in runs]
        if self.mode == "live":
            if self._drawn:
                self.stream.write(f"\x1b[{self._drawn}F")
            for line in lines:
                self.stream.write("\x1b[2K" + line + "\n")
            self._drawn = len(lines)
        else:
            for index, line in enumerate(lines):
                if index >= len(self._last) or _changed(self._last[index], line):
                    self.stream.write(line + "\n")
        self._last = lines
        self.stream.flush()


def _changed(old: str, new: str) -> bool:
    """A line changed in more than its clock: the lag's seconds tick on their own."""
    return _SECONDS.sub("", old) != _SECONDS.sub("", new)
