"""The `meltwater` console script's entry point.

It chooses Arrow's allocator (`choose_arrow_allocator`) before anything loads Arrow, which
reads that choice once, when it loads; then it runs the CLI (`meltwater.cli.main`), whose
imports load Arrow. Importing `meltwater.cli.main` in a process of one's own (a test, a
notebook) leaves that process's allocator alone.
"""

from __future__ import annotations

from meltwater.cli.arrow_memory import choose_arrow_allocator


def main() -> int:
    """Choose Arrow's allocator, then run the CLI; returns its exit status (a one-shot
    command ends the process itself once done: `meltwater.cli.main.main`)."""
    choose_arrow_allocator()
    from meltwater.cli.main import main as run

    return run(exit_when_done=True)
