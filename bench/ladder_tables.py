"""The scale ladder's tables (issue 25): written once per shape, size and generator version.

Each table (bench/writer/ladder_tables.py, Iceberg Java 1.10.2 in the writer venv) has its
own cache directory `$MELTWATER_CACHE/bench-ladder-<shape>-<hash>/`, keyed as the other
bench tables are (tables.generator_version: the writer scripts, the writer environment and
the sizes) and generated under the same lock with the same `READY` marker
(tables.ensure_generated), with `nice -n 10`: other work shares the machine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tables import (
    WRITER_DIR,
    WriterEnv,
    cache_root,
    ensure_generated,
    ensure_writer_env,
    generator_version,
)

LADDER_SOURCES = ("ladder_tables.py", "make_tables.py", "spark.py")


@dataclass(frozen=True)
class Shape:
    """One ladder table: its kind, size and history; part of the cache key."""

    shape: str  # backlog, huge, history, big or dv
    rows: int
    commits: int = 0
    keys: int = 1000
    seed: int = 25

    @property
    def label(self) -> str:
        return f"{self.shape} {_count(self.rows)}"

    def estimate_minutes(self) -> float:
        """About how long writing it takes on 2 shared cores (measured: backlog 2M in 4
        min, 20M in 9 min, counting the rows at the rungs included; big 30M 2.5 min;
        history 26 min, its Spark SQL commits slowing from 0.8 to 3 s as the files pile
        up)."""
        bulk = self.rows / 1_000_000 * 0.25  # writing and counting a million rows
        if self.shape in ("backlog", "huge"):
            return 2 + bulk + self.commits * 0.3 / 60
        if self.shape == "history":
            return 1 + bulk + self.commits * 1.5 / 60
        return 1 + self.rows / 1_000_000 * 0.05  # big 30M: 2.5 min (no equality deletes)


def _count(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1_000}k"


@dataclass(frozen=True)
class LadderTable:
    """A generated table: where it is and what Iceberg Java recorded while writing it."""

    shape: Shape
    home: Path
    env: WriterEnv
    record: dict[str, Any]

    @property
    def location(self) -> str:
        return self.record["location"]

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    def snapshot(self, commit: int) -> dict[str, Any]:
        """The snapshot of commit `commit` (0: the first load)."""
        return self.record["snapshots"][commit]

    def live_rows(self, commit: int) -> int:
        """The rows Iceberg Java read at that commit's snapshot."""
        return self.record["live_rows_at"][str(commit)]

    def keys(self, first: int, last: int) -> list[int]:
        """The keys commits first..last (inclusive) upserted (backlog only)."""
        written = json.loads((self.home / "keys.json").read_text())
        return sorted({k for c in range(first, last + 1) for k in written[str(c)]})


def describe_step(shape: Shape) -> str:
    """The line printed before a long generation step."""
    what = {"backlog": f"{shape.commits} upserts x {shape.keys:,} keys",
            "huge": f"{shape.commits} upserts x {shape.keys:,} keys, 2M-row files",
            "history": f"{shape.commits} mixed commits",
            "big": "1% deleted, 0.1% updated",
            "dv": f"{shape.keys:,} rows deleted as deletion vectors"}[shape.shape]
    return (f"writing {shape.shape} table {shape.rows:,} rows, {what} with Iceberg Java "
            f"(~{max(1, round(shape.estimate_minutes()))} min, once)")


def ensure_ladder_table(shape: Shape, log: Callable[[str], None] = print) -> LadderTable:
    """The table of `shape`, generating it first if this version and size has none."""
    env = ensure_writer_env(log)
    version = generator_version(shape, env, LADDER_SOURCES)
    home = cache_root() / f"bench-ladder-{shape.shape}-{version}"
    if not (home / "READY").exists():
        log(describe_step(shape))
    command = ["nice", "-n", "10", str(env.python), str(WRITER_DIR / "ladder_tables.py"),
               "--out", str(home), "--jars", env.spark_jars(), "--shape", shape.shape,
               "--rows", str(shape.rows), "--commits", str(shape.commits),
               "--keys", str(shape.keys), "--seed", str(shape.seed)]
    ensure_generated(home, env, command, f"{shape.label} ladder table", log)
    record = json.loads((home / "tables.json").read_text())
    return LadderTable(shape, home, env, record)
