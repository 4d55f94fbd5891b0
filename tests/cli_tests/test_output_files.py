"""`--output` files are whole or absent: the console script as a user runs it, made to fail
or be signalled mid-write on damaged copies of Iceberg Java corpus tables.

The failure is deterministic in each case. An unreadable data file is one the current
snapshot added: `changes` reads it with the last commit, after the earlier commits' rows
were written; `scan` reads it after the readable files, since a file whose footer does not
parse leaves Arrow's bulk scan for the per-task path. For a signal, that file is a FIFO:
the command cannot finish before the test writes into it. The test waits for the
temporary output file to appear (the signal handler is in place by then and the target
was opened), sends the signal, then feeds the FIFO so the command, wherever the signal
found it, runs on into its pending signal. The test feeds it only once a thread of the
command has taken the signal: on a busy machine the thread Linux picks may run late, and
the main thread must not get out of the handler's reach first.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from table_copy import added_by_current_snapshot, relocated_copy

from meltwater.planner.table.table_loading import load_table

MELTWATER = str(Path(sys.executable).parent / "meltwater")
OLD_BYTES = b"an earlier output, to be left as it was\n"
SCENARIO = "cow_partitioned"  # no delete files: a relocated copy reads like the original


@pytest.fixture
def table_copy(corpus, tmp_path) -> str:
    return relocated_copy(corpus.scenarios[SCENARIO].location, tmp_path / "table")


def prepare_target(directory: Path, name: str, existing: bool) -> Path:
    directory.mkdir()
    target = directory / name
    if existing:
        target.write_bytes(OLD_BYTES)
    return target


def assert_left_as_it_was(target: Path, existing: bool) -> None:
    """The target holds its old bytes (or is absent) and nothing else is in its directory."""
    expected = [target.name] if existing else []
    assert sorted(os.listdir(target.parent)) == expected, "a partial or temporary file is left"
    if existing:
        assert target.read_bytes() == OLD_BYTES


CASES = [("scan", "table"), ("scan", "jsonl"), ("scan", "csv"), ("scan", "parquet"),
         ("changes", "jsonl"), ("changes", "csv"), ("changes", "parquet"),
         ("changes", "debezium-jsonl")]


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize(("command", "fmt"), CASES, ids=[f"{c}-{f}" for c, f in CASES])
def test_a_failure_mid_write_leaves_no_file_and_an_existing_one_untouched(
        table_copy, tmp_path, command, fmt, existing):
    whole = subprocess.run([MELTWATER, command, table_copy, "--format", fmt, "--output",
                            str(tmp_path / "undamaged")], capture_output=True, text=True,
                           timeout=120)
    assert whole.returncode == 0, whole.stderr  # the copy reads before it is damaged
    broken = added_by_current_snapshot(table_copy)
    broken.write_bytes(b"PAR1 not really")
    target = prepare_target(tmp_path / "out", f"result.{fmt}", existing)
    result = subprocess.run([MELTWATER, command, table_copy, "--format", fmt, "--output",
                             str(target)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"meltwater: {broken}: not a readable Parquet file "
                                          "(Parquet magic bytes not found in footer. Either the "
                                          "file is corrupted or this is not a parquet file.)"]
    assert_left_as_it_was(target, existing)


def _default_sigint() -> None:
    """In the child: SIGINT as a terminal gives it, even under a parent that ignores it
    (Python makes KeyboardInterrupt of SIGINT only when it is not ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _output_opened(target: Path, existing: bool, process: subprocess.Popen) -> list[str]:
    """Wait until the command has opened its output (a file beside the target, or the
    target itself created or truncated); the names then in the target's directory."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        names = sorted(os.listdir(target.parent))
        if names != ([target.name] if existing else []) or (
                existing and target.read_bytes() != OLD_BYTES):
            return names
        time.sleep(0.01)
    raise AssertionError("the command never opened its output")


def _wait_until_taken(process: subprocess.Popen, signum: int) -> None:
    """Wait until the kernel has handed `signum` to one of the command's threads (Linux's
    shared pending mask no longer holds it): its handler has then recorded it, so the
    command meets it before it can return, whichever thread took it."""
    bit = 1 << (signum - 1)
    status = Path(f"/proc/{process.pid}/status")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        if not int(fields["ShdPnd"], 16) & bit:
            return
        time.sleep(0.001)


def _feed_once_opened(fifo: Path, content: bytes, process: subprocess.Popen) -> None:
    """Write `content` into the FIFO once the command opens it (if it still does)."""
    while process.poll() is None:
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:  # ENXIO: no reader yet
            if error.errno != errno.ENXIO:
                raise
            time.sleep(0.01)
            continue
        try:
            os.set_blocking(writer, True)
            os.write(writer, content)
        except BrokenPipeError:  # the command closed the file before reading it all
            pass
        finally:
            os.close(writer)
        return


SIGNAL_CASES = [("jsonl", signal.SIGTERM), ("parquet", signal.SIGTERM),
                ("debezium-jsonl", signal.SIGTERM), ("csv", signal.SIGINT),
                ("parquet", signal.SIGINT)]


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize(("fmt", "signum"), SIGNAL_CASES,
                         ids=[f"{f}-{s.name}" for f, s in SIGNAL_CASES])
def test_a_signal_mid_write_leaves_no_file_and_an_existing_one_untouched(
        table_copy, tmp_path, fmt, signum, existing):
    fifo = added_by_current_snapshot(table_copy)
    content = fifo.read_bytes()
    fifo.unlink()
    os.mkfifo(fifo)
    target = prepare_target(tmp_path / "out", f"result.{fmt}", existing)
    process = subprocess.Popen([MELTWATER, "changes", table_copy, "--format", fmt,
                                "--output", str(target)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_default_sigint)
    try:
        opened = [n for n in _output_opened(target, existing, process) if n != target.name]
        assert len(opened) == 1 and opened[0].startswith(f".{target.name}."), opened
        process.send_signal(signum)  # the command is past making it, short of the FIFO's end
        _wait_until_taken(process, signum)
        _feed_once_opened(fifo, content, process)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    expected = {signal.SIGTERM: (143, "meltwater: terminated"),
                signal.SIGINT: (130, "meltwater: interrupted")}[signum]
    # The signal may land inside a library that turns the exception it raises into an
    # error of its own (pyarrow's lazy zoneinfo import), or the FIFO's failed seek may
    # come first: the command still reports the signal it took (`cli.signals.received`).
    assert (process.returncode, stderr.strip()) == expected, stderr
    assert_left_as_it_was(target, existing)


def _waiting_for_a_writer(process: subprocess.Popen) -> bool:
    """Whether a thread of the command is in the kernel waiting to open a FIFO that no
    writer opens (`wait_for_partner`): held in a call that never returns to Python."""
    for task in Path(f"/proc/{process.pid}/task").iterdir():
        try:
            if (task / "wchan").read_text().strip() == "wait_for_partner":
                return True
        except OSError:  # the thread ended meanwhile
            continue
    return False


BLOCKED_CASES = [("scan", "parquet", signal.SIGINT, False),
                 ("changes", "jsonl", signal.SIGTERM, True),
                 ("scan", None, signal.SIGTERM, False)]


@pytest.mark.parametrize(("command", "fmt", "signum", "existing"), BLOCKED_CASES,
                         ids=[f"{c}-{f or 'stdout'}-{s.name}" for c, f, s, _ in BLOCKED_CASES])
def test_a_signal_ends_a_command_held_in_a_read_that_never_returns(
        table_copy, tmp_path, command, fmt, signum, existing):
    """The data file is a FIFO nobody writes: pyarrow's open never returns to Python, where
    the signal's handler would run, and the command ignored SIGINT and SIGTERM for as long.
    Its watchdog now ends it about 1.5 s after the signal (the bound is 2 s; the test allows
    10), with the signal's line and status, its output file removed."""
    fifo = added_by_current_snapshot(table_copy)
    fifo.unlink()
    os.mkfifo(fifo)
    args = [MELTWATER, command, table_copy]
    target = None
    if fmt is not None:
        target = prepare_target(tmp_path / "out", f"result.{fmt}", existing)
        args += ["--format", fmt, "--output", str(target)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 120
        while not _waiting_for_a_writer(process):
            assert process.poll() is None and time.monotonic() < deadline, "never blocked"
            time.sleep(0.01)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    expected = {signal.SIGTERM: (143, "meltwater: terminated"),
                signal.SIGINT: (130, "meltwater: interrupted")}[signum]
    assert (process.returncode, stderr) == (expected[0], expected[1] + "\n")
    if target is not None:
        assert_left_as_it_was(target, existing)


def test_success_replaces_the_file_with_open_s_permissions(table_copy, tmp_path):
    """A new file gets 0o666 less the umask, as `open()` gives (not mkstemp's 0o600); a
    replaced file keeps its mode; nothing but the target is left."""
    directory = tmp_path / "out"
    directory.mkdir()
    new, existing = directory / "new.jsonl", directory / "existing.csv"
    existing.write_bytes(OLD_BYTES)
    existing.chmod(0o604)
    for command, fmt, target in [("snapshots", "jsonl", new), ("scan", "csv", existing)]:
        result = subprocess.run([MELTWATER, command, table_copy, "--format", fmt, "--output",
                                 str(target)], capture_output=True, text=True, timeout=120,
                                umask=0o027)
        assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(new.stat().st_mode) == 0o640
    assert stat.S_IMODE(existing.stat().st_mode) == 0o604
    assert sorted(os.listdir(directory)) == ["existing.csv", "new.jsonl"]
    snapshots = load_table(table_copy).metadata.snapshots
    assert len(new.read_text().splitlines()) == len(snapshots)
    assert existing.read_bytes() != OLD_BYTES and existing.read_text().count("\n") > 1


def test_output_to_a_device_is_written_in_place(table_copy):
    """`--output /dev/stdout` writes to the stream: a device cannot be renamed over."""
    result = subprocess.run([MELTWATER, "snapshots", table_copy, "--format", "jsonl",
                             "--output", "/dev/stdout"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(load_table(table_copy).metadata.snapshots)


def test_a_missing_directory_is_one_line(table_copy, tmp_path):
    target = tmp_path / "absent" / "out.csv"
    result = subprocess.run([MELTWATER, "scan", table_copy, "--format", "csv", "--output",
                             str(target)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"meltwater: cannot write {target}: "
                                          "No such file or directory"]


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_a_directory_as_the_output_is_one_line(table_copy, tmp_path):
    for fmt in ("jsonl", "parquet"):
        result = subprocess.run([MELTWATER, "scan", table_copy, "--format", fmt, "--output",
                                 str(tmp_path)], capture_output=True, text=True, timeout=120)
        assert _one_line(result) == f"meltwater: cannot write {tmp_path}: Is a directory"


def test_an_unwritable_place_is_one_line(table_copy, tmp_path):
    """A directory the user may not write in; root may write anywhere but sysfs."""
    if os.geteuid() == 0:
        target = Path("/sys/meltwater-test-output.jsonl")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        target = locked / "out.jsonl"
    for command in ("scan", "changes", "snapshots"):
        result = subprocess.run([MELTWATER, command, table_copy, "--format", "jsonl",
                                 "--output", str(target)], capture_output=True, text=True,
                                timeout=120)
        assert _one_line(result) in (f"meltwater: cannot write {target}: Permission denied",
                                     f"meltwater: cannot write {target}: Operation not permitted")
    assert not target.exists()


@pytest.mark.parametrize("fmt", ["table", "jsonl", "csv", "parquet"])
def test_a_full_disk_is_one_line(table_copy, fmt):
    """/dev/full: every write fails with ENOSPC, whichever call (Arrow's too) makes it."""
    result = subprocess.run([MELTWATER, "scan", table_copy, "--format", fmt, "--output",
                             "/dev/full"], capture_output=True, text=True, timeout=120)
    assert _one_line(result) == "meltwater: cannot write /dev/full: No space left on device"


def _file_size_limit() -> None:
    """In the child: files may grow to 1000 bytes (Python ignores SIGXFSZ, so writing past
    it fails with EFBIG, as a full disk fails with ENOSPC)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize(("command", "fmt"), [("scan", "jsonl"), ("scan", "parquet"),
                                              ("changes", "csv"), ("changes", "debezium-jsonl")])
def test_a_file_that_cannot_grow_is_one_line_and_leaves_nothing(table_copy, tmp_path, command,
                                                                fmt, existing):
    target = prepare_target(tmp_path / "out", f"result.{fmt}", existing)
    result = subprocess.run([MELTWATER, command, table_copy, "--format", fmt, "--output",
                             str(target)], capture_output=True, text=True, timeout=120,
                            preexec_fn=_file_size_limit)
    assert _one_line(result) == f"meltwater: cannot write {target}: File too large"
    assert_left_as_it_was(target, existing)


@pytest.mark.parametrize("args", [["scan", "--format", "jsonl"], ["scan", "--format", "csv"],
                                  ["changes", "--format", "debezium-jsonl"], ["snapshots"],
                                  ["plan"], ["plan", "--format", "json"]],
                         ids=lambda a: "-".join(a).replace("--format-", ""))
def test_stdout_on_a_full_disk_is_one_line(table_copy, args):
    with open("/dev/full", "w") as full:
        result = subprocess.run([MELTWATER, args[0], table_copy, *args[1:]], stdout=full,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    assert _one_line(result) == "meltwater: cannot write to stdout: No space left on device"
