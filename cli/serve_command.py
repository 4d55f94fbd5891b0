"""`meltwater serve --config FILE`: the long-running service (see meltwater.service)."""

from __future__ import annotations

import argparse


def _serve(args: argparse.Namespace) -> int:
    from meltwater.service.config import load_config
    from meltwater.service.runner import serve

    config = load_config(args.config)
    if args.check:
        from meltwater.service.runner import preflight

        preflight(config)
        names = ", ".join(p.name for p in config.pipelines)
        count = len(config.pipelines)
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
                        help="validate the configuration and the tables it names, then exit")
    parser.set_defaults(handler=_serve)
