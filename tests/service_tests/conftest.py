"""Fixtures of the service tests: the service and the live writer as child processes.

Requesting `serve` or `live_writer` marks a test `service` (tests/conftest.py's
FIXTURE_MARKS): each starts processes with their own JVM, which `make test-fast` leaves out.
Whatever a test started and left running is killed when it ends, passed or failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from service_process import ServiceProcess
from setup_steps import announce

from live.client import LiveWriter


class Serve:
    """The service run as an operator runs it: `start` keeps `meltwater serve` running in the
    background, `run` waits for it to end (an available-now run), `submit` runs a script
    under spark-submit (deploy/spark/submit.py)."""

    def __init__(self) -> None:
        self.started: list[ServiceProcess] = []

    def start(self, config: Path, port: int, log: Path) -> ServiceProcess:
        service = ServiceProcess(config, port, log)
        self.started.append(service)
        return service

    def run(self, config: Path, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "meltwater.cli.main", "serve",
                               "--config", str(config)], capture_output=True, text=True,
                              timeout=timeout)

    def submit(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """`spark-submit ARGS` with this interpreter as the driver's and the workers' Python."""
        submit = Path(sys.executable).parent / "spark-submit"
        if not submit.exists():
            submit = Path(shutil.which("spark-submit") or "spark-submit")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable)
        return subprocess.run([str(submit), "--conf", f"spark.pyspark.python={sys.executable}",
                               *args], capture_output=True, text=True, timeout=timeout, env=env)

    def kill_leftovers(self) -> None:
        for service in self.started:
            if service.process.poll() is None:
                service.kill()


@pytest.fixture
def serve():
    runs = Serve()
    yield runs
    runs.kill_leftovers()


@pytest.fixture
def live_writer(tmp_path):
    """`live_writer(**options)`: the live Iceberg Java writer committing to a table under
    tmp_path/warehouse, what it reads at each commit under tmp_path/truth."""
    writers: list[LiveWriter] = []

    def start(**options) -> LiveWriter:
        options.setdefault("log", announce)  # building the writer: lines to the terminal
        writer = LiveWriter(tmp_path / "warehouse", tmp_path / "truth", **options)
        writers.append(writer)
        return writer

    yield start
    for writer in writers:
        writer.close()
