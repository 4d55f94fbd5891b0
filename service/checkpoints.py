"""Pipelines' checkpoint directories as this machine sees them, and one service per checkpoint.

A checkpoint is where Spark records a query's batches and the sink's exactly-once promise
rests on it: two services running one pipeline's checkpoint (the same configuration
started twice, a second `serve` with another HTTP port) are two writers of one offset log
and one sink, and nothing in Spark stops the second. So a service takes an exclusive
`flock` on `<checkpoint>/meltwater.lock` before it starts anything and holds it until the
process ends; a second one is refused at start, in one line naming the checkpoint and the
pid holding it (written into the file). The kernel releases the lock however the holder
ends, so a service killed with SIGKILL leaves no stale lock: the next start takes it. The
lock file's descriptor is not inherited by Spark's JVM (Python opens files
close-on-exec), so the JVM outliving the service cannot keep it held.

Only a checkpoint on this machine's file system (a path, or a file: URI) can be locked so;
one on HDFS or an object store is not, which the service says when it starts.
`serve --check` asks whether a lock is held without taking it and creates nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from meltwater.service.errors import CheckpointInUseError

LOCK_NAME = "meltwater.lock"


def has_offsets(checkpoint: Path) -> bool:
    """Whether a query has run from this checkpoint (Spark's `offsets/N` files): it resumes
    there, and the pipeline's start options no longer matter."""
    offsets = checkpoint / "offsets"
    try:
        return any(entry.name.isdigit() for entry in offsets.iterdir())
    except OSError:
        return False


def uncreatable(path: Path) -> str | None:
    """Why the directory `path` could not be created (or used), judged without creating
    anything: `--check` changes nothing on disk. None when it can be."""
    path = path.resolve()
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else f"{path} is not writable"
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create {path}: {ancestor} is a file"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create {path}: {ancestor} is not writable"
    return None


def _in_use(checkpoint: Path, fd: int) -> str:
    """The refusal's words: the checkpoint, and the pid the holder wrote if it did."""
    try:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        pid = ""
    holder = f" (pid {pid})" if pid.isdigit() else ""
    return (f"checkpoint {checkpoint} is held by another meltwater serve{holder}: two "
            "services on one checkpoint would both write its offsets and its sink; stop "
            "that one first, or give this pipeline another checkpoint")


class CheckpointLock:
    """The exclusive lock on one checkpoint, held from `acquire` until `release` or the
    process's end."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint
        self.path = checkpoint / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> CheckpointLock:
        """Create the checkpoint directory if need be and take its lock, recording this
        process's pid; CheckpointInUseError if another process holds it."""
        self.checkpoint.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            message = _in_use(self.checkpoint, fd)
            os.close(fd)
            raise CheckpointInUseError(message) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Let the lock go (the process's end does the same)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def holder(checkpoint: Path) -> str | None:
    """Why `checkpoint` cannot be locked now (another process holds it), found without
    taking the lock for longer than the question and without creating anything; None if
    it is free."""
    try:
        fd = os.open(checkpoint / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # no lock file (or none we may read): nobody has run there since
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _in_use(checkpoint, fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
