"""Generates the bench tables once per generator version and size, then reuses them.

Like tests/corpus/build.py: the directory is keyed by a hash of the writer scripts, the
writer environment and the requested sizes; a lock lets concurrent runs share one
generation and a `READY` marker written last tells a complete set from an interrupted one.
Iceberg metadata stores absolute paths, so the tables are generated in place.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))

from local_bucket import SOURCE as LOCAL_BUCKET_FS_SOURCE
from local_bucket import compile_local_bucket_fs, local_bucket_fs_jar
from writer_env import WriterEnv, WriterEnvError, cache_root, ensure_writer_env

WRITER_DIR = Path(__file__).resolve().parent / "writer"


@dataclass(frozen=True)
class Sizes:
    """How big the generated tables are; part of the cache key."""

    rows: int
    files: int
    manifests: int


@dataclass(frozen=True)
class BenchTables:
    """The generated tables: the writer environment and what make_tables.py recorded."""

    home: Path
    env: WriterEnv
    scan: dict[str, Any]
    plan: dict[str, Any]

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"


# The writer scripts the scan tables depend on (their cache key). Other benchmarks' writer
# scripts (changes_tables.py, java_diff.py) are left out so they never regenerate these.
SCAN_SOURCES = ("java_read.py", "make_tables.py", "spark.py")


def generator_version(sizes: object, env: WriterEnv,
                      sources: tuple[str, ...] = SCAN_SOURCES) -> str:
    """Changes with the writer scripts, the writer environment and the sizes, nothing else."""
    digest = hashlib.sha256(f"{sizes}|{env.python}".encode())
    for name in sorted(sources):
        source = WRITER_DIR / name
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def writer_child_env(env: WriterEnv) -> dict[str, str]:
    """The parent's environment minus anything pointing Spark at the main venv's pyspark 4."""
    child = {k: v for k, v in os.environ.items()
             if not k.startswith(("SPARK_", "PYSPARK_", "PYTHONPATH"))}
    child["PYSPARK_PYTHON"] = str(env.python)
    return child


def ensure_tables(sizes: Sizes, log: Callable[[str], None] = print) -> BenchTables:
    """Return the bench tables, generating them first if this version has none (minutes)."""
    env = ensure_writer_env(log)
    home = cache_root() / f"bench-tables-{generator_version(sizes, env)}"
    command = [str(env.python), str(WRITER_DIR / "make_tables.py"), "--out", str(home),
               "--jars", env.spark_jars(), "--rows", str(sizes.rows), "--files",
               str(sizes.files), "--manifests", str(sizes.manifests)]
    ensure_generated(home, env, command, "bench tables", log)
    record = json.loads((home / "tables.json").read_text())
    return BenchTables(home, env, record["scan_mor"], record["plan_many_manifests"])


def ensure_generated(home: Path, env: WriterEnv, command: list[str], what: str,
                     log: Callable[[str], None] = print,
                     prepare: Callable[[Path], None] | None = None) -> None:
    """Run a writer-venv generator into `home` once: a lock shares one generation between
    concurrent runs, and `READY`, written last, tells a complete set from an interrupted one.
    `prepare(home)` runs first, in the emptied `home` (e.g. to compile a jar the command
    names)."""
    if not (home / "READY").exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        with open(home.parent / f"{home.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one generator at a time; the others wait
            if not (home / "READY").exists():
                _generate(home, env, command, what, log, prepare)


def _generate(home: Path, env: WriterEnv, command: list[str], what: str,
              log: Callable[[str], None], prepare: Callable[[Path], None] | None) -> None:
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    if prepare is not None:
        prepare(home)
    log(f"generating the {what} in {home} (once per generator version) ...")
    started = time.monotonic()
    result = subprocess.run(command, env=writer_child_env(env), capture_output=True, text=True)
    (home / "generate.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-25:])
        raise WriterEnvError(f"{what} generation failed; log in {home}/generate.log\n{tail}")
    log(result.stdout.strip())
    log(f"{what} generated in {time.monotonic() - started:.0f}s")
    (home / "READY").write_text("ok\n")


# -- the change benchmark's tables (bench/changes.py) --------------------------------------

CHANGE_SOURCES = ("changes_tables.py", "make_tables.py", "spark.py")


@dataclass(frozen=True)
class ChangeSizes:
    """One change table: rows in id order over `files` data files, then an UPDATE of the
    ids below `updated`; part of the cache key."""

    rows: int
    files: int
    updated: int


def ensure_change_table(sizes: ChangeSizes, log: Callable[[str], None] = print,
                        ) -> tuple[WriterEnv, dict[str, Any]]:
    """The writer environment and writer/changes_tables.py's record of the table, generating
    it first if this version and size has none. Each size has its own cache directory, so
    the 1x table is shared by runs with different scales."""
    env = ensure_writer_env(log)
    version = generator_version(sizes, env, CHANGE_SOURCES)
    home = cache_root() / f"bench-changes-{version}"
    command = [str(env.python), str(WRITER_DIR / "changes_tables.py"), "--out", str(home),
               "--jars", env.spark_jars(), "--rows", str(sizes.rows), "--files",
               str(sizes.files), "--updated", str(sizes.updated)]
    ensure_generated(home, env, command, f"change table of {sizes.rows:,} rows", log)
    record = json.loads((home / "tables.json").read_text())["changes_mor"]
    return env, {**record, "home": str(home)}


# -- the object-store benchmark's copy of scan_mor (bench/s3scan.py) -----------------------

S3_WRITER_DIR = Path(__file__).resolve().parent / "s3writer"
S3_WAREHOUSE = "s3://lake"  # the REST table bucket of testbed/seaweed_server.py; table db.scan_mor


@dataclass(frozen=True)
class S3ScanTable:
    """scan_mor as Iceberg Java wrote it at S3_WAREHOUSE: `<home>/bucket/<bucket>/<key>` holds
    the object s3://<bucket>/<key>; `scan` is what Iceberg Java recorded (as for BenchTables)."""

    home: Path
    scan: dict[str, Any]

    @property
    def buckets(self) -> Path:
        return self.home / "bucket"


def s3_generator_version(sizes: Sizes, env: WriterEnv) -> str:
    """The local scan table's key (its writer scripts, the environment, the sizes), the
    s3writer script, LocalBucketFileSystem's source and the warehouse."""
    digest = hashlib.sha256(generator_version(sizes, env).encode())
    for source in [*sorted(S3_WRITER_DIR.glob("*.py")), LOCAL_BUCKET_FS_SOURCE]:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    digest.update(S3_WAREHOUSE.encode())
    return digest.hexdigest()[:12]


def ensure_s3_scan_table(sizes: Sizes, log: Callable[[str], None] = print) -> S3ScanTable:
    """scan_mor written a second time by Iceberg Java, at s3://lake (bench/s3writer/), once per
    version and size: about 2 minutes on 2 cores."""
    env = ensure_writer_env(log)
    home = cache_root() / f"bench-s3-tables-{s3_generator_version(sizes, env)}"
    jar = local_bucket_fs_jar(home)
    command = [str(env.python), str(S3_WRITER_DIR / "make_s3_table.py"), "--out", str(home),
               "--jars", f"{env.spark_jars()},{jar}", "--warehouse", S3_WAREHOUSE,
               "--rows", str(sizes.rows), "--files", str(sizes.files)]
    ensure_generated(home, env, command, "S3 copy of the scan table", log,
                     prepare=lambda into: compile_local_bucket_fs(env, into))
    record = json.loads((home / "tables.json").read_text())
    return S3ScanTable(home, record["scan_mor"])
