"""Iceberg Java writing at s3:// with no S3 client: a bucket kept in a local directory.

`LocalBucketFileSystem.java` (beside this module) is a Hadoop FileSystem for `s3://` whose
bucket `<b>` is the local directory `<root>/<b>`; registered as `fs.s3.impl` in the writer
environment (`writer_env`), Iceberg Java writes a table whose every path says `s3://<b>/...`.
`upload_objects` then copies such a directory to a real object store byte for byte, under the
same keys. Registered as `fs.gs.impl` or `fs.abfs.impl` instead, it serves those schemes the
same way: its URI, and so every path it answers with, takes the scheme and authority it is
initialized with (its `getScheme()` says "s3" for Hadoop's service loader, which a
`fs.<scheme>.impl` setting bypasses; the GCS and Azure corpora, tests/corpus/build.py, are
written so); an Azure authority `container@account host` is one directory,
`<root>/container@account host`. The S3 corpus (tests/corpus/build.py) and the object-store
benchmark's table (bench/tables.py) are both written this way.

    jar = compile_local_bucket_fs(env, home)   # <home>/jars/meltwater-local-bucket-fs.jar
    # ... run a writer-venv script with `jar` among its Spark jars, fs.s3.impl set ...
    upload_objects({"lake/db/t/metadata/v1.metadata.json": path, ...}, s3_filesystem)
"""

from __future__ import annotations

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from writer_env import WriterEnv, WriterEnvError

SOURCE = Path(__file__).parent / "LocalBucketFileSystem.java"


def hadoop_classpath(env: WriterEnv) -> str:
    """Spark 3.5's jars in the writer env, Hadoop 3.3.4's client among them, as a classpath."""
    jars = next(env.python.parent.parent.glob("lib/python3*/site-packages/pyspark/jars"))
    return f"{jars}/*"


def local_bucket_fs_jar(home: Path) -> Path:
    """Where `compile_local_bucket_fs(env, home)` puts the jar."""
    return home / "jars" / "meltwater-local-bucket-fs.jar"


def compile_local_bucket_fs(env: WriterEnv, home: Path) -> Path:
    """LocalBucketFileSystem compiled against the writer env's Hadoop (Spark 3.5's jars),
    into `<home>/jars/`: the jar a set of tables written with it keeps beside them."""
    jar = local_bucket_fs_jar(home)
    classes = jar.parent / "classes"
    classes.mkdir(parents=True)
    for command, what in (
        (["javac", "--release", "11", "-nowarn", "-cp", hadoop_classpath(env), "-d", str(classes),
          str(SOURCE)], "compiling LocalBucketFileSystem.java"),
        (["jar", "cf", str(jar), "-C", str(classes), "."], "packaging LocalBucketFileSystem"),
    ):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise WriterEnvError(f"{what} failed:\n{result.stderr[-2000:]}")
    shutil.rmtree(classes)
    return jar


@dataclass(frozen=True)
class Uploaded:
    """What an upload copied: how many objects, how many bytes, how long it took."""

    files: int
    bytes: int
    seconds: float


def upload_objects(objects: dict[str, Path], fs: Any, threads: int = 8) -> Uploaded:
    """PUT each local file to `fs` (a pyarrow FileSystem) at its `<bucket>/<key>`, as is."""
    started = time.monotonic()

    def put(item: tuple[str, Path]) -> int:
        key, path = item
        data = path.read_bytes()
        with fs.open_output_stream(key) as out:
            out.write(data)
        return len(data)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        sizes = list(pool.map(put, objects.items()))
    return Uploaded(len(sizes), sum(sizes), time.monotonic() - started)
