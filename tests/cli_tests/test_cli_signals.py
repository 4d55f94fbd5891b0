"""A signal taken by the CLI ends the command as that signal, whatever the code it
interrupted turned it into (pyarrow reports a failed lazy import, our `Terminated`
included, as `ArrowInvalid`)."""

from __future__ import annotations

import signal

import pyarrow as pa
import pytest

from meltwater.cli import main as cli_main
from meltwater.cli import signals as cli_signals
from meltwater.cli import snapshots_run


def _swallowing(signum: int):
    """A command that takes `signum` inside code that turns any exception into its own."""

    def command(_args) -> int:
        try:
            signal.raise_signal(signum)
            for _ in range(1_000_000):  # the Python-level handler runs within a few steps
                pass
        except BaseException:  # noqa: BLE001  (whatever the handler raised stands in for Arrow's)
            raise pa.ArrowInvalid("The zoneinfo module or pytz package must be installed.") \
                from None
        raise AssertionError("the signal's handler never ran")

    return command


@pytest.mark.parametrize(("signum", "status", "line"),
                         [(signal.SIGTERM, 143, "meltwater: terminated"),
                          (signal.SIGINT, 130, "meltwater: interrupted")])
def test_a_signal_turned_into_another_error_still_ends_as_the_signal(
        monkeypatch, capsys, signum, status, line):
    monkeypatch.setattr(snapshots_run, "cmd_snapshots", _swallowing(signum))
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(cli_signals, "_received", [], raising=False)
    assert cli_main.main(["snapshots", "/nowhere"]) == status
    assert capsys.readouterr().err.strip() == line
    assert {s: signal.getsignal(s) for s in previous} == previous  # handlers restored
