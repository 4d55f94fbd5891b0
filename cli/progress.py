"""A progress line on stderr for long reads (`scan`, `changes`), for a person watching.

    scan /warehouse/db/orders: 37 files · 1,204,224 rows · 802,816 rows/s · 1.5 s
    changes /warehouse/db/orders: commit 3 of 10 · 91 files · 96,512 rows · 40,211 rows/s · 2.4 s

It is drawn only where a person sees it and nothing else is disturbed: stderr is a
terminal, and stdout is not the same terminal (rows printed there would be torn by the
line), which is the case with `--output`, or with stdout piped or redirected. Anywhere else
(a pipe, a log file, a service) nothing is drawn. The line is redrawn in place a few times
a second by a daemon thread, starts after `MELTWATER_PROGRESS_DELAY` seconds (default 0.3,
so quick commands show none) and is erased when the command ends, before any message.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

import pyarrow as pa

REDRAW_SECONDS = 0.2
DEFAULT_DELAY = 0.3
_ERASE = "\r\x1b[K"


def wanted(output: str | None) -> bool:
    """Whether to draw progress: stderr is a terminal that is not also where the rows go."""
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        if not sys.stderr.isatty():
            return False
        return bool(output) or not sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("MELTWATER_PROGRESS_DELAY", DEFAULT_DELAY)))
    except ValueError:
        return DEFAULT_DELAY


class Progress:
    """Counts rows as batches pass through `count` and redraws `command table: details ·
    rows · rate · elapsed` until `close`; a no-op unless `enabled`."""

    def __init__(self, command: str, table: str, *, enabled: bool,
                 details: Callable[[], list[str]] = list, stream: IO[str] | None = None) -> None:
        self.command = command
        self.table = table
        self.rows = 0
        self._details = details
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = enabled
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._drawn = False
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="meltwater-progress")
            self._thread.start()

    def count(self, reader: pa.RecordBatchReader,
              observe: Callable[[pa.RecordBatch], None] | None = None) -> pa.RecordBatchReader:
        """The same stream, its rows counted (and each batch shown to `observe`) as they are
        consumed."""
        if not self._enabled:
            return reader

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for batch in reader:
                    self.rows += batch.num_rows
                    if observe is not None:
                        observe(batch)
                    yield batch
            finally:
                reader.close()

        return pa.RecordBatchReader.from_batches(reader.schema, batches())

    def line(self, columns: int = 1_000) -> str:
        """The progress line as drawn now, at most `columns - 1` characters: a long table
        name loses its start, then the counts their end."""
        elapsed = time.monotonic() - self._started
        parts = [*self._details(), f"{self.rows:,} rows"]
        if elapsed >= 1:
            parts.append(f"{self.rows / elapsed:,.0f} rows/s")
        parts.append(f"{elapsed:.1f} s")
        counts = " · ".join(parts)
        table = self.table
        room = columns - 1 - len(f"{self.command} : {counts}")
        if len(table) > room:
            table = "…" + table[len(table) - max(0, room - 1):] if room > 8 else "…"
        text = f"{self.command} {table}: {counts}"
        return text if len(text) < columns else text[: max(0, columns - 2)] + "…"

    def _run(self) -> None:
        if self._stop.wait(_delay()):
            return
        while True:
            self._draw()
            if self._stop.wait(REDRAW_SECONDS):
                return

    def _draw(self) -> None:
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            columns = 0
        columns = columns or 80  # a terminal whose size was never set says 0
        try:
            self._stream.write(_ERASE + self.line(columns))
            self._stream.flush()
            self._drawn = True
        except (OSError, ValueError):  # the terminal went away: stop drawing
            self._stop.set()

    def close(self) -> None:
        """Stop drawing and erase the line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._drawn:
            try:
                self._stream.write(_ERASE)
                self._stream.flush()
            except (OSError, ValueError):
                pass
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
