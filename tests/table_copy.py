"""A corpus table copied whole to another directory, its absolute paths rewritten.

Iceberg metadata names every file by absolute path, so `shutil.copytree` alone yields a
table whose metadata still reads the original's manifests and data files. A test that
damages a data file needs its own: `relocated_copy` copies the table and rewrites the
paths in the metadata JSON, the manifest lists and the manifests (Avro, rewritten with
fastavro under their own schema and key-value metadata), and each manifest list's
`manifest_length` to the rewritten manifest's size.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from meltwater.planner.spec.files import EntryStatus
from meltwater.planner.table.manifests import ManifestCache, ManifestReader
from meltwater.planner.table.table_loading import load_table


def _relocated(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return new + value[len(old):] if value.startswith(old) else value
    if isinstance(value, dict):
        return {k: _relocated(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_relocated(v, old, new) for v in value]
    return value


def _rewrite_avro(path: Path, old: str, new: str, lengths: dict[str, int]) -> None:
    import fastavro

    with open(path, "rb") as handle:
        reader = fastavro.reader(handle)
        schema, records = reader.writer_schema, list(reader)
        metadata = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
        codec = reader.codec
    records = [_relocated(r, old, new) for r in records]
    for record in records:
        if "manifest_path" in record and record["manifest_path"] in lengths:
            record["manifest_length"] = lengths[record["manifest_path"]]
    with open(path, "wb") as out:
        fastavro.writer(out, schema, records, codec=codec, metadata=metadata)


def relocated_copy(location: str, target: Path) -> str:
    """Copy the table at `location` to `target` (a new directory); returns its location."""
    old, new = location.rstrip("/"), str(target)
    # Hadoop .crc files checksum the old bytes; meltwater does not read them
    shutil.copytree(old, target, ignore=shutil.ignore_patterns("*.crc"))
    metadata = target / "metadata"
    avro = sorted(metadata.glob("*.avro"))
    lengths: dict[str, int] = {}
    for path in (p for p in avro if not p.name.startswith("snap-")):  # manifests first
        _rewrite_avro(path, old, new, {})
        lengths[str(path)] = path.stat().st_size
    for path in (p for p in avro if p.name.startswith("snap-")):  # then the lists naming them
        _rewrite_avro(path, old, new, lengths)
    for path in metadata.glob("*.metadata.json"):
        path.write_text(path.read_text().replace(old + "/", new + "/")
                        .replace(f'"{old}"', f'"{new}"'))
    return new


def added_by_current_snapshot(location: str) -> Path:
    """The data file the table's current snapshot added (the corpus table adds one)."""
    table = load_table(location)
    snapshot = table.metadata.current_snapshot
    reader = ManifestReader(table.metadata, table.io, ManifestCache())
    added = [e.file.file_path for m in reader.manifest_list(snapshot) for e in reader.entries(m)
             if e.status == EntryStatus.ADDED and e.snapshot_id == snapshot.snapshot_id]
    assert len(added) == 1, added
    return Path(added[0])
