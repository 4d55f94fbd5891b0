"""A Hive Metastore for the tests, from the Hive 2.3 jars inside the pyspark wheel: embedded
Derby, no Docker, reachable only from this machine's loopback.

    with HiveMetastore(work_dir) as metastore:
        metastore.uri          # thrift://127.0.0.1:<port>
        metastore.warehouse    # file:///.../warehouse

Hive 2.3's metastore listens on every interface and has no option to bind one, so it runs
in a network namespace of its own (`unshare -n`, which holds only its own loopback), and
is reached through a socket file: inside, this module (run as a script) relays the socket
file to the metastore's port; outside, `LoopbackProxy` relays 127.0.0.1:<port> to the
socket file. Nothing but this machine's processes can reach it.

What Hive 2.3 on Java 17 needs here (`../shared/field-notes.md`): `hive.async.log.enabled`
off (the disruptor jar is not in the wheel), HikariCP as DataNucleus' pool (BoneCP is
not either), the schema created by DataNucleus with verification off, and one first start
with `hive.in.test` that creates the transaction tables the lock API uses (pyiceberg's and
Iceberg Java's commits take a lock), then the start the tests use, without it (with it,
the metastore refuses pyiceberg's locks).

Usage (inside the namespace; `HiveMetastore` runs it): python metastore_server.py --inside
--work DIR --socket PATH --port PORT [--in-test]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tcp_proxy import LoopbackProxy

HERE = Path(__file__).resolve().parent
START_TIMEOUT_S = 120
_INSIDE_PORT = 9083


def pyspark_jars() -> Path:
    """The jars of the pyspark this interpreter imports (Hive 2.3, Derby, DataNucleus)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def java_command(work: Path, port: int, *, in_test: bool) -> list[str]:
    """The metastore's command line (see the module doc)."""
    properties = {
        "hive.async.log.enabled": "false",
        "datanucleus.connectionPoolingType": "HikariCP",
        "javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={work / 'metastore_db'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": (work / "warehouse").as_uri(),
        "derby.system.home": str(work),
        "hive.log.dir": str(work),
    }
    if in_test:
        properties["hive.in.test"] = "true"
    java = shutil.which("java") or "java"
    return [java, "-Xmx512m", *(f"-D{k}={v}" for k, v in properties.items()),
            "-cp", f"{pyspark_jars()}/*", "org.apache.hadoop.hive.metastore.HiveMetaStore",
            "-p", str(port)]


class HiveMetastoreError(RuntimeError):
    """The metastore did not start; the message carries its log's tail."""


class HiveMetastore:
    """A metastore in its own network namespace, reached on a loopback port (module doc)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.socket_path = str(work / "metastore.sock")
        self.log_path = work / "metastore.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._proxy: LoopbackProxy | None = None

    @property
    def uri(self) -> str:
        assert self._proxy is not None, "not started"
        return f"thrift://127.0.0.1:{self._proxy.port}"

    @property
    def warehouse(self) -> str:
        return (self.work / "warehouse").as_uri()

    def start(self) -> HiveMetastore:
        """Create the schema and transaction tables (a first start with `hive.in.test`),
        then start the metastore the tests use."""
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "warehouse").mkdir(exist_ok=True)
        self._run(in_test=True)
        self._create_transaction_tables()
        self._stop_process()
        self._run(in_test=False)
        self._proxy = LoopbackProxy(unix_target=self.socket_path).start()
        return self

    def stop(self) -> None:
        """Stop the proxy and the metastore."""
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        self._stop_process()

    def __enter__(self) -> HiveMetastore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _create_transaction_tables(self) -> None:
        """One call of the lock API, which has a metastore in test mode create the tables
        it keeps locks in (TxnDbUtil.prepDb)."""
        from hive_metastore.ThriftHiveMetastore import Client
        from hive_metastore.ttypes import ShowLocksRequest
        from thrift.protocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport

        with LoopbackProxy(unix_target=self.socket_path) as proxy:
            transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", proxy.port))
            transport.open()
            try:
                Client(TBinaryProtocol.TBinaryProtocol(transport)).show_locks(ShowLocksRequest())
            finally:
                transport.close()

    def _run(self, *, in_test: bool) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child writes to it
        # as root a network namespace; else one inside a user namespace of its own
        isolate = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]
        command = [*isolate, sys.executable, str(Path(__file__).resolve()), "--inside",
                   "--work", str(self.work), "--socket", self.socket_path,
                   "--port", str(_INSIDE_PORT)]
        if in_test:
            command.append("--in-test")
        self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(self.socket_path):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._stop_process()
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise HiveMetastoreError(f"the Hive Metastore did not start:\n{tail}")
            time.sleep(0.2)

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _inside(work: Path, socket_path: str, port: int, in_test: bool) -> int:
    """In the namespace: loopback up, the metastore started, its port relayed to the socket
    file once it answers; until the metastore exits or this is told to stop."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    java = subprocess.Popen(java_command(work, port, in_test=in_test))
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping and java.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        time.sleep(0.2)
    relay = None
    if not stopping and java.poll() is None:
        relay = LoopbackProxy(port, unix_listen=socket_path).start()
    while not stopping and java.poll() is None:
        time.sleep(0.2)
    if relay is not None:
        relay.close()
    java.terminate()
    try:
        java.wait(timeout=20)
    except subprocess.TimeoutExpired:
        java.kill()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--inside", action="store_true", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--in-test", action="store_true")
    arguments = parser.parse_args()
    sys.exit(_inside(arguments.work, arguments.socket, arguments.port, arguments.in_test))
