"""SIGTERM and Ctrl-C as exceptions that a library cannot swallow, and an end that a call
blocked in C cannot hold up.

Python turns Ctrl-C (SIGINT) into KeyboardInterrupt, which runs every `finally` and
context manager on its way out; SIGTERM's default action kills the process on the spot,
leaving whatever it was writing half done (an `--output` file's temporary sibling, see
`meltwater.output.files`). Under `signals_raise()` SIGTERM raises `Terminated` in the
main thread and SIGINT raises KeyboardInterrupt, so both take the same cleanup path.

An exception raised from a signal handler lands wherever the main thread happens to be,
and libraries turn some of them into their own errors: pyarrow imports `zoneinfo` lazily
and reports *any* failure of that import, our `Terminated` included, as
`ArrowInvalid: The zoneinfo module or pytz package must be installed`. So the handler also
records the signal, and `received()` lets the command's caller report the signal (exit
130 or 143) rather than whatever error the interrupted code raised instead.

Python runs a handler only when the main thread is back in the interpreter, and a call in
C may not come back: pyarrow opening a data file that is a FIFO no writer opens, or reading
from a store that never sends a byte, held a scan for as long as it waited, signals and
all. So a one-shot command runs with a watchdog (`signals_raise(watchdog=True)`): a thread
that hears of each signal through Python's wakeup file descriptor, which the interpreter
writes from its C-level handler whatever the main thread is doing. If the main thread has
not unwound `GRACE_SECONDS` after the first signal, the watchdog removes the unfinished
output files (`remove_unfinished`), prints the line the command would have printed and
ends the process with the signal's status. A second signal ends it so at once, as asked.
Without the watchdog (a service, which stops in its own time) a second signal of the same
kind gets the default action: the process dies at once.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from meltwater.output.files import remove_unfinished

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports a process Ctrl-C ended
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
LINES: dict[int, str] = {signal.SIGINT: "meltwater: interrupted",
                        signal.SIGTERM: "meltwater: terminated"}
# How long the main thread has to unwind after a signal before the watchdog ends the
# process: time for every `finally` of a command that is in Python, and under the 2 s a
# person waits before pressing Ctrl-C again.
GRACE_SECONDS = 1.5
_ERASE_LINE = "\r\x1b[K"  # a progress line being drawn (`meltwater.cli.progress`)

_received: list[int] = []  # the signals taken inside signals_raise(), in order
_watched: list[bool] = []  # whether a watchdog is on duty: it ends the process on a second


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as KeyboardInterrupt is for SIGINT."""


def _raise(signum: int, _frame: Any) -> None:
    _received.append(signum)
    if len(_received) > 1 and _watched:
        return  # raised once already; the watchdog ends the process now
    if not _watched:
        signal.signal(signum, signal.SIG_DFL)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def received() -> int | None:
    """The first signal taken inside `signals_raise()`, if any."""
    return _received[0] if _received else None


@contextmanager
def signals_raise(*, watchdog: bool = False) -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` and SIGINT KeyboardInterrupt, and both
    are recorded (`received`); with `watchdog`, a signal also ends the process if the block
    has not unwound `GRACE_SECONDS` after it (see the module doc). The previous handlers
    come back after."""
    try:
        previous = {signum: signal.signal(signum, _raise) for signum in LINES}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    dog = _Watchdog() if watchdog else None
    try:
        yield
    finally:
        if dog is not None:
            dog.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Watchdog:
    """Ends the process when the main thread does not unwind after a signal (module doc)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # the interpreter's handler must never block
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._unwound = threading.Event()
        _watched.append(True)
        threading.Thread(target=self._watch, name="meltwater-signal-watchdog",
                         daemon=True).start()

    def stop(self) -> None:
        """The block has unwound: stand down (called in the main thread)."""
        self._unwound.set()
        signal.set_wakeup_fd(self._previous_fd)
        _watched.clear()
        os.close(self._write)  # the watchdog reads the end of the pipe and returns

    def _watch(self) -> None:
        first: int | None = None
        deadline = None
        try:
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                ready, _, _ = select.select([self._read], [], [], wait)
                if not ready:  # the grace is over and the block has not unwound
                    self._end(first)
                    return
                data = os.read(self._read, 64)
                if not data:  # stopped
                    return
                signums = [s for s in data if s in LINES]
                if not signums:
                    continue
                if first is not None or len(signums) > 1:  # a second signal: at once
                    self._end(first if first is not None else signums[0])
                    return
                first, deadline = signums[0], time.monotonic() + GRACE_SECONDS
        finally:
            os.close(self._read)

    def _end(self, signum: int | None) -> None:
        """Remove unfinished output, say why and end the process with the signal's status,
        unless the block unwound meanwhile (its own path then says so)."""
        if signum is None or self._unwound.is_set():
            return
        remove_unfinished()
        erase = _ERASE_LINE if _on_a_terminal() else ""
        with contextlib.suppress(OSError):
            os.write(2, f"{erase}{LINES[signum]}\n".encode())
        os._exit(128 + signum)


def _on_a_terminal() -> bool:
    try:
        return os.isatty(2) and os.environ.get("TERM") != "dumb"
    except OSError:
        return False
