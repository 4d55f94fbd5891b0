"""The soak (issue 33): `meltwater serve` left running against live writers for a chosen
time, with a fault every few minutes, checked after every commit.

Usage: .venv/bin/python bench/soak.py [--minutes 120] [--fault-every 5] [--outage 30]

What runs, all on this machine:
- Apache Iceberg Java (the live writer, testbed/live) commits merge-on-read changes of
  every kind to a local table every --interval seconds; its size is held near --max-rows
  (deletes and updates once it is larger), and every --maintain-every commits it is
  compacted and its snapshots expired, as a long-lived table is. pyiceberg commits appends
  and deletes to a second table, through SeaweedFS's Iceberg REST catalog and its S3.
- One service with three pipelines: the live table mirrored into SQLite (`mirror`) and
  into Kafka (`topic`, Tansu, Debezium JSON), and the S3 table into SQLite (`items`). The
  service reaches the broker, the catalog and S3 through TCP proxies it does not know of.
  The checkpoints sit on a tmpfs of their own (--checkpoint-mib).
- Faults in turn, one every --fault-every minutes: `kill-9` (the service and its JVM killed
  with SIGKILL and started again at once), `broker-cut` (the broker unreachable for
  --outage seconds), `store-down` (catalog and S3 unreachable for --outage seconds),
  `disk-full` (the checkpoints' file system filled for --outage seconds).

Checked all the time, and at the end once every fault is over and the service has caught
up: each mirror, whenever its ledger names a commit, equals what Iceberg Java read at that
commit (the S3 table's: the writer's model at that commit); the topic, read as a
read_committed consumer, has no event twice and folded by key equals Iceberg Java's read
at the snapshot its last committed marker names; no commit is left unmirrored. Any
difference stops the soak with exit status 1.

Sampled every --sample-every seconds: RSS of the service's Python and of its JVM, their
open file descriptors, the checkpoints' bytes, the mirrors' bytes, /health. Latency is the
live table's commit (its snapshot's timestamp-ms) to the `applied_at` of the mirror batch
that applied it; a commit is "quiet" when no fault began less than --recovery seconds
before it and none is under way. Reported: the figures of the first 10 minutes against
the last 10 (latency p95 of quiet commits; RSS and open files against the first sample
after 10 minutes), the faults and what /health said in each.

Writes bench/results/soak.json and bench/figures/soak.png (RSS, open files, checkpoint
bytes and latency over time).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))

from kafka_broker import KafkaBroker
from kafka_follow import TopicFollower
from kafka_read import canonical_rows, confirmed, folded_images, markers, read_topic
from loopback_ports import free_port
from seaweed_server import SeaweedServer
from service_process import Pipeline, ServiceProcess, descendants, write_config
from tcp_proxy import LoopbackProxy

from live.client import Commit, LiveWriter, truth_table
from live.mirror import differences, ledger_time, read_mirror, truth_rows
from meltwater.service.spark_output import SPARK_LOG_NAME
from meltwater.sinks.ledger import LEDGER_TABLE
from meltwater.sinks.mirror_stream import ledger_name

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "soak.json"
FIGURE = ROOT / "bench" / "figures" / "soak.png"
FAULTS = ("kill-9", "broker-cut", "store-down", "disk-full")
TOPIC = "soak.orders"
CATCH_UP_S = 300  # how long the service may take to catch up once the faults are over
TOPIC_CHECK_S = 60  # how often the topic is read on and its fold compared
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class SoakFailedError(Exception):
    """Something was lost, doubled or different; the message says what."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--fault-every", type=float, default=5.0, help="minutes between faults")
    parser.add_argument("--outage", type=float, default=30.0,
                        help="seconds a broker, store or disk fault lasts")
    parser.add_argument("--interval", type=float, default=6.0,
                        help="seconds between two commits to the live table")
    parser.add_argument("--max-rows", type=int, default=1500)
    parser.add_argument("--maintain-every", type=int, default=150,
                        help="live commits between two compactions with expiry")
    parser.add_argument("--recovery", type=float, default=60.0,
                        help="seconds after a fault began during which commits are not quiet")
    parser.add_argument("--sample-every", type=float, default=30.0)
    parser.add_argument("--checkpoint-mib", type=int, default=256)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--figure", type=Path, default=FIGURE)
    parser.add_argument("--no-figure", action="store_true")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="the faults to take turns, in order (default: all four)")
    parser.add_argument("--replot", type=Path, default=None, metavar="RESULTS",
                        help="only draw the figure of a finished run's results (JSON)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the working directory (logs, mirrors) after a success")
    return parser.parse_args(argv)


# -- the S3 table's writer -------------------------------------------------------------------

class ItemsWriter:
    """pyiceberg committing appends and deletes to `soak.items` through the REST catalog;
    `models` is what the table holds at each sequence number, kept by the writer."""

    def __init__(self, catalog: Any, seed: int, max_rows: int) -> None:
        from pyiceberg.schema import Schema
        from pyiceberg.types import DoubleType, LongType, NestedField, StringType

        catalog.create_namespace_if_not_exists("soak")
        schema = Schema(NestedField(1, "id", LongType(), required=True),
                        NestedField(2, "name", StringType(), required=False),
                        NestedField(3, "amount", DoubleType(), required=False),
                        identifier_field_ids=[1])
        self.table = catalog.create_table(("soak", "items"), schema=schema)
        self.arrow_schema = self.table.schema().as_arrow()
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.models: dict[int, frozenset[tuple[Any, ...]]] = {}
        self.rng = random.Random(seed)
        self.max_rows = max_rows
        self.next_id = 1
        self.commits = 0

    def commit(self) -> int:
        """One commit: 20 new rows, or (every fourth, or once the table is past its size)
        a delete of 5 or 25 rows. The new snapshot's sequence number."""
        import pyarrow as pa
        from pyiceberg.expressions import In

        self.commits += 1
        if len(self.rows) > 10 and (self.commits % 4 == 0 or len(self.rows) > self.max_rows):
            gone = self.rng.sample(sorted(self.rows), 25 if len(self.rows) > self.max_rows else 5)
            self.table.delete(In("id", gone))
            for key in gone:
                del self.rows[key]
        else:
            new = [(i, f"n{i}", round(self.rng.uniform(0, 100), 2))
                   for i in range(self.next_id, self.next_id + 20)]
            self.next_id += 20
            self.table.append(pa.Table.from_pylist(
                [dict(zip(self.arrow_schema.names, r, strict=True)) for r in new],
                schema=self.arrow_schema))
            self.rows.update({r[0]: r for r in new})
        self.table.refresh()
        sequence = self.table.current_snapshot().sequence_number
        self.models[sequence] = frozenset(self.rows.values())
        return sequence


# -- what the service holds ------------------------------------------------------------------

def ledger_rows(database: Path, after_batch: int = -1) -> list[tuple[int, int, float]]:
    """The mirror's ledger after a batch: (batch id, sequence number, applied_at epoch s),
    in batch order."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True,
                                                timeout=30)) as connection:
            found = connection.execute(
                f"SELECT batch_id, sequence_number, applied_at FROM {LEDGER_TABLE} "
                "WHERE sequence_number IS NOT NULL AND batch_id > ? ORDER BY batch_id",
                (after_batch,)).fetchall()
    except sqlite3.OperationalError:  # no database or no ledger yet
        return []
    return [(int(b), int(s), ledger_time(a)) for b, s, a in found]


def items_state(database: Path) -> tuple[int | None, frozenset[tuple[Any, ...]]]:
    """The S3 table's mirror, ledger and rows in one read transaction."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True,
                                                timeout=30)) as connection:
            connection.execute("BEGIN")
            newest = connection.execute(
                f"SELECT sequence_number FROM {LEDGER_TABLE} ORDER BY batch_id DESC LIMIT 1"
            ).fetchone()
            rows = connection.execute('SELECT id, name, amount FROM "items"').fetchall()
    except sqlite3.OperationalError:
        return None, frozenset()
    return (newest[0] if newest else None), frozenset(tuple(r) for r in rows)


@dataclass
class Sample:
    """One look at the service, `at` seconds into the soak."""

    at: float
    rss: dict[str, int]  # bytes, by role: service (its Python), jvm, workers
    open_files: dict[str, int]
    checkpoint_bytes: int  # the checkpoints' state, not the Spark log kept beside them
    spark_log_bytes: int  # that log (rotated at 16 MiB, one old file kept)
    mirror_bytes: int
    index_bytes: int  # the key indexes: a cache, bounded by its merges and its size limit
    health: int | None
    # CPU seconds since the previous sample, by role: the service's processes as above, the
    # live Iceberg Java writer (its JVM and children) and the soak itself (its checks);
    # they share the machine's cores, so a writer or a check growing costly slows the
    # service's commits as much as anything the service does
    cpu: dict[str, float] = field(default_factory=dict)


def _rss(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _role(pid: int) -> str:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"
    return "jvm" if name == "java" else "workers"


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (0 when it is gone)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return 0.0


class CpuMeter:
    """CPU seconds used between two looks, by role, over processes that come and go (a
    kill -9 replaces the service's; a process first seen counts all it has used)."""

    def __init__(self) -> None:
        self._last: dict[int, float] = {}

    def used(self, roles: dict[str, list[int]]) -> dict[str, float]:
        now: dict[int, float] = {}
        used: dict[str, float] = {}
        for role, pids in roles.items():
            total = 0.0
            for pid in pids:
                seconds = now[pid] = _cpu_seconds(pid)
                total += max(0.0, seconds - self._last.get(pid, 0.0))
            used[role] = round(total, 2)
        self._last = now
        return used


def tree_bytes(path: Path, skip: Callable[[Path], bool] = lambda _: False) -> int:
    """Bytes of the files under `path` (or of `path`, a file), but those `skip` names."""
    if path.is_file():
        with contextlib.suppress(OSError):  # gone meanwhile: 0
            return 0 if skip(path) else path.stat().st_size
        return 0
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            file = Path(root, name)
            if not skip(file):
                with contextlib.suppress(OSError):
                    total += file.stat().st_size
    return total


def spark_log(path: Path) -> bool:
    """Whether a file is the service's Spark log (`spark.log`, `spark.log.1`), which it
    keeps beside the first checkpoint: bounded by its rotation, not checkpoint state."""
    return path.name.startswith(SPARK_LOG_NAME)


# -- faults ----------------------------------------------------------------------------------

@dataclass
class Fault:
    kind: str
    began: float  # seconds into the soak
    ended: float | None = None
    health: list[str] = field(default_factory=list)  # what /health said during it, distinct


class Faults:
    """Starts and ends the faults, in turn."""

    def __init__(self, soak: Soak, kinds: list[str]) -> None:
        unknown = sorted(set(kinds) - set(FAULTS))
        if unknown:
            raise SystemExit(f"--faults: unknown {unknown}; the faults are {', '.join(FAULTS)}")
        self.soak = soak
        self.kinds = kinds
        self.done: list[Fault] = []
        self.skipped: list[str] = []
        self.active: Fault | None = None
        self.turn = 0

    def begin(self, now: float) -> None:
        kind = self.kinds[self.turn % len(self.kinds)]
        self.turn += 1
        if kind == "disk-full" and self.soak.filler is None:
            self.soak.log("fault skipped: disk-full (no tmpfs for the checkpoints)")
            self.skipped.append(kind)
            return
        fault = Fault(kind, now)
        self.soak.log(f"fault: {kind}")
        if kind == "kill-9":
            self.soak.restart_service()
            fault.ended = now
            self.done.append(fault)
            return
        if kind == "broker-cut":
            assert self.soak.broker.proxy is not None
            self.soak.broker.proxy.cut()
        elif kind == "store-down":
            for proxy in self.soak.store_proxies:
                proxy.cut()
        else:
            self.soak.fill_disk()
        self.active = fault

    def end(self, now: float) -> None:
        fault = self.active
        if fault is None:
            return
        if fault.kind == "broker-cut":
            assert self.soak.broker.proxy is not None
            self.soak.broker.proxy.restore()
        elif fault.kind == "store-down":
            for proxy in self.soak.store_proxies:
                proxy.restore()
        else:
            self.soak.free_disk()
        fault.ended = now
        self.done.append(fault)
        self.active = None
        self.soak.log(f"fault over: {fault.kind}")

    def quiet(self, at: float, recovery: float) -> bool:
        """Whether a commit at `at` neither fell in a fault nor soon after one began."""
        for fault in [*self.done, *([self.active] if self.active else [])]:
            end = fault.ended if fault.ended is not None else float("inf")
            if fault.began <= at <= max(end, fault.began + recovery):
                return False
        return True


# -- the soak --------------------------------------------------------------------------------

class Soak:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.started = time.monotonic()
        self.wall_start = time.time()
        self.commits: list[Commit] = []  # the live table's, maintenance included
        self.by_snapshot: dict[int, Commit] = {}
        self.latency: dict[int, float] = {}  # live sequence number -> seconds
        self.mirror_checks = 0
        self.items_checks = 0
        self.topic_checks = 0
        self.topic_events = 0
        self.last_mirror_sequence: int | None = None
        self.last_items_sequence: int | None = None
        self.last_topic_sequence = 0
        self.events_twice = 0
        self.unmirrored = 0
        self.stopped: list[str] = []  # pipelines /health said failed for good, and why
        self.samples: list[Sample] = []
        self.service_starts = 0
        self.filler: Path | None = None
        self.cpu = CpuMeter()
        self.ledger: list[tuple[int, int, float]] = []  # the mirror's, read so far
        self.ledger_from = 0  # where in it the commits still unmeasured begin
        self.unmeasured = 0  # the first live commit without a latency
        self.faults = Faults(self, [k for k in args.faults.split(",") if k])

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def log(self, text: str) -> None:
        print(f"soak {self.elapsed() / 60:6.1f} min | {text}", flush=True)

    # -- set-up ---------------------------------------------------------------------------
    def mount_checkpoints(self) -> Path:
        """A tmpfs of --checkpoint-mib for the checkpoints, so that filling it fills only
        them; without one (no permission to mount) the disk-full fault is skipped."""
        path = self.work / "checkpoints"
        path.mkdir()
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.args.checkpoint_mib}m", "tmpfs",
             str(path)], capture_output=True, text=True)
        if mounted.returncode == 0:
            self.filler = path / "filler"
        else:
            self.log(f"no tmpfs for the checkpoints ({mounted.stderr.strip()}): "
                     "the disk-full fault is skipped")
        return path

    def unmount_checkpoints(self) -> None:
        if self.filler is not None:
            subprocess.run(["umount", "-l", str(self.filler.parent)], check=False)

    def fill_disk(self) -> None:
        assert self.filler is not None
        stats = os.statvfs(self.filler.parent)
        descriptor = os.open(self.filler, os.O_CREAT | os.O_WRONLY)
        try:
            os.posix_fallocate(descriptor, 0, stats.f_bavail * stats.f_frsize)
        finally:
            os.close(descriptor)

    def free_disk(self) -> None:
        assert self.filler is not None
        self.filler.unlink(missing_ok=True)

    def start_service(self) -> ServiceProcess:
        self.service_starts += 1
        return ServiceProcess(self.config, self.port,
                              self.work / f"service-{self.service_starts}.log")

    def restart_service(self) -> None:
        self.service.kill()
        self.service = self.start_service()

    # -- checks ---------------------------------------------------------------------------
    def check_mirror(self) -> None:
        """Latency of every commit the ledger now holds; the rows, when the ledger's newest
        batch names one of the live commits, against Iceberg Java's read at it."""
        database = self.work / "mirror.db"
        # read on from the last look, and commits from the first without a latency: a look
        # every 0.2 s that read the whole ledger and walked every commit cost the soak's CPU
        # a commit 0.11 -> 0.80 s in an hour, on the service's cores
        after = self.ledger[-1][0] if self.ledger else -1
        self.ledger += ledger_rows(database, after)
        ledger = self.ledger
        if not ledger:
            return
        sequences = [s for _, s, _ in ledger[self.ledger_from:]]

        def done(commit: Commit) -> bool:
            return commit.sequence_number in self.latency or commit.kind in MAINTENANCE_KINDS

        while self.unmeasured < len(self.commits) and done(self.commits[self.unmeasured]):
            self.unmeasured += 1
        for commit in self.commits[self.unmeasured:]:
            if done(commit):
                continue
            at = bisect.bisect_left(sequences, commit.sequence_number)
            if at == len(sequences):
                break
            self.latency[commit.sequence_number] = (ledger[self.ledger_from + at][2]
                                                    - commit.timestamp_ms / 1000)
        # ledger rows before the first commit still unmeasured are needed no more
        if self.unmeasured < len(self.commits):
            self.ledger_from += bisect.bisect_left(
                sequences, self.commits[self.unmeasured].sequence_number)
        newest = ledger[-1][1]
        if newest == self.last_mirror_sequence:
            return
        commit = next((c for c in reversed(self.commits) if c.sequence_number == newest), None)
        if commit is None:
            return
        state = read_mirror(database, "orders", newest)
        if state.sequence_number != newest:
            return  # a batch landed between the two reads; the next look checks it
        truth = truth_rows(commit)
        if state.rows != truth:
            raise SoakFailedError(f"the mirror differs from Iceberg Java at snapshot "
                             f"{commit.snapshot_id}: {differences(state.rows, truth)}")
        self.mirror_checks += 1
        self.last_mirror_sequence = newest

    def check_items(self) -> None:
        newest, rows = items_state(self.work / "items.db")
        if newest is None or newest == self.last_items_sequence:
            return
        model = self.items.models.get(newest)
        if model is None:
            return
        if rows != model:
            raise SoakFailedError(f"the S3 table's mirror differs from the writer at sequence "
                             f"{newest}: {len(rows - model)} rows only in the mirror, "
                             f"{len(model - rows)} only in the table")
        self.items_checks += 1
        self.last_items_sequence = newest

    def topic_position(self) -> int | None:
        """The snapshot the topic's last committed marker names."""
        self.follower.advance()
        found = self.follower.markers
        return found[-1]["snapshot_id"] if found else None

    def check_topic(self) -> bool:
        """The topic read on from the last look (`kafka_follow`): no event twice, folded
        equal to Iceberg Java at the snapshot its last marker names. False when a
        transaction was open (Tansu would hide its partitions), to look again soon."""
        if not self.follower.advance():
            return False
        follower = self.follower
        self.events_twice = len(follower.twice)
        if follower.twice:
            raise SoakFailedError(f"{len(follower.twice)} events in the topic twice, e.g. "
                                  f"{follower.twice[:3]}")
        if not follower.markers:
            return True
        commit = self.by_snapshot.get(follower.markers[-1]["snapshot_id"])
        if commit is None:
            raise SoakFailedError(f"the topic's marker names snapshot "
                                  f"{follower.markers[-1]['snapshot_id']}, which the live "
                                  "writer never committed")
        folded = follower.folded_images()
        truth = canonical_rows(truth_table(commit))
        if folded != truth:
            # read whole, as a new consumer would: says whether the topic or the follower
            # is wrong
            whole = confirmed(read_topic(self.broker.bootstrap, TOPIC),
                              markers(self.broker.bootstrap, self.transactional_id))
            self.log(f"the topic read whole ({len(whole)} messages) "
                     f"{'equals' if folded_images(whole) == truth else 'differs from'} "
                     "Iceberg Java too")
            raise SoakFailedError(f"the topic folded at snapshot {commit.snapshot_id} differs from "
                             f"Iceberg Java: {len(set(folded) - set(truth))} rows only in the "
                             f"topic, {len(set(truth) - set(folded))} only in the table")
        self.topic_checks += 1
        self.topic_events = follower.events
        self.last_topic_sequence = commit.sequence_number
        return True

    def sample(self) -> None:
        pid = self.service.process.pid
        rss = {"service": _rss(pid), "jvm": 0, "workers": 0}
        files = {"service": _open_files(pid), "jvm": 0, "workers": 0}
        pids: dict[str, list[int]] = {"service": [pid], "jvm": [], "workers": []}
        for child in descendants(pid):
            role = _role(child)
            if role in rss:
                rss[role] += _rss(child)
                files[role] += _open_files(child)
                pids[role].append(child)
        writer = self.writer.process.pid
        pids["writer"] = [writer, *descendants(writer)]
        pids["soak"] = [os.getpid()]
        answer = self.watch_health()
        self.samples.append(Sample(
            self.elapsed(), rss, files,
            tree_bytes(self.checkpoints, skip=lambda p: p == self.filler or spark_log(p)),
            tree_bytes(self.checkpoints, skip=lambda p: not spark_log(p)),
            sum(tree_bytes(p) for p in self.work.glob("*.db*")),
            tree_bytes(self.work / "key-index"),
            None if answer is None else answer[0], self.cpu.used(pids)))

    def watch_health(self) -> tuple[int, dict[str, Any]] | None:
        """/health now; during a fault, what it says (each pipeline's state and error)
        is kept with the fault, each saying once."""
        answer = self.service.health()
        for name, pipeline in sorted(({} if answer is None else answer[1]).get(
                "pipelines", {}).items()):
            said = f"{name}: {pipeline.get('last_error')}"
            if pipeline.get("state") == "failed" and said not in self.stopped:
                self.stopped.append(said)
                self.log(f"pipeline stopped for good: {said}")
        fault = self.faults.active or (self.faults.done[-1] if self.faults.done else None)
        if answer is None or answer[0] == 200 or fault is None \
                or self.elapsed() > max(fault.ended or 0, fault.began) + self.args.recovery:
            return answer
        for name, pipeline in sorted(answer[1].get("pipelines", {}).items()):
            if pipeline.get("state") not in ("running", "finished"):
                said = f"{name} {pipeline.get('state')}: {pipeline.get('last_error') or ''}"
                if said[:160] not in fault.health:
                    fault.health.append(said[:160])
        return answer

    # -- the run --------------------------------------------------------------------------
    def live_kind(self) -> str | None:
        """The next live commit's kind: random, or a shrinking one past --max-rows."""
        last = self.commits[-1].rows if self.commits else 0
        if last > self.args.max_rows:
            return self.rng.choice(("delete", "equality", "update", "upsert"))
        return None

    def caught_up(self) -> bool:
        head = max(c.sequence_number for c in self.commits)
        mirror = ledger_rows(self.work / "mirror.db")
        items_newest, _ = items_state(self.work / "items.db")
        topic = self.topic_position()
        return (bool(mirror) and mirror[-1][1] >= head
                and items_newest == max(self.items.models)
                and topic is not None and self.by_snapshot[topic].sequence_number >= head)

    def maintain(self) -> None:
        """Compaction and expiry, once the service holds the head (expiry keeps the newest
        two snapshots, so a pipeline behind them would have nothing to read from)."""
        if not self.caught_up():
            return
        for kind in ("compact", "expire"):
            commit = self.writer.commit(kind)
            self.record(commit)
        self.log(f"compacted and expired at {len(self.commits)} commits")
        self.since_maintenance = 0

    def record(self, commit: Commit) -> None:
        if commit.snapshot_id not in self.by_snapshot:
            self.commits.append(commit)
            self.by_snapshot[commit.snapshot_id] = commit

    def run(self) -> dict[str, Any]:
        from pyiceberg.catalog import load_catalog

        args = self.args
        self.rng = random.Random(args.seed)
        self.since_maintenance = 0
        self.checkpoints = self.mount_checkpoints()
        with contextlib.ExitStack() as stack:
            stack.callback(self.unmount_checkpoints)
            self.writer = stack.enter_context(LiveWriter(
                self.work / "warehouse", self.work / "truth", seed=args.seed, log=self.log))
            self.record(self.writer.commit("append"))
            server = stack.enter_context(SeaweedServer())
            self.items = ItemsWriter(load_catalog("soak-writer", **server.catalog_properties()),
                                     args.seed, args.max_rows)
            self.items.commit()
            self.broker = stack.enter_context(KafkaBroker(proxied=True))
            self.store_proxies = [
                stack.enter_context(LoopbackProxy(urlsplit(url).port or 80))
                for url in (server.catalog_uri, server.s3_endpoint)]
            catalog_url, s3_url = (f"http://127.0.0.1:{p.port}" for p in self.store_proxies)
            pipelines = [
                Pipeline("mirror", self.writer.location, self.checkpoints / "mirror",
                         {"type": "sqlite", "url": f"sqlite:///{self.work / 'mirror.db'}",
                          "table": "orders"}),
                Pipeline("topic", self.writer.location, self.checkpoints / "topic",
                         {"type": "kafka", "bootstrap-servers": self.broker.bootstrap,
                          "topic": TOPIC, "timeout": 5}),
                Pipeline("items", "lake.soak.items", self.checkpoints / "items",
                         {"type": "sqlite", "url": f"sqlite:///{self.work / 'items.db'}",
                          "table": "items", "key": ["id"]})]
            self.transactional_id = "meltwater-" + ledger_name(
                "topic", str(self.checkpoints / "topic"))
            self.follower = TopicFollower(self.broker.bootstrap, TOPIC, self.transactional_id)
            stack.callback(self.follower.close)
            self.port = free_port()
            self.config = write_config(self.work / "service.toml", pipelines, port=self.port,
                                       progress="off")
            lake = {**server.catalog_properties(), "uri": catalog_url,
                    "oauth2-server-uri": f"{catalog_url}/v1/oauth/tokens", "s3.endpoint": s3_url}
            self.config.write_text(self.config.read_text() + "\n[catalogs.lake]\n" + "".join(
                f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in lake.items()))
            for key in [k for k in os.environ if k.startswith(("AWS_", "PYICEBERG_"))]:
                del os.environ[key]  # the service knows the catalog from its config only
            # the service's key indexes live and go with the run, not in the user's cache
            os.environ["MELTWATER_KEY_INDEX_DIR"] = str(self.work / "key-index")
            self.service = self.start_service()
            stack.callback(lambda: self.service.process.poll() is None and self.service.kill())
            self.service.wait_running()
            self.log(f"service running ({self.work}); soaking for {args.minutes:g} min")
            self.started, self.wall_start = time.monotonic(), time.time()
            self.soak_loop()
            self.faults.end(self.elapsed())
            self.finish()
            code = self.service.stop(signal.SIGTERM)
            if code != 0:
                raise SoakFailedError(f"the service exited {code} on SIGTERM:\n"
                                      + self.service.tail())
        return self.report(code)

    def soak_loop(self) -> None:
        args = self.args
        next_commit = next_sample = next_topic = next_health = 0.0
        next_fault = args.fault_every * 60
        while (now := self.elapsed()) < args.minutes * 60:
            if self.faults.active is not None and now >= self.faults.active.began + args.outage:
                self.faults.end(now)
            elif self.faults.active is None and now >= next_fault:
                self.faults.begin(now)
                next_fault += args.fault_every * 60
            if now >= next_commit:
                next_commit += args.interval
                self.record(self.writer.commit(self.live_kind()))
                self.since_maintenance += 1
                if len(self.commits) % 2 == 0:
                    self.items.commit()
                if self.since_maintenance >= args.maintain_every and self.faults.active is None:
                    self.maintain()
            self.check_mirror()
            self.check_items()
            if now >= next_topic and not self.broker_cut():
                next_topic = now + (TOPIC_CHECK_S if self.check_topic() else 1)
            if now >= next_sample:
                self.sample()
                next_sample += args.sample_every
            elif now >= next_health:
                self.watch_health()
                next_health = now + 2
            if self.service.process.poll() is not None:
                raise SoakFailedError(f"the service exited ({self.service.process.returncode}):\n"
                                 + self.service.tail())
            self.prune_truth()
            time.sleep(0.2)

    def broker_cut(self) -> bool:
        return self.faults.active is not None and self.faults.active.kind == "broker-cut"

    def prune_truth(self) -> None:
        """Iceberg Java's dumps of commits every reader has gone past (each is the whole
        table): the soak's disk stays bounded too."""
        if self.last_mirror_sequence is None or len(self.commits) < 50:
            return
        keep = min(self.last_mirror_sequence, self.last_topic_sequence)
        for commit in self.commits[:-20]:
            if commit.sequence_number < keep and commit.truth_path:
                Path(commit.truth_path).unlink(missing_ok=True)

    def finish(self) -> None:
        """Every fault over: wait for every pipeline to hold the head, check once more."""
        deadline = time.monotonic() + CATCH_UP_S
        while not self.caught_up():
            if self.service.process.poll() is not None:
                raise SoakFailedError("the service exited:\n" + self.service.tail())
            if time.monotonic() > deadline:
                raise SoakFailedError(f"the service did not catch up in {CATCH_UP_S} s:\n"
                                 + self.service.tail())
            time.sleep(1)
        self.last_mirror_sequence = self.last_items_sequence = None
        self.check_mirror()
        self.check_items()
        while not self.check_topic():  # the service is idle now: soon settled
            if time.monotonic() > deadline:
                raise SoakFailedError("the topic stayed unsettled (a transaction open) after "
                                      "the service caught up")
            time.sleep(1)
        head = max(c.sequence_number for c in self.commits)
        if self.last_mirror_sequence != head:
            raise SoakFailedError("the mirror's last check is not at the head")
        self.unmirrored = sum(c.kind not in MAINTENANCE_KINDS
                              and c.sequence_number not in self.latency for c in self.commits)
        if self.unmirrored:
            raise SoakFailedError(f"{self.unmirrored} commits never reached the mirror")
        self.sample()

    def report(self, code: int | None) -> dict[str, Any]:
        args = self.args
        timed = [(c.timestamp_ms / 1000 - self.wall_start, self.latency[
            c.sequence_number]) for c in self.commits if c.sequence_number in self.latency]
        quiet = [(at, x) for at, x in timed if self.faults.quiet(at, args.recovery)]
        end = max(at for at, _ in timed)
        first = [x for at, x in quiet if at < 600]
        last = [x for at, x in quiet if at >= end - 600]
        # RSS and open files after the first 10 minutes: the median of minutes 10-20 (a kill -9
        # restarts the processes, so one sample could fall on a fresh JVM) against the
        # median of the last 10 minutes
        settled = [s for s in self.samples if 600 <= s.at < 1200] or self.samples[:1]
        tail = [s for s in self.samples if s.at >= self.samples[-1].at - 600]

        def growth(what: str, role: str | None = None) -> float:
            def size(sample: Sample) -> int:
                values = getattr(sample, what)
                return values[role] if role else sum(values.values())
            return statistics.median(size(s) for s in tail) / max(
                1.0, statistics.median(size(s) for s in settled))

        return {
            "minutes": args.minutes, "fault_every_min": args.fault_every,
            "outage_s": args.outage, "interval_s": args.interval,
            "live_commits": len(self.commits), "items_commits": self.items.commits,
            "service_starts": self.service_starts, "service_exit": code,
            "faults": [asdict(f) for f in self.faults.done],
            "fault_counts": dict(Counter(f.kind for f in self.faults.done)),
            "skipped_faults": sorted(set(self.faults.skipped)),
            "checks": {"mirror": self.mirror_checks, "items": self.items_checks,
                       "topic": self.topic_checks},
            "pipelines_stopped": self.stopped,
            "commits_unmirrored": self.unmirrored, "events_twice": self.events_twice,
            "topic_events": self.topic_events,
            "latency_s": {"all_median": statistics.median(x for _, x in timed),
                          "all_p95": p95([x for _, x in timed]),
                          "quiet_commits": len(quiet),
                          "first_10min_quiet_p95": p95(first),
                          "last_10min_quiet_p95": p95(last),
                          "last_over_first": p95(last) / p95(first)},
            "rss_growth_after_10min": growth("rss"),
            "rss_growth_by_role": {r: growth("rss", r) for r in ("service", "jvm", "workers")},
            "open_files_growth_after_10min": growth("open_files"),
            "open_files_growth_by_role": {r: growth("open_files", r)
                                          for r in ("service", "jvm", "workers")},
            "rss_median_bytes": {r: statistics.median(s.rss[r] for s in tail)
                                 for r in ("service", "jvm", "workers")},
            "checkpoint_bytes": {"after_10min": statistics.median(
                                     s.checkpoint_bytes for s in settled),
                                 "end": self.samples[-1].checkpoint_bytes,
                                 "max": max(s.checkpoint_bytes for s in self.samples)},
            "spark_log_bytes": {"end": self.samples[-1].spark_log_bytes,
                                "max": max(s.spark_log_bytes for s in self.samples)},
            "cpu_per_live_commit_s": {"first_10min": self.cpu_per_commit(0, 600),
                                      "last_10min": self.cpu_per_commit(end - 600, end)},
            "index_bytes": {"after_10min": statistics.median(s.index_bytes for s in settled),
                            "end": self.samples[-1].index_bytes,
                            "max": max(s.index_bytes for s in self.samples)},
            "samples": [asdict(s) for s in self.samples],
            "latencies": timed,
        }

    def cpu_per_commit(self, begin: float, end: float) -> dict[str, float]:
        """CPU seconds a live commit, by role, over the samples in [begin, end)."""
        commits = sum(begin <= c.timestamp_ms / 1000 - self.wall_start < end
                      for c in self.commits)
        used: Counter[str] = Counter()
        for sample in self.samples:
            if begin <= sample.at < end:
                used.update(sample.cpu)
        return {role: round(seconds / max(commits, 1), 3) for role, seconds in used.items()}


MAINTENANCE_KINDS = frozenset({"compact", "expire", "rewrite-deletes", "rollback"})


def p95(values: list[float]) -> float:
    if not values:
        return float("nan")
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def plot(result: dict[str, Any], path: Path) -> None:
    """RSS, open files, checkpoint bytes and latency over the soak, faults shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    minutes = [s["at"] / 60 for s in samples]
    figure, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
    for role in ("service", "jvm", "workers"):
        axes[0].plot(minutes, [s["rss"][role] / 2**20 for s in samples], label=role)
        axes[1].plot(minutes, [s["open_files"][role] for s in samples], label=role)
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].set_ylabel("open files")
    axes[2].plot(minutes, [s["checkpoint_bytes"] / 2**20 for s in samples])
    axes[2].set_ylabel("checkpoints (MiB)")
    axes[3].scatter([at / 60 for at, _ in result["latencies"]],
                    [x for _, x in result["latencies"]], s=4)
    axes[3].set_yscale("log")
    axes[3].set_ylabel("commit -> mirror (s)")
    spans = [b["at"] - a["at"] for a, b in itertools.pairwise(samples)]
    for role in sorted({r for s in samples for r in s.get("cpu", {})}):
        axes[4].plot(minutes[1:], [s["cpu"].get(role, 0) / span for s, span
                                   in zip(samples[1:], spans, strict=True)], label=role)
    axes[4].set_ylabel("CPU (cores)")
    axes[4].legend()
    axes[4].set_xlabel("minutes")
    colours = dict(zip(FAULTS, ("red", "orange", "purple", "grey"), strict=True))
    for fault in result["faults"]:
        for axis in axes:
            axis.axvspan(fault["began"] / 60, max(fault["ended"], fault["began"] + 5) / 60,
                         color=colours[fault["kind"]], alpha=0.2, lw=0)
    axes[0].legend()
    axes[0].set_title(f"meltwater serve, {result['minutes']:g} min soak; faults shaded: "
                      + ", ".join(f"{k} {c}" for k, c in colours.items()))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)


def print_report(result: dict[str, Any]) -> None:
    latency = result["latency_s"]
    checks = result["checks"]
    print(f"{result['minutes']:g} min: {result['live_commits']} live commits, "
          f"{result['items_commits']} S3 commits; faults {result['fault_counts']}; "
          f"{result['service_starts']} service starts; exit {result['service_exit']}")
    print(f"checked: mirror {checks['mirror']} times, S3 mirror {checks['items']}, topic "
          f"{checks['topic']} ({result['topic_events']} events); unmirrored commits "
          f"{result['commits_unmirrored']}, events twice {result['events_twice']}")
    print(f"latency: median {latency['all_median']:.2f} s, p95 {latency['all_p95']:.2f} s; "
          f"quiet p95 first 10 min {latency['first_10min_quiet_p95']:.2f} s, last 10 min "
          f"{latency['last_10min_quiet_p95']:.2f} s ({latency['last_over_first']:.2f}x)")
    roles = ("service", "jvm", "workers")
    print("RSS, last 10 min: " + ", ".join(
        f"{r} {result['rss_median_bytes'][r] / 2**20:.0f} MiB "
        f"({result['rss_growth_by_role'][r]:.2f}x)" for r in roles) + "; open files: "
        + ", ".join(f"{r} {result['open_files_growth_by_role'][r]:.2f}x" for r in roles))
    print(f"growth after 10 min: RSS {result['rss_growth_after_10min']:.2f}x, open files "
          f"{result['open_files_growth_after_10min']:.2f}x; checkpoints "
          f"{result['checkpoint_bytes']['after_10min'] / 2**20:.1f} MiB -> "
          f"{result['checkpoint_bytes']['end'] / 2**20:.1f} MiB (max "
          f"{result['checkpoint_bytes']['max'] / 2**20:.1f})")
    if "cpu_per_live_commit_s" in result:  # not in the results of runs before it was sampled
        cpu = result["cpu_per_live_commit_s"]
        print("CPU s a live commit, first 10 min -> last 10 min: " + ", ".join(
            f"{r} {cpu['first_10min'].get(r, 0):.2f} -> {cpu['last_10min'].get(r, 0):.2f}"
            for r in sorted(cpu["last_10min"])) + f"; Spark log "
            f"{result['spark_log_bytes']['end'] / 2**20:.1f} MiB (beside the checkpoints)")
    if "index_bytes" in result:  # not in the results of runs before it was sampled
        index = result["index_bytes"]
        print(f"key indexes {index['after_10min'] / 2**20:.1f} MiB -> "
              f"{index['end'] / 2**20:.1f} MiB (max {index['max'] / 2**20:.1f})")
    for fault in result["faults"]:
        said = "; ".join(fault["health"]) or "-"
        print(f"  {fault['began'] / 60:6.1f} min {fault['kind']:<10} /health: {said}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replot is not None:  # the figure of a finished run, from its results
        plot(json.loads(args.replot.read_text()), args.figure)
        print(f"written to {args.figure}")
        return 0
    # SIGTERM (a timeout, an operator) ends the soak as Ctrl-C does: through its clean-up,
    # which stops the servers and the service and unmounts the checkpoints' tmpfs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="meltwater-soak-"))
    soak = Soak(args, work)
    try:
        result = soak.run()
    except SoakFailedError as failure:
        print(f"soak FAILED after {soak.elapsed() / 60:.1f} min: {failure}", flush=True)
        print(f"kept for a look: {work}")
        with contextlib.suppress(Exception):  # what was measured until then, if anything
            partial = {**soak.report(None), "failure": str(failure)}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(partial, indent=1))
            print(f"what was measured until then: {args.out}")
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print_report(result)
    for said in result["pipelines_stopped"]:
        print(f"FAILED: a pipeline stopped for good (only a restart brought it back): {said}")
    if not args.no_figure:
        plot(result, args.figure)
        print(f"written to {args.out} and {args.figure}")
    if args.keep or result["pipelines_stopped"]:
        print(f"kept: {work}")
    else:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 1 if result["pipelines_stopped"] else 0


if __name__ == "__main__":
    sys.exit(main())
