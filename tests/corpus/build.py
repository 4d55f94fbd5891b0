"""Builds the corpus once per generator version and reuses it from the cache.

The corpus directory is keyed by a hash of the generator's sources and the writer
environment, so editing a scenario regenerates it and nothing else does. Iceberg metadata
stores absolute paths, so the corpus is generated in place; a `READY` marker written last
tells a complete corpus from one interrupted half-way.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from corpus.writer_env import WriterEnvError, cache_root, ensure_writer_env

WRITER_DIR = Path(__file__).parent / "writer"


def generator_version() -> str:
    digest = hashlib.sha256()
    sources = sorted(WRITER_DIR.rglob("*.py")) + sorted(WRITER_DIR.rglob("*.java"))
    sources.append(Path(__file__).parent / "writer_env.py")
    for source in sources:
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def ensure_corpus(log=print) -> Path:
    """Return the corpus directory, generating it first if this version has none."""
    home = cache_root() / f"corpus-{generator_version()}"
    if (home / "READY").exists():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one generator at a time; the others wait for it
        if (home / "READY").exists():
            return home
        return _generate(home, log)


def _generate(home: Path, log) -> Path:
    env = ensure_writer_env(log)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    log(f"generating the Iceberg Java corpus in {home} (once per generator version) ...")
    started = time.monotonic()
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("SPARK_", "PYSPARK_", "PYTHONPATH"))}
    child_env["PYSPARK_PYTHON"] = str(env.python)
    result = subprocess.run(
        [str(env.python), str(WRITER_DIR / "generate.py"), "--out", str(home),
         "--jars", env.spark_jars()],
        env=child_env, capture_output=True, text=True,
    )
    (home / "generate.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-25:])
        raise WriterEnvError(f"corpus generation failed; full log in {home}/generate.log\n{tail}")
    log(result.stdout.strip())
    log(f"corpus generated in {time.monotonic() - started:.0f}s")
    (home / "READY").write_text("ok\n")
    return home
