"""Progress of long commands on stderr: drawn on a terminal, never into a pipe or a file.

The console script runs with stderr on a pseudo-terminal (`pty`), as a person at a
terminal runs it, and everything it draws there is read back. The first frame is drawn
at once (`MELTWATER_PROGRESS_DELAY=0`; by default quick commands show none). For frames
taken mid-read, the data file the table's last commit added is replaced by a FIFO: the
command writes the earlier commits' rows, then waits on the FIFO for as long as the test
reads the progress line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from table_copy import added_by_current_snapshot, relocated_copy

from meltwater.planner.table.table_loading import load_table

MELTWATER = str(Path(sys.executable).parent / "meltwater")
NOW = {"MELTWATER_PROGRESS_DELAY": "0", "TERM": "xterm"}
ERASE = "\r\x1b[K"
FRAME = re.compile(r"\r\x1b\[K([^\r]*)")


class Terminal:
    """The console script with stderr (and, if asked, stdout) on a pseudo-terminal."""

    def __init__(self, *args: str, stdout_too: bool = False, env: dict[str, str] | None = None,
                 stdout=subprocess.DEVNULL) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen([MELTWATER, *args], stdin=subprocess.DEVNULL,
                                        stdout=slave if stdout_too else stdout, stderr=slave,
                                        env={**os.environ, **NOW, **(env or {})})
        os.close(slave)
        self.seen = ""
        self.stdout = b""
        self._drain = None
        if self.process.stdout is not None:  # read it all, so the command never blocks on it
            self._drain = threading.Thread(target=self._read_stdout, daemon=True)
            self._drain.start()

    def _read_stdout(self) -> None:
        with self.process.stdout:
            self.stdout = self.process.stdout.read()

    def read_until(self, pattern: re.Pattern[str], timeout: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (found := pattern.search(self.seen)) is None:
            assert time.monotonic() < deadline, f"never drawn: {self.seen!r}"
            if not self._read(deadline - time.monotonic()):
                assert pattern.search(self.seen), f"never drawn: {self.seen!r}"
        return found

    def _read(self, timeout: float) -> bool:
        """Read what is there; False once the command has closed the terminal."""
        ready, _, _ = select.select([self.master], [], [], max(0.0, timeout))
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError as error:  # EIO: every writer is gone
            if error.errno != errno.EIO:
                raise
            return False
        self.seen += data.decode("utf-8", "replace")
        return bool(data)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        """The exit status and everything drawn (the terminal's \\n comes back as \\r\\n)."""
        deadline = time.monotonic() + timeout
        while self._read(deadline - time.monotonic()):
            assert time.monotonic() < deadline, "the command did not end"
        os.close(self.master)
        if self._drain is not None:
            self._drain.join(timeout)
        return self.process.wait(timeout=timeout), self.seen.replace("\r\n", "\n")


def _feed(fifo: Path, content: bytes) -> None:
    """Write `content` into the FIFO once the command opens it; the command may close it
    before reading it all (Arrow cannot seek in a FIFO), which is no failure here."""
    with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as writer:  # waits for it
        writer.write(content)


def test_changes_show_commits_files_rows_and_rate_while_they_read(corpus, tmp_path):
    """Mid-read, the line counts the commits done, the files planned and the rows written;
    past a second, the rate. It is erased before the command's last word (here an error:
    Arrow cannot seek in a FIFO), which stands alone on its line."""
    table = relocated_copy(corpus.scenarios["cow_partitioned"].location, tmp_path / "table")
    metadata = load_table(table).metadata
    commits = len(metadata.ancestors(metadata.current_snapshot_id))
    fifo = added_by_current_snapshot(table)
    content = fifo.read_bytes()
    fifo.unlink()
    os.mkfifo(fifo)
    out = tmp_path / "changes.jsonl"
    terminal = Terminal("changes", table, "--format", "jsonl", "--output", str(out))
    try:
        # frames drawn before the read reaches the FIFO show fewer commits: wait for the one
        # it blocks at (every commit but the last done)
        frame = terminal.read_until(re.compile(
            rf"changes …?\S*table: commit ({commits - 1}) of {commits} · (\d+) files · "
            r"([1-9][\d,]*) rows · "))
        assert int(frame[1]) == commits - 1 and int(frame[2]) > 0
        rows = frame[3]
        terminal.read_until(re.compile(rf"{rows} rows · [\d,]+ rows/s · 1\.\d s"))
    except BaseException:
        terminal.process.kill()
        raise
    _feed(fifo, content)
    status, drawn = terminal.finish()
    last = drawn.rsplit(ERASE, 1)[1]
    assert status == 2 and last.startswith(f"meltwater: {fifo}: ") and last.count("\n") == 1
    assert all(len(frame) < 80 for frame in FRAME.findall(drawn)[:-1])  # cut to the width
    assert not out.exists()


@pytest.mark.parametrize("into", ["output", "pipe"])
def test_a_scan_to_a_file_or_a_pipe_shows_files_and_rows(corpus, tmp_path, into):
    location = corpus.scenarios["mor_partitioned"].location
    files = len(_data_files(location))
    out = tmp_path / "rows.parquet"
    if into == "output":
        terminal = Terminal("scan", location, "--format", "parquet", "--output", str(out))
    else:
        terminal = Terminal("scan", location, "--format", "jsonl", stdout=subprocess.PIPE)
    status, drawn = terminal.finish()
    assert status == 0, drawn
    if into == "pipe":
        assert len(terminal.stdout.splitlines()) == 91  # the rows, untouched
    frames = FRAME.findall(drawn)
    assert frames and all(re.fullmatch(rf"scan …?\S*mor_partitioned: {files} files · [\d,]+ "
                                       r"rows( · [\d,]+ rows/s)? · \d+\.\d s", frame)
                          for frame in frames[:-1]), frames
    assert frames[-1] == ("wrote 91 rows to " + str(out) + "\n" if into == "output" else "")


def _data_files(location: str) -> set[str]:
    import meltwater.stream

    return {t.data_file.file_path for t in meltwater.stream.plan(location).tasks}


def test_no_progress_when_stderr_is_not_a_terminal(corpus, tmp_path):
    location = corpus.scenarios["mor_partitioned"].location
    out = tmp_path / "changes.csv"
    for command, args in (("changes", ["--format", "csv", "--output", str(out)]),
                          ("scan", ["--format", "jsonl"])):
        result = subprocess.run([MELTWATER, command, location, *args], capture_output=True,
                                text=True, timeout=120, env={**os.environ, **NOW})
        assert result.returncode == 0, result.stderr
        assert "\r" not in result.stderr and "\x1b" not in result.stderr
        assert result.stderr == ("" if command == "scan"
                                 else f"wrote {len(out.read_text().splitlines()) - 1} "
                                      f"change rows to {out}\n")


def test_no_progress_over_rows_printed_to_the_same_terminal_or_on_a_dumb_one(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    status, drawn = Terminal("scan", location, stdout_too=True).finish()
    assert status == 0 and "\x1b[K" not in drawn and drawn.endswith("(91 rows)\n")
    status, drawn = Terminal("changes", location, "--format", "jsonl", env={"TERM": "dumb"},
                             stdout=subprocess.PIPE).finish()
    assert (status, drawn) == (0, "")
