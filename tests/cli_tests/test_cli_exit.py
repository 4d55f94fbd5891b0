"""The console script ends a one-shot command's process as soon as its output is flushed
(`meltwater.cli.main.main(exit_when_done=True)`), skipping the interpreter's teardown; a
service, a watch, or a process with threads still at work ends the ordinary way."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from meltwater.cli import main as cli


class _Ended(BaseException):
    def __init__(self, status: int) -> None:
        self.status = status


@pytest.fixture
def ended(monkeypatch) -> list[int]:
    """The statuses `os._exit` was called with; the call raises instead of ending pytest."""
    statuses: list[int] = []

    def fake_exit(status: int) -> None:
        statuses.append(status)
        raise _Ended(status)

    monkeypatch.setattr(cli.os, "_exit", fake_exit)
    return statuses


def test_a_one_shot_command_ends_the_process_once_done(ended, capsys, monkeypatch) -> None:
    # Other tests in this process may leave threads of their own (Spark's, a server's), so
    # the thread census is pinned here; the subprocess test below takes the real one.
    monkeypatch.setattr(cli, "_threads_at_work", lambda: False)
    with pytest.raises(_Ended):
        cli.main(["version"], exit_when_done=True)
    assert ended == [0]
    assert capsys.readouterr().out.startswith("meltwater ")


def test_in_process_callers_get_the_status_back(ended) -> None:
    assert cli.main(["version"]) == 0
    assert ended == []


def test_a_watch_ends_the_ordinary_way(ended, tmp_path) -> None:
    status = cli.main(["watch", str(tmp_path / "no-such-table"), "--interval", "inf"],
                      exit_when_done=True)
    assert status == 2
    assert ended == []


def test_a_thread_still_at_work_keeps_the_ordinary_exit(ended) -> None:
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        assert cli._threads_at_work()
        assert cli.main(["version"], exit_when_done=True) == 0
    finally:
        release.set()
        worker.join()
    assert ended == []


PROBE = ("import atexit, sys; "
         "atexit.register(lambda: print('teardown ran', file=sys.stderr)); "
         "sys.argv = ['meltwater', *sys.argv[1:]]; "
         "from meltwater.cli.entry import main; sys.exit(main())")


def test_the_console_script_entry_skips_teardown_for_one_shot_commands_only(tmp_path) -> None:
    quick = subprocess.run([sys.executable, "-c", PROBE, "version"], capture_output=True,
                           text=True, timeout=120)
    assert quick.returncode == 0 and quick.stdout.startswith("meltwater ")
    assert "teardown ran" not in quick.stderr
    ordinary = subprocess.run([sys.executable, "-c", PROBE, "watch", str(tmp_path / "none"),
                               "--interval", "inf"], capture_output=True, text=True,
                              timeout=120)
    assert ordinary.returncode == 2
    assert "teardown ran" in ordinary.stderr
