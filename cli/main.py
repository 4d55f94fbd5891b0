"""Entry point of the `meltwater` console script.

Each command module registers its commands, each with its own argparse sub-parser.
Errors that are the user's (a `MeltwaterError`, or a command line argparse refuses) print
one line and exit with status 2; anything else is a bug and keeps its traceback. Ctrl-C
and SIGTERM unwind through the same cleanup (`meltwater.cli.signals`: an `--output` file is
left as it was) and exit with the statuses a shell gives those signals, 130 and 143; a
one-shot command ends so within 2 s even when a call in C holds it (its watchdog). A
reader that closes our output early (`meltwater scan T | head`) ends the command quietly
with status 0, as it ends `cat` or `grep`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import importlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from meltwater.cli import change_commands, serve_command, signals, table_commands, watch_command
from meltwater.cli.arrow_memory import use_command_memory_pool
from meltwater.cli.import_guard import keep_pandas_and_numpy_out
from meltwater.cli.signals import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from meltwater.planner.errors import MeltwaterError

Handler = Callable[[argparse.Namespace], int]
# A command's handler: the function, or "module:function" for one whose module loads what
# building the parser must not (Arrow, the planner): it is imported when the command runs.
HandlerRef = Handler | str
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # what only writing raises


def _own_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("meltwater")
    except metadata.PackageNotFoundError:
        return "(not installed)"


class _VersionAction(argparse.Action):
    """`--version`: looks the version up only when asked (importlib.metadata would add to
    every command's start-up otherwise)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help=str(kwargs.get("help", "")))

    def __call__(self, parser: argparse.ArgumentParser, _namespace: argparse.Namespace,
                 _values: object, _option_string: str | None = None) -> None:
        print(f"meltwater {_own_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _version(_: argparse.Namespace) -> int:
    from importlib import metadata

    for dist in ("meltwater", "pyarrow", "fastavro", "pyspark", "watchdog"):
        try:
            print(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            print(f"{dist} (not installed)")
    return 0


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose refusals are one line on stderr, exit status 2: the error
    naming the command, without the usage summary argparse prints above it (`--help` has
    that)."""

    command_parsers: Mapping[str, argparse.ArgumentParser]  # the root's: each command's

    def error(self, message: str) -> NoReturn:
        """Refuse the command line in one line (argparse's own words) and exit with 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> OneLineParser:
    """The CLI's parser, every command registered."""
    parser = OneLineParser(
        prog="meltwater",
        description="Change streams from Apache Iceberg tables.",
    )
    parser.add_argument("--version", action=_VersionAction,
                        help="print meltwater's version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    parser.command_parsers = commands.choices
    version = commands.add_parser("version", help="print the versions of meltwater and its engines")
    version.set_defaults(handler=_version, one_shot=True, uses_arrow=False)
    table_commands.register(commands)
    change_commands.register(commands)
    serve_command.register(commands)
    watch_command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None, *, exit_when_done: bool = False) -> int:
    """Run the CLI: the exit status, with meltwater's errors and signals turned into messages and
    codes.

    With `exit_when_done` (the console script's), a one-shot command (`scan`, `changes`,
    `plan`, `snapshots`, `version`) ends the process as soon as its output is flushed,
    without the interpreter's teardown: finalizing some hundreds of modules and joining
    Arrow's thread pools took time after a scan to Parquet had written and renamed its file
    (the memory is the kernel's to free either way). Commands that run a service or Spark
    always end the ordinary way, as does a process with threads still at work. Such a
    command's process also never loads pandas or numpy (`meltwater.cli.import_guard`)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused by the command's own parser, so the line names the command
        parser.command_parsers[args.command].error(
            f"unrecognized arguments: {' '.join(extra)}")
    one_shot_process = exit_when_done and getattr(args, "one_shot", False)
    if one_shot_process:
        keep_pandas_and_numpy_out()
    status = _run(args)
    if one_shot_process:
        _end_now(status)
    return status


def _end_now(status: int) -> None:
    """End the process with `status` once stdout and stderr are flushed, unless a thread
    other than daemons is still at work (an ordinary exit would wait for it)."""
    if _threads_at_work():
        return
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed when the process started (`>&-`): nothing to flush
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone, or closed: nothing more to say
            return
    os._exit(status)


def _threads_at_work() -> bool:
    """Whether a thread other than the main one and daemons is alive: an ordinary exit would
    wait for it, so ending the process now could cut its work short."""
    return any(t.is_alive() and not t.daemon for t in threading.enumerate()
               if t is not threading.main_thread())


def resolve_handler(ref: HandlerRef) -> Handler:
    """The function a command runs, its module imported now if the parser named it
    ("module:function")."""
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    handler: Handler = getattr(importlib.import_module(module), name)
    return handler


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command: its exit status (see `main`)."""
    handler = resolve_handler(args.handler)
    if getattr(args, "uses_arrow", True):
        use_command_memory_pool()
    # What start-up made (modules, the parser) lives as long as the process: frozen, it is
    # not walked again by every collection while a command runs.
    gc.freeze()
    try:
        with signals.signals_raise(watchdog=getattr(args, "one_shot", False)):
            try:
                return handler(args)
            except Exception as error:
                if signals.received() is not None:  # the signal came out as another error
                    raise _as_signal(signals.received()) from error
                if isinstance(error, BrokenPipeError) and _reader_gone():
                    return 0
                if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
                    # what only writing raises, and all but stdout (`--output`) say so already
                    _quiet_stdout()
                    print(f"meltwater: cannot write to stdout: {error.strerror}",
                          file=sys.stderr)
                    return 2
                if not isinstance(error, MeltwaterError):
                    raise  # a bug: keep its traceback
                print(f"meltwater: {error}", file=sys.stderr)
                return error.exit_code
    except KeyboardInterrupt:
        print("meltwater: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("meltwater: terminated", file=sys.stderr)
        return EXIT_TERMINATED


def _as_signal(signum: int | None) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: what its buffer still holds would fail again at exit."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _reader_gone() -> bool:
    """Whether a BrokenPipeError is our stdout's (or stderr's) reader having closed it, as
    `head` does once it has its lines; if so, both are pointed at /dev/null so nothing left
    in their buffers fails again at exit. A broken pipe anywhere else is no such ending."""
    gone = []
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            poll = select.poll()
            poll.register(fd, select.POLLOUT)
            if any(events & select.POLLERR for _, events in poll.poll(0)):
                gone.append(fd)
        except (AttributeError, OSError, ValueError):  # closed, replaced or not a file
            continue
    if not gone:
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in gone:
        os.dup2(devnull, fd)
    os.close(devnull)
    return True

if __name__ == "__main__":
    sys.exit(main())
