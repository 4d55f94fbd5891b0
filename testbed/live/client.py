"""Drives the live Iceberg Java writer (`writer.py`) from meltwater's environment.

`LiveWriter` starts the writer in the Iceberg Java writer virtualenv (`writer_env`), creates
the table, and turns each command into a commit made by Apache Iceberg Java;
`truth_table(commit)` reads back what Iceberg Java read at that snapshot, typed by the
table's schema, for comparing a mirror with. Used by the service tests and by `make demo`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from writer_env import WriterEnv, cache_root, ensure_writer_env

HERE = Path(__file__).parent
JAVA_SOURCE = HERE / "LiveTable.java"

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("customer", pa.string()),
    pa.field("region", pa.string()),
    pa.field("quantity", pa.int32()),
    pa.field("price", pa.decimal128(10, 2)),
    pa.field("updated_at", pa.timestamp("us", tz="UTC")),
    pa.field("note", pa.string()),
])


class LiveWriterError(RuntimeError):
    """The live writer failed; the message carries its stderr's tail."""


@dataclass(frozen=True)
class Commit:
    """One commit the writer made, and where what Iceberg Java reads at it is stored."""

    snapshot_id: int
    sequence_number: int
    kind: str
    committed_at: float
    truth_path: str | None
    rows: int
    timestamp_ms: int  # the snapshot's commit time, in its metadata (Iceberg Java's clock)


def live_jar(env: WriterEnv, log: Callable[[str], None] = print) -> Path:
    """`LiveTable.java` compiled against the writer's Iceberg runtime, cached by source hash."""
    key = hashlib.sha256(JAVA_SOURCE.read_bytes() + str(env.jars[0]).encode()).hexdigest()[:12]
    jar = cache_root() / f"live-{key}" / "meltwater-live.jar"
    if jar.exists():
        return jar
    log(f"compiling LiveTable.java into {jar} (seconds, once) ...")
    work = jar.parent / "classes"
    work.mkdir(parents=True, exist_ok=True)
    pyspark_jars = next((env.python.parent.parent / "lib").glob("python3*/site-packages"))
    classpath = f"{env.jars[0]}:{pyspark_jars}/pyspark/jars/*"
    for command in (["javac", "--release", "11", "-nowarn", "-cp", classpath, "-d", str(work),
                     str(JAVA_SOURCE)],
                    ["jar", "cf", str(jar) + ".tmp", "-C", str(work), "."]):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise LiveWriterError(f"{command[0]} LiveTable.java failed: {result.stderr[-2000:]}")
    os.replace(str(jar) + ".tmp", jar)
    return jar


class LiveWriter:
    """A running writer process committing to `<warehouse>/db/<name>`."""

    def __init__(self, warehouse: Path, truth: Path, *, name: str = "orders", seed: int = 7,
                 log: Callable[[str], None] = print) -> None:
        env = ensure_writer_env(log=log)
        jars = ",".join([env.spark_jars(), str(live_jar(env, log))])
        self.truth_dir = truth
        self.stderr_path = truth.parent / f"{truth.name}-writer.log"
        truth.parent.mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.stderr_path, "w")  # noqa: SIM115 - lives as long as the writer
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith(("PYSPARK", "SPARK_", "PYTHONPATH"))}
        self.process = subprocess.Popen(
            [str(env.python), str(HERE / "writer.py"), "--warehouse", str(warehouse),
             "--name", name, "--truth", str(truth), "--jars", jars, "--seed", str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env=environment)
        ready = self._read()
        self.location: str = ready["location"].removeprefix("file:")
        self.commits: list[Commit] = []

    def _read(self) -> dict[str, Any]:
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            self.process.wait(timeout=30)
            tail = self.stderr_path.read_text()[-3000:]
            raise LiveWriterError(f"the live writer exited ({self.process.returncode}):\n{tail}")
        return json.loads(line)

    def _send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def _commit(self) -> Commit:
        record = self._read()
        if "error" in record:
            raise LiveWriterError(record["error"])
        commit = Commit(record["snapshot_id"], record["sequence_number"], record["kind"],
                        record["committed_at"], record["truth"], record["rows"],
                        record["timestamp_ms"])
        self.commits.append(commit)
        return commit

    def commit(self, kind: str | None = None, *, truth: bool = True) -> Commit:
        """One commit (a random kind unless `kind`), returned once Iceberg Java committed it."""
        self._send({"op": "commit", "kind": kind, "truth": truth})
        return self._commit()

    def burst(self, n: int) -> list[Commit]:
        """`n` commits as fast as Iceberg Java makes them; truth only for the last."""
        self._send({"op": "burst", "n": n})
        return [self._commit() for _ in range(n)]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self._send({"op": "quit"})
                self.process.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=30)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):  # stdin: flushing to a dead writer
                    pipe.close()
        self._stderr.close()

    def __enter__(self) -> LiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truth_table(commit: Commit) -> pa.Table:
    """What Iceberg Java read at `commit`'s snapshot, in the live table's Arrow schema."""
    if commit.truth_path is None:
        raise ValueError(f"snapshot {commit.snapshot_id} has no recorded truth")
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    with open(commit.truth_path) as lines:
        for line in lines:
            row = json.loads(line)
            for name in SCHEMA.names:
                columns[name].append(row[name])
    columns["price"] = [None if v is None else Decimal(v) for v in columns["price"]]
    columns["updated_at"] = [None if v is None else _timestamp(v) for v in columns["updated_at"]]
    return pa.table(columns, schema=SCHEMA)


def _timestamp(text: str):
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def wait_until(predicate, timeout: float, interval: float = 0.05) -> float:
    """Seconds until `predicate()` held; raises TimeoutError after `timeout`."""
    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"condition not reached in {timeout:.0f}s")
        time.sleep(interval)


if __name__ == "__main__":  # a quick manual run: PYTHONPATH=testbed python -m live.client DIR
    out = Path(sys.argv[1])
    with LiveWriter(out / "warehouse", out / "truth") as writer:
        print(writer.location)
        for _ in range(5):
            print(writer.commit())
        started = time.monotonic()
        writer.burst(20)
        print(f"burst of 20: {time.monotonic() - started:.2f}s")
        print(truth_table(writer.commits[-1]).num_rows)
