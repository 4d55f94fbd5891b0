"""File access for metadata, manifests and data files, on `pyarrow.fs`.

One small protocol, so local paths, `file://`, `s3://`, `gs://`, `hdfs://` and `abfs://`
locations all go through the same calls. Filesystems are resolved per scheme and authority
once and reused; a `PyArrowFileIO` pickles by its options only, so an executor builds its
own filesystems instead of receiving live connections.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlparse

import pyarrow.fs as pafs

from meltwater.planner.errors import NoSuchFileError


class FileIO(Protocol):
    """What the planner and the readers need of storage; `PyArrowFileIO` is the implementation,
    tests may pass their own."""

    def open_input(self, location: str) -> Any:
        """A random-access readable file (a pyarrow NativeFile)."""

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes of a file, or `length` of them from `offset`; NoSuchFileError if it is
        absent."""

    def exists(self, location: str) -> bool:
        """Whether a file exists at the location."""

    def list_dir(self, location: str) -> list[str]:
        """Full locations of the files directly inside a directory."""


class PyArrowFileIO:
    """FileIO on pyarrow filesystems, resolved from each location's scheme."""

    def __init__(self, options: dict[str, str] | None = None) -> None:
        self.options = dict(options or {})
        self._lock = threading.Lock()
        self._filesystems: dict[tuple[str, str], pafs.FileSystem] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        PyArrowFileIO.__init__(self, state["options"])

    def resolve(self, location: str) -> tuple[pafs.FileSystem, str]:
        """The filesystem for a location and the path inside it."""
        parsed = urlparse(location)
        scheme = parsed.scheme.lower()
        if scheme in ("", "file") or len(scheme) == 1:  # len 1: a Windows drive letter
            path = parsed.path if scheme == "file" else location
            return self._cached(("file", ""), pafs.LocalFileSystem), path
        if scheme in ("s3a", "s3n"):
            location, scheme = "s3" + location[len(scheme):], "s3"
        fs = self._cached((scheme, parsed.netloc),
                          lambda: pafs.FileSystem.from_uri(location)[0])
        if scheme in ("hdfs", "viewfs"):
            return fs, parsed.path
        if scheme in ("abfs", "abfss"):  # container@account.dfs.core.windows.net/path
            return fs, parsed.netloc.split("@")[0] + parsed.path
        return fs, parsed.netloc + parsed.path  # s3, gs: bucket/key

    def _cached(self, key: tuple[str, str],
                make: Callable[[], pafs.FileSystem]) -> pafs.FileSystem:
        with self._lock:
            fs = self._filesystems.get(key)
            if fs is None:
                fs = self._filesystems[key] = make()
            return fs

    def open_input(self, location: str) -> Any:
        """A random-access readable file (a pyarrow NativeFile); NoSuchFileError if it is absent."""
        fs, path = self.resolve(location)
        try:
            return fs.open_input_file(path)
        except FileNotFoundError:
            raise NoSuchFileError(f"{location}: file not found") from None
        except OSError as error:
            message = str(error).lower()
            if "not found" in message or "no such file" in message:
                raise NoSuchFileError(f"{location}: file not found") from None
            raise

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes of a file, or `length` of them from `offset`; NoSuchFileError if it is
        absent."""
        with self.open_input(location) as handle:
            if offset:
                handle.seek(offset)
            data: bytes = handle.read() if length is None else handle.read(length)
            return data

    def is_local(self, location: str) -> bool:
        """Whether a location is on this machine's filesystem: reading it waits on no network."""
        return isinstance(self.resolve(location)[0], pafs.LocalFileSystem)

    def exists(self, location: str) -> bool:
        """Whether a file exists at the location."""
        fs, path = self.resolve(location)
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)

    def list_dir(self, location: str) -> list[str]:
        """Full locations of the files directly inside a directory; none if it is absent."""
        fs, path = self.resolve(location)
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        prefix = location.rstrip("/")
        return [f"{prefix}/{info.base_name}" for info in infos if info.type == pafs.FileType.File]
