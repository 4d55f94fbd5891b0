"""SIGTERM as an exception, so a terminated command unwinds like an interrupted one.

Python turns Ctrl-C (SIGINT) into KeyboardInterrupt, which runs every `finally` and
context manager on its way out; SIGTERM's default action kills the process on the spot,
leaving whatever it was writing half done (an `--output` file's temporary sibling, see
`meltwater.stream.output_file`). Under `sigterm_raises()` SIGTERM raises `Terminated` in the
main thread instead, so both signals take the same cleanup path. A second SIGTERM while the
first is being handled gets the default action: the process dies at once, as asked.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports a process Ctrl-C ended
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as KeyboardInterrupt is for SIGINT."""


def _raise_terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated`; the previous handler comes back after."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
