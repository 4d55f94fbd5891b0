"""A throwaway PostgreSQL server for tests: initdb in a temp dir, loopback only, trust auth.

    with PostgresServer() as url:       # postgresql://postgres@127.0.0.1:<port>/postgres
        psycopg.connect(url)

The server binaries come from Debian's `postgresql` package (`make sysdeps` installs it) under
/usr/lib/postgresql/<version>/bin, the newest version found. PostgreSQL refuses to run as
root, so when the tests run as root the cluster is created and started as the `postgres`
user (`runuser`), in a temp dir handed over to it. The server listens on 127.0.0.1 only, on a
free port, with its socket in the temp dir, and is stopped and deleted on exit. `fsync` is off:
a test cluster is thrown away, it never has to survive a power cut.

`create_database(url, name)` gives each test its own database on the one server.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from loopback_ports import free_port

BIN_GLOB = "/usr/lib/postgresql/*/bin"
SERVICE_USER = "postgres"


class PostgresUnavailableError(RuntimeError):
    """The server cannot be started; the message says why and how to fix it."""


def find_bin_dir() -> Path:
    """The newest PostgreSQL server bin dir, or an error naming `make sysdeps`."""
    found = [Path(p) for p in glob.glob(BIN_GLOB) if (Path(p) / "initdb").exists()]
    if not found:
        raise PostgresUnavailableError(
            f"PostgreSQL server binaries not found ({BIN_GLOB}/initdb); `make sysdeps` "
            "installs them (Debian package `postgresql`)")
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


class PostgresServer:
    """A PostgreSQL cluster for the length of a `with` block; entering yields its URL."""

    def __init__(self, bin_dir: Path | None = None) -> None:
        self.bin_dir = bin_dir
        self.home: Path | None = None
        self.port: int | None = None

    @property
    def data_dir(self) -> Path:
        assert self.home is not None
        return self.home / "data"

    @property
    def url(self) -> str:
        return f"postgresql://{SERVICE_USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:  # postgres will not run as root
            command = ["runuser", "-u", SERVICE_USER, "--", *command]
        return subprocess.run(command, cwd=self.home, capture_output=True, text=True)

    def _check(self, result: subprocess.CompletedProcess, what: str) -> None:
        if result.returncode != 0:
            log = self.home / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise PostgresUnavailableError(
                f"{what} failed (exit {result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-2000:]}\n{tail}")

    def start(self) -> str:
        self.bin_dir = self.bin_dir or find_bin_dir()
        self.home = Path(tempfile.mkdtemp(prefix="meltwater-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.home, SERVICE_USER, SERVICE_USER)
        self._check(self._run("initdb", "-D", str(self.data_dir), "-U", SERVICE_USER,
                              "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"),
                    "initdb")
        self.port = free_port()
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.home} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._check(self._run("pg_ctl", "-D", str(self.data_dir), "-o", options, "-w",
                              "-t", "60", "-l", str(self.home / "server.log"), "start"),
                    "pg_ctl start")
        return self.url

    def stop(self) -> None:
        if self.home is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.home, ignore_errors=True)
        self.home = None

    def __enter__(self) -> str:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def create_database(url: str, name: str) -> str:
    """Create database `name` on the server of `url`; return the URL of the new database."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))
