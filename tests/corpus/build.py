"""Builds the corpus once per generator version and reuses it from the cache.

The corpus directory is keyed by a hash of the generator's sources and the writer
environment, so editing a scenario regenerates it and nothing else does. Iceberg metadata
stores absolute paths, so the corpus is generated in place; a `READY` marker written last
tells a complete corpus from one interrupted half-way.

Two corpora come from the same scenarios: `ensure_corpus()`, tables in a local (`file:`)
warehouse, and `ensure_s3_corpus()`, the same scenarios written by Iceberg Java with the
warehouse at `s3://lake` (s3writer/generate_s3.py, through testbed's LocalBucketFileSystem: the
bucket is the local directory `<corpus>/bucket/lake`, to upload to an object store as is).
The S3 corpus has its own key, which covers the local corpus's key, so editing a scenario
regenerates both, and editing s3writer/ regenerates the S3 corpus only.

`ensure_store_corpus(scheme)` writes a few scenarios (STORE_SCENARIOS) the same way at a
Google Cloud Storage (`gs://lake`) or Azure (`abfs://lake@meltwater.dfs.core.windows.net`)
warehouse: fewer than for S3, as the emulators they are read from are tested for the paths
meltwater takes there (the store's client, its properties and errors), not for Iceberg
features, which the S3 and local corpora cover whole.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import local_bucket
import writer_env
from writer_env import WriterEnv, WriterEnvError, cache_root, ensure_writer_env

from corpus.pyiceberg_corpus import write_pyiceberg_tables

WRITER_DIR = Path(__file__).parent / "writer"
# pyiceberg's tables in the local corpus: its writer's sources (and its version) key it too
PYICEBERG_SOURCES = (Path(__file__).parent / "pyiceberg_corpus.py",
                     Path(__file__).parent / "pyiceberg_writer.py")
S3_WRITER_DIR = Path(__file__).parent / "s3writer"
S3_WAREHOUSE = "s3://lake"  # the S3 corpus's Hadoop warehouse: tables at s3://lake/db/<name>
# The other stores' warehouses, by scheme; the Azure one is container `lake` of storage
# account `meltwater` (as Azure's own hosts name it; an emulator serves it on loopback).
STORE_WAREHOUSES = {"gs": "gs://lake", "abfs": "abfs://lake@meltwater.dfs.core.windows.net"}
# Position deletes in partitions, equality deletes, deletion vectors (Puffin), and data
# files in ORC and Avro besides Parquet.
STORE_SCENARIOS = ("mor_partitioned", "equality_deletes", "v3_deletion_vectors",
                   "file_formats")


def generator_version() -> str:
    """The local corpus's key: writer/'s scripts and the writer environment's key (which
    covers the Java helper the scripts call), each by content, never by path."""
    import pyiceberg

    digest = hashlib.sha256(writer_env.key().encode())
    for source in [*sorted(WRITER_DIR.rglob("*.py")), *PYICEBERG_SOURCES]:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    digest.update(pyiceberg.__version__.encode())
    return digest.hexdigest()[:12]


def s3_generator_version(warehouse: str = S3_WAREHOUSE,
                         only: tuple[str, ...] = ()) -> str:
    """The S3 corpus's key (or that of a corpus at another store's `warehouse`, of the
    scenarios `only`): the local corpus's key, s3writer/'s sources, LocalBucketFileSystem's
    source, the warehouse and the scenarios."""
    digest = hashlib.sha256(generator_version().encode())
    for source in [*sorted(S3_WRITER_DIR.glob("*.py")), local_bucket.SOURCE]:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    digest.update(warehouse.encode())
    for name in only:
        digest.update(name.encode())
    return digest.hexdigest()[:12]


def ensure_corpus(log=print) -> Path:
    """Return the corpus directory, generating it first if this version has none."""
    return _ensure(cache_root() / f"corpus-{generator_version()}", log, _local_command,
                   "the Iceberg Java corpus")


def ensure_s3_corpus(log=print) -> Path:
    """Return the S3 corpus directory, generating it first if this version has none.

    Its tables are in `<dir>/bucket/lake/db/<scenario>`, every path inside them
    `s3://lake/db/<scenario>/...`; `<dir>/<scenario>/` holds the truth, as for the local one.
    """
    return _ensure(cache_root() / f"corpus-s3-{s3_generator_version()}", log, _s3_command,
                   "the Iceberg Java corpus at s3:// locations")


def ensure_store_corpus(scheme: str, log=print) -> Path:
    """Return the directory of STORE_SCENARIOS written at STORE_WAREHOUSES[scheme] (`gs`,
    `abfs`), generating it first if this version has none; laid out as the S3 corpus."""
    warehouse = STORE_WAREHOUSES[scheme]
    home = cache_root() / f"corpus-{scheme}-{s3_generator_version(warehouse, STORE_SCENARIOS)}"
    return _ensure(home, log, lambda env, into: _s3_command(env, into, warehouse,
                                                             STORE_SCENARIOS),
                   f"the Iceberg Java corpus at {warehouse}")


def _ensure(home: Path, log, command: Callable[[WriterEnv, Path], list[str]],
            what: str) -> Path:
    if (home / "READY").exists():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # one generator at a time; the others wait for it
            log(f"waiting for another run writing {what} into {home} ...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / "READY").exists():
            return home
        return _generate(home, log, command, what)


def _local_command(env: WriterEnv, home: Path) -> list[str]:
    """Iceberg Java's scenarios, and pyiceberg's tables (written here first) read by it."""
    foreign = write_pyiceberg_tables(home / "pyiceberg")
    return [str(env.python), str(WRITER_DIR / "generate.py"), "--out", str(home),
            "--jars", env.spark_jars(), "--foreign", str(foreign)]


def _s3_command(env: WriterEnv, home: Path, warehouse: str = S3_WAREHOUSE,
                only: tuple[str, ...] = ()) -> list[str]:
    fs_jar = local_bucket.compile_local_bucket_fs(env, home)
    return [str(env.python), str(S3_WRITER_DIR / "generate_s3.py"), "--out", str(home),
            "--jars", f"{env.spark_jars()},{fs_jar}", "--warehouse", warehouse,
            *(["--only", *only] if only else [])]


def _generate(home: Path, log, command: Callable[[WriterEnv, Path], list[str]],
              what: str) -> Path:
    env = ensure_writer_env(log)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    log(f"writing {what} into {home} (a few minutes, once per generator version) ...")
    started = time.monotonic()
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("SPARK_", "PYSPARK_", "PYTHONPATH"))}
    child_env["PYSPARK_PYTHON"] = str(env.python)
    result = subprocess.run(command(env, home), env=child_env, capture_output=True, text=True)
    (home / "generate.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-25:])
        raise WriterEnvError(f"corpus generation failed; full log in {home}/generate.log\n{tail}")
    log(result.stdout.strip())
    log(f"{what} written in {time.monotonic() - started:.0f}s")
    (home / "READY").write_text("ok\n")
    return home
