"""SIGTERM and Ctrl-C as exceptions that a library cannot swallow.

Python turns Ctrl-C (SIGINT) into KeyboardInterrupt, which runs every `finally` and
context manager on its way out; SIGTERM's default action kills the process on the spot,
leaving whatever it was writing half done (an `--output` file's temporary sibling, see
`meltwater.stream.engine.output_file`). Under `signals_raise()` SIGTERM raises `Terminated` in the
main thread and SIGINT raises KeyboardInterrupt, so both take the same cleanup path.

An exception raised from a signal handler lands wherever the main thread happens to be,
and libraries turn some of them into their own errors: pyarrow imports `zoneinfo` lazily
and reports *any* failure of that import, our `Terminated` included, as
`ArrowInvalid: The zoneinfo module or pytz package must be installed`. So the handler also
records the signal, and `received()` lets the command's caller report the signal (exit
130 or 143) rather than whatever error the interrupted code raised instead. A second
signal of the same kind gets the default action: the process dies at once, as asked.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports a process Ctrl-C ended
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143

_received: list[int] = []  # the signals taken inside signals_raise(), in order


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as KeyboardInterrupt is for SIGINT."""


def _raise(signum: int, _frame: Any) -> None:
    _received.append(signum)
    signal.signal(signum, signal.SIG_DFL)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def received() -> int | None:
    """The first signal taken inside `signals_raise()`, if any."""
    return _received[0] if _received else None


@contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` and SIGINT KeyboardInterrupt, and both
    are recorded (`received`); the previous handlers come back after."""
    try:
        previous = {signum: signal.signal(signum, _raise)
                    for signum in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
