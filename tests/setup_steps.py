"""`announce(line)`: a line about a long set-up step, shown on the terminal while it runs.

The session fixtures build things that take minutes the first time (the Iceberg Java writer
environment, the corpus, the S3 corpus). pytest captures what fixtures print and shows it
only with a failing test's report, so a plain print would leave a newcomer staring at
minutes of silence; these lines go around the capture to the terminal, as `capsys.disabled()`
does. tests/conftest.py hands it the run's configuration (`use`).
"""

from __future__ import annotations

import pytest

_config: pytest.Config | None = None


def use(config: pytest.Config) -> None:
    """Announce through this run's terminal (called from `pytest_configure`)."""
    global _config
    _config = config


def announce(line: str) -> None:
    """Write `line` to the terminal now, on a line of its own, whatever pytest captures."""
    plugins = _config.pluginmanager if _config is not None else None
    capture = plugins.getplugin("capturemanager") if plugins else None
    terminal = plugins.getplugin("terminalreporter") if plugins else None
    if capture is None or terminal is None:  # outside a pytest run, or with -p no:terminal
        print(line, flush=True)
        return
    with capture.global_and_fixture_disabled():
        terminal.write_line(line, flush=True)
