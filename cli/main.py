"""Entry point of the `meltwater` console script.

Subcommands register themselves in `COMMANDS`; each gets its own argparse sub-parser.
Errors that are the user's (a `MeltwaterError`) print one line and exit with status 2;
anything else is a bug and keeps its traceback. Ctrl-C and SIGTERM unwind through the same
cleanup (`meltwater.cli.signals`: an `--output` file is left as it was) and exit with the
statuses a shell gives those signals, 130 and 143.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from meltwater.cli import change_commands, serve_command, signals, table_commands, watch_command
from meltwater.cli.signals import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from meltwater.planner.errors import MeltwaterError

Handler = Callable[[argparse.Namespace], int]


def _version(_: argparse.Namespace) -> int:
    for dist in ("meltwater", "pyarrow", "fastavro", "pyspark", "watchdog"):
        try:
            print(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            print(f"{dist} (not installed)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser, every command registered."""
    parser = argparse.ArgumentParser(
        prog="meltwater",
        description="Change streams from Apache Iceberg tables.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    version = commands.add_parser("version", help="print the versions of meltwater and its engines")
    version.set_defaults(handler=_version)
    table_commands.register(commands)
    change_commands.register(commands)
    serve_command.register(commands)
    watch_command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI: the exit status, with meltwater's errors and signals turned into messages and
    codes."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        with signals.signals_raise():
            try:
                return handler(args)
            except Exception as error:
                if signals.received() is not None:  # the signal came out as another error
                    raise _as_signal(signals.received()) from error
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

if __name__ == "__main__":
    sys.exit(main())
