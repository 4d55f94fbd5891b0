"""A throwaway Azure Blob Storage emulator for tests: Azurite on loopback.

    with AzuriteServer() as server:
        server.account, server.key      # the storage account it serves and its shared key
        server.endpoint                 # http://127.0.0.1:<port>/<account>
        server.file_io_properties()     # pyiceberg's adls.* properties that reach it
        server.java_file_io_properties(host)  # Iceberg Java's
        server.filesystem()             # a pyarrow AzureFileSystem on it

Azurite is the npm package `azurite` (Microsoft's emulator; Node.js runs it). It is not a
Python package, so the first use installs the pinned version with npm into
`$MELTWATER_CACHE/azurite-<version>` (about 30 s and 360 MB, once; a lock lets one process
install while the others wait), and an npm that cannot reach its registry is one line
saying so. Only the Blob service runs (`azurite-blob`): Azurite has no Data Lake (dfs)
API, and pyarrow's AzureFileSystem reads a flat-namespace account through Blob alone.

The account is `ACCOUNT` (the one the Azure corpus's `abfs://` locations name) with a key
made per server, handed to Azurite as AZURITE_ACCOUNTS; data is kept in memory; telemetry
is off; the one listener is on 127.0.0.1 and dies with the process that started it.
"""

from __future__ import annotations

import base64
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from loopback_ports import free_port
from seaweed_server import _die_with_parent
from writer_env import cache_root

VERSION = "3.37.0"
ACCOUNT = "meltwater"  # build.STORE_WAREHOUSES["abfs"]'s account
NPM_TIMEOUT_S = 600


class AzuriteUnavailableError(RuntimeError):
    """Azurite cannot be installed or started; the message says why and how to fix it."""


def _one_line(text: str) -> str:
    """The line of npm's (or Azurite's) stderr that says why: npm's `request to ... failed,
    reason: ...` when there is one, else its first error line other than the log's path."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines
              if "error" in line.lower() and "complete log" not in line.lower()]
    reasons = [line for line in errors if "reason" in line.lower()]
    return (reasons or errors or lines or ["no output"])[0][:300]


def ensure_azurite(log: Any = print) -> Path:
    """The `azurite-blob` script of Azurite VERSION, installed with npm on first use."""
    home = cache_root() / f"azurite-{VERSION}"
    script = home / "node_modules" / ".bin" / "azurite-blob"
    if script.exists():
        return script
    npm = shutil.which("npm")
    if npm is None:
        raise AzuriteUnavailableError("npm not found: Azurite is installed with npm "
                                      "(Debian: apt-get install nodejs npm)")
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if script.exists():
            return script
        log(f"installing Azurite {VERSION} with npm into {home} (once, about 30 s) ...")
        staging = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
        try:
            done = subprocess.run(
                [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
                 "--no-update-notifier", f"azurite@{VERSION}"],
                capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            raise AzuriteUnavailableError(
                f"`npm install azurite@{VERSION}` took over {NPM_TIMEOUT_S} s: is the npm "
                "registry reachable?") from None
        if done.returncode != 0 or not (staging / "node_modules/.bin/azurite-blob").exists():
            shutil.rmtree(staging, ignore_errors=True)
            raise AzuriteUnavailableError(
                f"`npm install azurite@{VERSION}` failed (exit {done.returncode}; is the npm "
                f"registry reachable?): {_one_line(done.stderr or done.stdout)}")
        staging.rename(home)
    return script


class AzuriteServer:
    """Azurite's Blob service for the length of a `with` block."""

    def __init__(self, start_timeout: float = 60.0, log: Any = print) -> None:
        self.start_timeout = start_timeout
        self.log = log
        self.account = ACCOUNT
        self.key = base64.b64encode(secrets.token_bytes(64)).decode()
        self.port = 0
        self.home: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The account's Blob endpoint, as Azurite serves it (the account in the path)."""
        return f"http://127.0.0.1:{self.port}/{self.account}"

    @property
    def connection_string(self) -> str:
        """An Azure storage connection string for the account on this server."""
        return (f"DefaultEndpointsProtocol=http;AccountName={self.account};"
                f"AccountKey={self.key};BlobEndpoint={self.endpoint};")

    def file_io_properties(self) -> dict[str, str]:
        """pyiceberg's name for the same: `adls.connection-string`, which its fsspec reader
        (adlfs) and meltwater read."""
        return {"adls.connection-string": self.connection_string}

    def java_file_io_properties(self, host: str) -> dict[str, str]:
        """Iceberg Java's names for the same: the shared key, and the endpoint for the
        account host the locations name (`adls.connection-string.<host>`)."""
        return {"adls.auth.shared-key.account.name": self.account,
                "adls.auth.shared-key.account.key": self.key,
                f"adls.connection-string.{host}": self.endpoint}

    def filesystem(self) -> Any:
        import pyarrow.fs as pafs

        authority = f"127.0.0.1:{self.port}"
        return pafs.AzureFileSystem(self.account, account_key=self.key,
                                    blob_storage_authority=authority, blob_storage_scheme="http",
                                    dfs_storage_authority=authority, dfs_storage_scheme="http")

    def start(self) -> AzuriteServer:
        script = ensure_azurite(self.log)
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="meltwater-azurite-"))
        env = {**os.environ, "AZURITE_ACCOUNTS": f"{self.account}:{self.key}"}
        self.process = subprocess.Popen(
            [str(script), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
             "--inMemoryPersistence", "--disableTelemetry", "--silent", "--skipApiVersionCheck",
             "--loose"],
            cwd=self.home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if \
                    self.process.stderr else ""
                raise AzuriteUnavailableError(
                    f"Azurite exited with status {self.process.returncode}: {_one_line(err)}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise AzuriteUnavailableError(
            f"Azurite did not listen on 127.0.0.1:{self.port} within {self.start_timeout:g} s")

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            if self.process.stderr is not None:
                self.process.stderr.close()
            self.process = None
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None

    def __enter__(self) -> AzuriteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
