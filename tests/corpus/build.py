"""Builds the corpus once per generator version and reuses it from the cache.

The corpus directory is keyed by a hash of the generator's sources and the writer
environment, so editing a scenario regenerates it and nothing else does. Iceberg metadata
stores absolute paths, so the corpus is generated in place; a `READY` marker written last
tells a complete corpus from one interrupted half-way.

Two corpora come from the same scenarios: `ensure_corpus()`, tables in a local (`file:`)
warehouse, and `ensure_s3_corpus()`, the same scenarios written by Iceberg Java with the
warehouse at `s3://lake` (s3writer/generate_s3.py, through LocalBucketFileSystem: the
bucket is the local directory `<corpus>/bucket/lake`, to upload to an object store as is).
The S3 corpus has its own key, which covers the local corpus's key, so editing a scenario
regenerates both, and editing s3writer/ regenerates the S3 corpus only.
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

from corpus.writer_env import WriterEnv, WriterEnvError, cache_root, ensure_writer_env

WRITER_DIR = Path(__file__).parent / "writer"
S3_WRITER_DIR = Path(__file__).parent / "s3writer"
S3_WAREHOUSE = "s3://lake"  # the S3 corpus's Hadoop warehouse: tables at s3://lake/db/<name>
S3_FS_SOURCE = S3_WRITER_DIR / "LocalBucketFileSystem.java"


def generator_version() -> str:
    digest = hashlib.sha256()
    sources = sorted(WRITER_DIR.rglob("*.py")) + sorted(WRITER_DIR.rglob("*.java"))
    sources.append(Path(__file__).parent / "writer_env.py")
    for source in sources:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def s3_generator_version() -> str:
    """The S3 corpus's key: the local corpus's key, s3writer/'s sources and the warehouse."""
    digest = hashlib.sha256(generator_version().encode())
    for source in sorted(S3_WRITER_DIR.glob("*.py")) + sorted(S3_WRITER_DIR.glob("*.java")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    digest.update(S3_WAREHOUSE.encode())
    return digest.hexdigest()[:12]


def ensure_corpus(log=print) -> Path:
    """Return the corpus directory, generating it first if this version has none."""
    return _ensure(cache_root() / f"corpus-{generator_version()}", log, _local_command)


def ensure_s3_corpus(log=print) -> Path:
    """Return the S3 corpus directory, generating it first if this version has none.

    Its tables are in `<dir>/bucket/lake/db/<scenario>`, every path inside them
    `s3://lake/db/<scenario>/...`; `<dir>/<scenario>/` holds the truth, as for the local one.
    """
    return _ensure(cache_root() / f"corpus-s3-{s3_generator_version()}", log, _s3_command)


def _ensure(home: Path, log, command: Callable[[WriterEnv, Path], list[str]]) -> Path:
    if (home / "READY").exists():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one generator at a time; the others wait for it
        if (home / "READY").exists():
            return home
        return _generate(home, log, command)


def _local_command(env: WriterEnv, home: Path) -> list[str]:
    return [str(env.python), str(WRITER_DIR / "generate.py"), "--out", str(home),
            "--jars", env.spark_jars()]


def _s3_command(env: WriterEnv, home: Path) -> list[str]:
    fs_jar = _compile_local_bucket_fs(env, home / "jars")
    return [str(env.python), str(S3_WRITER_DIR / "generate_s3.py"), "--out", str(home),
            "--jars", f"{env.spark_jars()},{fs_jar}", "--warehouse", S3_WAREHOUSE]


def hadoop_classpath(env: WriterEnv) -> str:
    """Spark 3.5's jars in the writer env, Hadoop 3.3.4's client among them, as a classpath."""
    jars = next(env.python.parent.parent.glob("lib/python3*/site-packages/pyspark/jars"))
    return f"{jars}/*"


def local_bucket_fs_jar(s3_corpus: Path) -> Path:
    """The LocalBucketFileSystem jar an S3 corpus was written with."""
    return s3_corpus / "jars" / "meltwater-local-bucket-fs.jar"


def _compile_local_bucket_fs(env: WriterEnv, into: Path) -> Path:
    """LocalBucketFileSystem compiled against the writer env's Hadoop (Spark 3.5's jars)."""
    classes = into / "classes"
    classes.mkdir(parents=True)
    jar = local_bucket_fs_jar(into.parent)
    for command, what in (
        (["javac", "--release", "11", "-nowarn", "-cp", hadoop_classpath(env), "-d", str(classes),
          str(S3_FS_SOURCE)], "compiling LocalBucketFileSystem.java"),
        (["jar", "cf", str(jar), "-C", str(classes), "."], "packaging LocalBucketFileSystem"),
    ):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise WriterEnvError(f"{what} failed:\n{result.stderr[-2000:]}")
    shutil.rmtree(classes)
    return jar


def _generate(home: Path, log, command: Callable[[WriterEnv, Path], list[str]]) -> Path:
    env = ensure_writer_env(log)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    log(f"generating the Iceberg Java corpus in {home} (once per generator version) ...")
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
    log(f"corpus generated in {time.monotonic() - started:.0f}s")
    (home / "READY").write_text("ok\n")
    return home
