"""Whole processes timed as a user runs them, with their peak memory and a time limit.

Each command is a separate process (interpreter start, imports, planning, reading, writing
its `--output` file). Its peak resident memory is the kernel's `ru_maxrss` for it, from
`wait4`'s rusage of the child. A command still running after its time limit is killed
(its whole process group) and recorded as "did not finish in T s"; it is not run again.

The order follows timing.measure_rounds: every command runs once untimed as a warm-up (its
output is the one the checks read), then `repeats` rounds run every command once, timed,
the order reversing every other round, so a burst of load from other work falls on all
commands alike; the figure is the median. A command whose warm-up took longer than `slow`
seconds is not run again: its warm-up is its one timed run (these are the rungs that take
minutes today; the report says "1 run"). Commands of one `series` (the rungs of one kind on
one table, in rising order) stop at the first that does not finish: the higher rungs are
recorded as not finishing either, without being run (each would hold the machine for the
whole time limit to say what the lower rung said).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Python's bytecode cache on for the children, as an installed package has it (see
# bench/cli_output.py).
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclass(frozen=True)
class ProcessRun:
    """One run of a command."""

    seconds: float
    cpu_seconds: float  # user + system, the child's (and its children's, as wait4 reports)
    max_rss_bytes: int
    exit_code: int | None  # None: killed at the time limit
    stderr_tail: str


# GNU time starts each command, when installed (Debian's `time`): Linux counts in a
# child's peak RSS (`ru_maxrss`) the memory of the process it was forked from, so a child
# forked straight from this bench (pyarrow loaded, tables read: ~180 MiB) reported at least
# that much, even for `meltwater --version`. GNU time is a few MiB, and it reports its own
# child's peak. Without it, the figure is wait4's, with that floor.
GNU_TIME = shutil.which("time", path="/usr/bin:/bin")


def run_process(argv: list[str], timeout: float, env: dict[str, str] | None = None,
                ) -> ProcessRun:
    """Run `argv` to its end or its time limit; its wall time, CPU time and peak RSS."""
    with tempfile.TemporaryFile() as stderr, \
            tempfile.NamedTemporaryFile("r", prefix="meltwater-rusage-") as rusage:
        launcher = [GNU_TIME, "-q", "-f", "%M %U %S", "-o", rusage.name] if GNU_TIME else []
        started = time.perf_counter()
        process = subprocess.Popen([*launcher, *argv], stdout=subprocess.DEVNULL,
                                   stderr=stderr, env=env or CHILD_ENV,
                                   start_new_session=True)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        elapsed = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        stderr.seek(0)
        tail = stderr.read().decode(errors="replace").strip().splitlines()[-3:]
        rss, cpu = usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime
        measured = rusage.read().split() if GNU_TIME else []
        if len(measured) == 3:  # the command's own, as GNU time saw it end
            rss, cpu = int(measured[0]) * 1024, float(measured[1]) + float(measured[2])
    return ProcessRun(elapsed, cpu, rss, None if killed.is_set() else process.returncode,
                      " | ".join(tail))


@dataclass
class Command:
    """A command to time; `output` is the file it writes. The warm-up's is kept as `kept`
    for the checks; every later run's is removed."""

    name: str
    argv: list[str]
    output: Path | None = None
    timeout: float = 600.0
    seconds: list[float] = field(default_factory=list)
    rss_bytes: list[int] = field(default_factory=list)
    error: str | None = None
    did_not_finish: float | None = None  # the time limit it ran into
    kept: Path | None = None
    series: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def peak_rss(self) -> int | None:
        return max(self.rss_bytes) if self.rss_bytes else None

    def as_json(self) -> dict:
        return {"argv": self.argv, "seconds": self.seconds, "median_seconds": self.median,
                "rss_bytes": self.rss_bytes, "peak_rss_bytes": self.peak_rss,
                "error": self.error, "did_not_finish_seconds": self.did_not_finish,
                "runs": len(self.seconds)}


def _run(command: Command, keep_output: bool) -> float | None:
    """One run; its seconds, or None if it failed or ran out of time (recorded)."""
    if command.output is not None:
        command.output.unlink(missing_ok=True)
    result = run_process(command.argv, command.timeout)
    command.rss_bytes.append(result.max_rss_bytes)
    if result.exit_code is None:
        command.did_not_finish = command.timeout
        command.error = f"did not finish in {command.timeout:.0f} s"
        return None
    if result.exit_code != 0:
        command.error = f"exit {result.exit_code}: {result.stderr_tail}"[:400]
        return None
    if command.output is not None:
        if keep_output:
            command.kept = command.output.with_name(f"checked-{command.output.name}")
            command.output.rename(command.kept)
        else:
            command.output.unlink(missing_ok=True)
    return result.seconds


def measure(commands: list[Command], repeats: int, slow: float,
            log: Callable[[str], None] = print) -> None:
    """A warm-up each (kept as the one timed run when slower than `slow` s), then
    `repeats` rounds of the others in alternating order; results land in the commands."""
    rounds: list[Command] = []
    stalled: dict[str, Command] = {}
    for command in commands:
        log(f"  {command.name} ...")
        lower = stalled.get(command.series or "")
        if lower is not None:
            command.did_not_finish = lower.did_not_finish
            command.error = (f"not run: {lower.name} did not finish in "
                             f"{lower.did_not_finish:.0f} s")
            log(f"    {command.error}")
            continue
        seconds = _run(command, keep_output=True)
        if command.did_not_finish is not None and command.series:
            stalled[command.series] = command
        if seconds is None:
            log(f"    {command.error}")
            continue
        if seconds > slow or repeats == 0:
            command.seconds.append(seconds)
            log(f"    {seconds:.2f} s (timed once: slower than {slow:.0f} s)")
        else:
            rounds.append(command)
            log(f"    warm-up {seconds:.2f} s")
    if rounds and repeats:
        log(f"  {repeats} rounds of {len(rounds)} commands ...")
    for round_ in range(repeats):
        for command in rounds if round_ % 2 == 0 else rounds[::-1]:
            if command.error is not None:
                continue
            seconds = _run(command, keep_output=False)
            if seconds is not None:
                command.seconds.append(seconds)
