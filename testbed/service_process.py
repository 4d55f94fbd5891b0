"""Runs `meltwater serve` as a separate process, as an operator would.

For the service tests, `make demo` (deploy/demo.py) and the service benchmark
(bench/s3service.py). The service is a real process (so it can be killed with SIGKILL);
whoever runs it talks to it only through its configuration file (`write_config`), its HTTP
status server and the sinks it writes. `descendants`, `running` and `command_line` read
/proc, the one place that does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Pipeline:
    name: str
    table: str
    checkpoint: Path
    sink: dict[str, Any]
    trigger: str = "event"
    options: dict[str, Any] = field(default_factory=lambda: {"starting": "earliest"})


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def write_config(path: Path, pipelines: list[Pipeline], *, port: int,
                 progress: str = "lines", log: str = "json",
                 shutdown_timeout: str = "20s") -> Path:
    """A service configuration with these pipelines, local[2] Spark, status on `port`."""
    lines = ["[service]", f'http = "127.0.0.1:{port}"', f'log = "{log}"',
             f'progress = "{progress}"', f'shutdown-timeout = "{shutdown_timeout}"', "",
             "[spark]", 'master = "local[2]"', "[spark.conf]",
             '"spark.driver.memory" = "1g"', ""]
    for pipeline in pipelines:
        lines += ["[[pipelines]]", f"name = {_toml_value(pipeline.name)}",
                  f"table = {_toml_value(pipeline.table)}",
                  f"checkpoint = {_toml_value(str(pipeline.checkpoint))}",
                  f"trigger = {_toml_value(pipeline.trigger)}", "[pipelines.options]"]
        lines += [f'"{k}" = {_toml_value(v)}' for k, v in pipeline.options.items()]
        lines += ["[pipelines.sink]"]
        lines += [f'"{k}" = {_toml_value(v)}' for k, v in pipeline.sink.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


class ServiceProcess:
    """`meltwater serve --config CONFIG` in its own process, its output in `log`.

    `echo`, if given, is also handed every line the process prints (stdout and stderr, as
    text), in order, from a thread of its own: the caller decides what to show of it.
    """

    def __init__(self, config: Path, port: int, log: Path, *,
                 echo: Callable[[str], None] | None = None) -> None:
        self.port = port
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()/kill()
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "meltwater.cli.main", "serve", "--config", str(config)],
            stdout=subprocess.PIPE if echo else self._log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        if echo is not None:
            threading.Thread(target=self._echo, args=(echo,), daemon=True).start()

    def _echo(self, echo: Callable[[str], None]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not self._log.closed:
                self._log.write(line)
                self._log.flush()
            echo(line.decode(errors="replace"))

    def health(self) -> tuple[int, dict[str, Any]] | None:
        url = f"http://127.0.0.1:{self.port}/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()

    def wait_running(self, timeout: float = 240) -> dict[str, Any]:
        """Block until every pipeline's query runs; fail with the log's tail otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"service exited ({self.process.returncode}):\n"
                                     + self.tail())
            answer = self.health()
            if answer is not None:
                pipelines = answer[1].get("pipelines", {})
                if pipelines and all(p["state"] == "running" for p in pipelines.values()):
                    return answer[1]
            time.sleep(0.2)
        raise AssertionError(f"service not running after {timeout}s:\n" + self.tail())

    def tail(self, lines: int = 40) -> str:
        if not self._log.closed:
            self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def kill(self) -> None:
        """SIGKILL the service and everything it started (its JVM, its Python workers)."""
        kill_tree(self.process.pid)
        self.process.wait(timeout=30)
        self._log.close()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90, *,
             group: bool = False) -> int:
        """Send `sig` to the service process only, or (`group`) to its whole process group
        as a supervisor does; its exit status."""
        if group:
            os.killpg(self.process.pid, sig)
        else:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            kill_tree(self.process.pid)  # leftovers, if it hung
            self._log.close()
        return code


def _state_and_parent(pid: int | str) -> tuple[str, int] | None:
    """A process's state letter and parent pid from /proc/PID/stat, None once it is gone
    (processes below the service come and go between listing and reading /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    return fields[0], int(fields[1])


def descendants(pid: int) -> list[int]:
    """The processes below `pid`, children first (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _state_and_parent(entry.name)) is not None:
            children.setdefault(stat[1], []).append(int(entry.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, []))
    return found


def command_line(pid: int) -> bytes:
    """`pid`'s command line, or b"" once it has exited."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def running(pid: int) -> bool:
    """Whether `pid` still runs: an exited process may stay in /proc as a zombie until
    whoever adopted it reaps it."""
    stat = _state_and_parent(pid)
    return stat is not None and stat[0] != "Z"


def kill_tree(pid: int) -> None:
    """SIGKILL `pid`'s process group and every process below `pid`, wherever its group: the
    service starts Spark's JVM in a session of its own (`meltwater.service.runner`)."""
    below = descendants(pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for child in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
