"""Moves a corpus table written by Iceberg Java onto an object store and into a REST catalog.

    relocated = relocate(scenario, catalog, fs, bucket="lake", namespace="java")
    catalog.load_table(relocated.identifier)   # every snapshot as Iceberg Java wrote it

The writer environment has no S3 FileIO, so the tables are written locally; Iceberg metadata
holds absolute paths, so moving them means rewriting every metadata file, manifest list,
manifest and position delete file. That is Iceberg's own `rewrite_table_path` procedure
(Spark, Iceberg >= 1.8), run in the writer environment by relocate_spark.py; this module then
copies what it lists (rewritten files from its staging dir, data files as they are) into the
bucket with pyarrow's S3 filesystem and registers the newest rewritten metadata.json in the
catalog. The per-snapshot truth stays the one recorded when the corpus was written.

The shared corpus is only read: the procedure writes to a temp staging dir, and a listing of
the table's files (path, size, mtime) taken before and after must not change.

Iceberg 1.10.2's procedure has two bugs in rewriting position delete files, both in
RewriteTablePathUtil.writeDeleteFileEntry, which queues the manifest reader's reused entry
object instead of a copy (apache/iceberg#12772, fixed upstream by PR #15155, not in 1.10.x):
- most position delete files of a delete manifest are never written to staging, though the
  copy plan lists them: this module rewrites each missing one itself from the original
  (Parquet: the `file_path` column's prefix replaced, all else kept, field ids included);
- the same file may be queued twice, and the second create() fails with
  FileAlreadyExistsException (seen as apache/iceberg#14814): the catalog's FileIO is
  relocate_java's OverwritingFileIO, compiled here against the runtime jar, whose create()
  overwrites; both writes hold the same bytes.
As in 1.10.2 itself, the manifests keep each delete file's original file_size_in_bytes
(pyiceberg 0.12 and meltwater read the rewritten files regardless).

Measured on the corpus: mor_partitioned, cow_partitioned, position_deletes_with_rows,
maintenance, evolution, column_evolution, format_v1 and random_mix relocate and read (via
pyiceberg) equal to Iceberg Java's truth at every live snapshot; equality_deletes relocates,
but pyiceberg 0.12 cannot read equality deletes. Still failing: equality_global (the
procedure: "Missing required field: file_path"), v3_deletion_vectors (NullPointerException
on snapshots without first-row-id) and file_formats (an unstaged Avro delete file, which
this module does not rewrite).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from corpus.loader import Scenario
from corpus.writer_env import WriterEnv, cache_root, ensure_writer_env

HERE = Path(__file__).parent
SPARK_SCRIPT = HERE / "relocate_spark.py"
JAVA_SOURCE = HERE / "relocate_java" / "OverwritingFileIO.java"
IO_IMPL = "meltwater.relocate.OverwritingFileIO"


class RelocateError(RuntimeError):
    """The relocation failed; the message carries the procedure's own error."""


@dataclass(frozen=True)
class Relocated:
    """A relocated table: where it is now and how it is registered."""

    identifier: tuple[str, str]
    location: str
    metadata_location: str
    files: int
    bytes: int
    repaired: int  # position delete files the procedure failed to stage, written here


def _helper_jar(env: WriterEnv) -> Path:
    """OverwritingFileIO compiled against the writer env's Iceberg runtime, cached by hash."""
    digest = hashlib.sha256(JAVA_SOURCE.read_bytes())
    digest.update(env.jars[0].name.encode())
    home = cache_root() / f"relocate-{digest.hexdigest()[:12]}"
    jar = home / "meltwater-relocate.jar"
    if jar.exists():
        return jar
    home.mkdir(parents=True, exist_ok=True)
    pyspark_jars = next(env.python.parent.parent.glob("lib/python3*/site-packages/pyspark/jars"))
    with tempfile.TemporaryDirectory(dir=home) as work:
        classes = Path(work) / "classes"
        classes.mkdir()
        for command in (
            ["javac", "--release", "11", "-nowarn", "-cp", f"{env.jars[0]}:{pyspark_jars}/*",
             "-d", str(classes), str(JAVA_SOURCE)],
            ["jar", "cf", str(Path(work) / jar.name), "-C", str(classes), "."],
        ):
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise RelocateError(f"{command[0]} failed: {result.stderr[-2000:]}")
        os.replace(Path(work) / jar.name, jar)  # atomic: a concurrent run sees all or nothing
    return jar


def _listing(root: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*") if p.is_file())


def _local_path(location: str) -> str:
    parsed = urlparse(location)
    return unquote(parsed.path) if parsed.scheme == "file" else location


def rewrite_table_path(scenario: Scenario, target_prefix: str, staging: Path,
                       env: WriterEnv | None = None) -> tuple[str, list[tuple[str, str]]]:
    """Run the procedure; return the newest metadata file name and the (source, target) list."""
    env = env or ensure_writer_env(log=lambda _: None)
    location = scenario.location.rstrip("/")
    table_dir = Path(location)  # <warehouse>/<namespace>/<table>, a Hadoop catalog's layout
    warehouse, table = table_dir.parent.parent, f"{table_dir.parent.name}.{table_dir.name}"
    before = _listing(table_dir)
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("SPARK_", "PYSPARK_", "PYTHONPATH"))}
    child_env["PYSPARK_PYTHON"] = str(env.python)
    jars = ",".join([*(str(j) for j in env.jars), str(_helper_jar(env))])
    result = subprocess.run(
        [str(env.python), str(SPARK_SCRIPT), "--warehouse", str(warehouse), "--table", table,
         "--source-prefix", location, "--target-prefix", target_prefix.rstrip("/"),
         "--staging", str(staging), "--jars", jars, "--io-impl", IO_IMPL],
        env=child_env, capture_output=True, text=True)
    if _listing(table_dir) != before:
        raise RelocateError(f"the corpus table {location} changed while being relocated")
    answer = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not answer:
        errors = [line for line in result.stderr.splitlines()
                  if "Exception" in line and not line.lstrip().startswith("at ")]
        raise RelocateError(f"rewrite_table_path on {scenario.name} failed: "
                            + ("\n".join(errors[-3:]) or result.stderr[-2000:]))
    record = json.loads(answer[-1])
    with open(_local_path(record["file_list_location"]), newline="") as listing:
        plan = [(row[0], row[1]) for row in csv.reader(listing) if row]
    return record["latest_version"], plan


def _rewrite_position_deletes(original: Path, staged: Path, source_prefix: str,
                              target_prefix: str) -> None:
    """Write what rewrite_table_path should have staged: the delete file, paths moved."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if original.suffix != ".parquet":
        raise RelocateError(f"cannot rewrite position delete file {original}: not Parquet")
    table = pq.read_table(original)
    old, new = source_prefix.rstrip("/") + "/", target_prefix.rstrip("/") + "/"
    paths = table.column("file_path").to_pylist()
    if not all(path.startswith(old) for path in paths):
        raise RelocateError(f"{original} deletes rows of files outside {old}")
    moved = pa.array([new + path[len(old):] for path in paths], pa.string())
    index = table.schema.get_field_index("file_path")
    table = table.set_column(index, table.schema.field(index), moved)  # keeps the field id
    staged.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, staged)


def repair_staging(plan: list[tuple[str, str]], staging: Path, source_prefix: str,
                   target_prefix: str) -> int:
    """Write the position delete files the plan lists in staging but the procedure skipped.

    Staged files outside staging/metadata are position delete files (the only data-side
    files the procedure rewrites); each maps back to source_prefix by its relative path.
    Returns how many were missing.
    """
    missing = 0
    for source, _target in plan:
        staged = Path(_local_path(source))
        if staged.exists() or not staged.is_relative_to(staging):
            continue
        relative = staged.relative_to(staging)
        if relative.parts[0] == "metadata":
            raise RelocateError(f"rewrite_table_path did not stage metadata file {staged}")
        original = Path(source_prefix) / relative
        _rewrite_position_deletes(original, staged, source_prefix, target_prefix)
        missing += 1
    return missing


def copy_to_store(plan: list[tuple[str, str]], fs: Any) -> tuple[int, int]:
    """Copy each local source to its s3:// target on a pyarrow filesystem; (files, bytes)."""
    total = 0
    for source, target in plan:
        parsed = urlparse(target)
        if parsed.scheme not in ("s3", "s3a"):
            raise RelocateError(f"target {target} is not on S3")
        data = Path(_local_path(source)).read_bytes()
        with fs.open_output_stream(f"{parsed.netloc}{parsed.path}") as out:
            out.write(data)
        total += len(data)
    return len(plan), total


def relocate(scenario: Scenario, catalog: Any, fs: Any, *, bucket: str, namespace: str,
             name: str | None = None, env: WriterEnv | None = None) -> Relocated:
    """Rewrite to s3://bucket/namespace/name, copy into the bucket, register in the catalog."""
    name = name or scenario.name
    target = f"s3://{bucket}/{namespace.replace('.', '/')}/{name}"
    # first: in SeaweedFS a namespace is a folder of the table bucket, and files copied under
    # its path before it exists make a plain folder the catalog then refuses as a namespace
    catalog.create_namespace_if_not_exists(namespace)
    with tempfile.TemporaryDirectory(prefix="meltwater-relocate-") as tmp:
        staging = Path(tmp) / "staging"
        latest, plan = rewrite_table_path(scenario, target, staging, env)
        repaired = repair_staging(plan, staging, scenario.location, target)
        files, size = copy_to_store(plan, fs)
    metadata_location = f"{target}/metadata/{latest}"
    catalog.register_table((namespace, name), metadata_location)
    return Relocated((namespace, name), target, metadata_location, files, size, repaired)
