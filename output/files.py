"""An output file that is whole or absent: written beside its target, renamed on success.

`meltwater scan/changes/snapshots --output PATH` must never leave half a file behind. A
Parquet writer interrupted by an exception still closes with a valid footer, so a reader
of a partial file would see a *valid* table holding some of the rows: silently wrong.
And opening the target itself truncates an existing file before the first row is read.

So every output path goes through `replacing_file` (`output_destination` picks it or
stdout):

- the rows go to a temporary file in the target's own directory (a rename within one
  filesystem is atomic), named `.<name>.<random>.tmp` and created with `O_EXCL`, so it
  can neither collide with another file nor follow a planted symlink;
- on success it is flushed, fsynced and renamed over the target, then the directory is
  fsynced so the rename itself survives a crash;
- on any exception, including KeyboardInterrupt and the CLI's SIGTERM exception
  (`meltwater.cli.signals`), the temporary file is removed and an existing target is left
  as it was, byte for byte;
- a process that ends without unwinding (the CLI's signal watchdog, when the main thread
  is held in a call that never returns to Python) first calls `remove_unfinished`, which
  removes the temporary files still being written.

Permissions are those `open(path, "w")` would give: a new file gets 0o666 less the umask
(the kernel applies it to `os.open`'s mode, unlike `mkstemp`'s 0o600), and replacing an
existing file keeps that file's mode. A target that exists and is not a regular file
(`/dev/stdout`, a FIFO, a character device) cannot be replaced by a rename; it is written
directly, as `open()` would, since it holds nothing a failure could truncate.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from meltwater.output.errors import OutputFileError

# What only writing raises: a full disk or quota, a file over the size limit. Raised inside
# a block, they are the output's, whatever call (a flush, Arrow's writer) ran into them.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _write_failed(error: BaseException, path: object) -> OSError | None:
    """`error` if it is the output's: an OSError naming `path`, or one only writing raises."""
    if isinstance(error, OSError) and (error.filename in (str(path), path)
                                       or error.errno in _WRITE_ERRNOS):
        return error
    return None


@contextlib.contextmanager
def _named(target: str) -> Iterator[None]:
    """Turn the OSErrors only writing raises into `OutputFileError`s naming `target`."""
    try:
        yield
    except OSError as error:
        if error.errno not in _WRITE_ERRNOS:
            raise
        raise OutputFileError(f"cannot write {target}: {error.strerror}") from error


# The temporary files `replacing_file` is writing, for `remove_unfinished`.
_unfinished: set[Path] = set()


def remove_unfinished() -> None:
    """Remove the temporary files `replacing_file` has not finished, from any thread: for
    a process about to end without unwinding, so that no partial output is left behind
    (a target keeps its old bytes; one already renamed into place is whole)."""
    for temp in list(_unfinished):
        with contextlib.suppress(OSError):
            os.unlink(temp)


def temporary_sibling_prefix(target: str | os.PathLike[str]) -> str:
    """The name prefix of the temporary files `replacing_file` makes for `target`."""
    return f".{Path(target).name}."


def _sibling_name(target: Path) -> Path:
    # os.urandom, not secrets.token_hex (the same bytes): importing secrets loads hashlib
    # and OpenSSL, 10 ms of every command that writes
    return target.with_name(f"{temporary_sibling_prefix(target)}{os.urandom(8).hex()}.tmp")


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable; not every platform lets a directory be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing_file(path: str | os.PathLike[str], *, text: bool) -> Iterator[IO]:
    """An open file (text in UTF-8, or binary) that replaces `path` only if the block
    completes; see the module doc."""
    try:
        existing = os.stat(path)  # follows links as open() does, /proc's magic ones included
    except FileNotFoundError:
        existing = None
    except OSError as error:
        raise OutputFileError(f"cannot write {path}: {error.strerror}") from error
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        try:
            direct: IO[Any] = (open(path, "w", encoding="utf-8") if text  # noqa: SIM115
                               else open(path, "wb"))  # noqa: SIM115
        except OSError as error:
            raise OutputFileError(f"cannot write {path}: {error.strerror}") from error
        with _named(str(path)), direct:
            yield direct
        return
    target = Path(os.path.realpath(path))  # a symlinked file is replaced where it lives
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    # One handler from choosing the name to the rename: a signal may raise between any two
    # steps, even between os.open creating the file and its result being assigned.
    temp = _sibling_name(target)
    try:
        while True:
            try:
                fd = os.open(temp, flags, 0o666)  # the umask applies, as for open()
                break
            except FileExistsError:  # another file's name: never ours to remove
                temp = _sibling_name(target)
        _unfinished.add(temp)
        if existing is not None:
            os.fchmod(fd, stat.S_IMODE(existing.st_mode))
        with open(fd, "w", encoding="utf-8") if text else open(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        failed = _write_failed(error, temp)
        if failed is not None:
            raise OutputFileError(f"cannot write {path}: {failed.strerror}") from error
        raise
    finally:
        _unfinished.discard(temp)
    _fsync_directory(target.parent)


# Large outputs go to their file this many bytes per write. One write of tens of MiB (a
# Parquet part, a batch of CSV) took several times the system time of the same bytes in
# 1 MiB writes here: the kernel throttles one call's pages.
WRITE_SIZE = 1 << 20
# An output file is written back to disk every this many bytes (see `WriteBack`).
WRITE_BACK_BYTES = 32 << 20


class BytesSink(Protocol):
    """Where bytes are written: a binary file, or a `WriteBack` over one."""

    def write(self, data: Any, /) -> object:
        """Write all of `data`."""


def write_in_pieces(handle: BytesSink, data: Any) -> None:
    """Write `data` (bytes, a memoryview or a pyarrow Buffer) in `WRITE_SIZE` pieces."""
    view = memoryview(data)
    for start in range(0, len(view), WRITE_SIZE):
        handle.write(view[start:start + WRITE_SIZE])


class WriteBack:
    """Writes to an output in `WRITE_SIZE` pieces and, when the output is a regular file,
    waits for every `every` bytes to reach the disk as it goes.

    `replacing_file` fsyncs the file before renaming it into place, and that fsync waits for
    whatever is not on disk yet: for `scan --format jsonl` of the bench table, most of the
    file was written back at the end of the run while both cores idled. Written back as it
    goes (on the thread that writes, which the scan does not wait for), the closing fsync
    waits for the last few MiB only."""

    def __init__(self, handle: IO[bytes], every: int = WRITE_BACK_BYTES) -> None:
        self._handle = handle
        self._every = every
        self._pending = 0
        try:
            self._regular = stat.S_ISREG(os.fstat(handle.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):  # no file descriptor (a test's buffer)
            self._regular = False

    def write(self, data: Any) -> None:
        """Write `data` (bytes, a memoryview or a pyarrow Buffer), then write back what is
        pending if it is `every` bytes or more."""
        write_in_pieces(self._handle, data)
        self._pending += memoryview(data).nbytes
        if self._regular and self._pending >= self._every:
            self._handle.flush()
            getattr(os, "fdatasync", os.fsync)(self._handle.fileno())
            self._pending = 0


@contextlib.contextmanager
def output_destination(output: str | os.PathLike[str] | None, *, text: bool) -> Iterator[IO]:
    """Where a command's output goes: stdout when `output` is None or empty (flushed at the
    end, never closed), else a `replacing_file` for that path."""
    if not output:
        if sys.stdout is None:  # Python's stdout when the process started with fd 1 closed
            raise OutputFileError("cannot write to stdout: it is closed")
        if not text:
            sys.stdout.flush()  # the bytes go to its buffer, after any text already printed
        stream: IO = sys.stdout if text else sys.stdout.buffer
        with _named("to stdout"):
            try:
                yield stream
            finally:
                stream.flush()
        return
    with replacing_file(output, text=text) as handle:
        yield handle
