"""Calls that can wait on the network without end, bounded by the caller.

Some clients offer no timeout that covers a whole call: pyiceberg's HTTP catalog clients
carry none, and inside pyarrow's filesystems the Azure and Google credential lookups wait
on an identity or metadata endpoint that accepts a connection and never answers for many
minutes, whatever the storage client's own retry limit. A user must get an error naming
what did not answer instead, so such a call runs in a daemon thread that the caller waits
for at most so long. The thread goes on until the client gives up, but holds nobody up:
not the caller, not the interpreter's exit (a pool's worker threads would be joined at
exit), and the caller's wait is one a signal interrupts (Ctrl-C works during it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")


def call_within(call: Callable[[], T], seconds: float, timed_out: Callable[[], Exception],
                *, name: str = "meltwater-bounded") -> T:
    """`call()`'s result, or what it raised; `timed_out()` raised when it has not returned
    within `seconds`."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # noqa: BLE001 - handed to the caller, raised there
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=target, name=name, daemon=True).start()
    if not done.wait(seconds):
        raise timed_out()
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)
