"""`meltwater serve --config FILE`: the long-running service (see meltwater.service)."""

from __future__ import annotations

import argparse
import sys


def _serve(args: argparse.Namespace) -> int:
    from meltwater.service.config import load_config
    from meltwater.service.runner import serve

    config = load_config(args.config)
    if args.check:
        from meltwater.service.runner import held_checkpoints, preflight

        for warning in [*preflight(config), *held_checkpoints(config)]:
            print(f"meltwater: warning: {warning}", file=sys.stderr)
        names = ", ".join([*(p.name for p in config.pipelines),
                           *(f"{t.name} (tables {t.pattern})" for t in config.templates)])
        count = len(config.pipelines) + len(config.templates)
        print(f"{args.config}: ok ({count} pipeline{'' if count == 1 else 's'}: {names})")
        return 0
    return serve(config)


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `serve` command to the CLI."""
    parser = commands.add_parser(
        "serve", help="keep sinks in step with Iceberg tables (a long-running service)",
        description="Run the pipelines of a TOML configuration until SIGTERM or SIGINT. "
                    "See deploy/ for example configurations.")
    parser.add_argument("--config", required=True, metavar="FILE", help="the TOML file")
    parser.add_argument("--check", action="store_true",
                        help="check the configuration, the tables, sinks, checkpoints and "
                             "status address it names, changing nothing, then exit (a "
                             "checkpoint a running service holds is warned of)")
    parser.set_defaults(handler=_serve)
