"""Test-only bridge: scan tasks for a corpus snapshot, from pyiceberg's manifest reader.

The kernel's planner is developed separately; to test the engine on real Iceberg Java files
now, this module reads a snapshot's manifests with pyiceberg and matches delete files to data
files by the spec's rules (sequence numbers, partitions, global equality deletes), the way
a planner must. pyiceberg 0.12 neither plans equality deletes nor reads the v3 DV fields of
manifests, so DV blob offsets come from the Puffin footer (by `referenced-data-file`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet, FileScanTask
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.spec.types import Schema, parse_schema


def _local(location: str) -> Path:
    return Path(location.removeprefix("file:"))


def snapshot_schema(metadata_location: str, snapshot_id: int) -> Schema:
    metadata = json.loads(_local(metadata_location).read_text())
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot_id)
    schema_id = snapshot.get("schema-id", metadata.get("current-schema-id"))
    schemas = metadata.get("schemas") or [metadata["schema"]]
    return parse_schema(next(s for s in schemas if s.get("schema-id", 0) == schema_id))


def puffin_blobs(path: str) -> list[dict]:
    """The blob descriptions in a Puffin file's footer."""
    data = _local(path).read_bytes()
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1", path
    size = int.from_bytes(data[-12:-8], "little")
    return json.loads(data[-12 - size:-12])["blobs"]


def _data_file(f, **extra) -> DataFile:
    return DataFile(
        content=FileContent(int(f.content)), file_path=f.file_path,
        file_format=str(getattr(f.file_format, "value", f.file_format)).upper(),
        spec_id=f.spec_id or 0, partition=tuple(f.partition), record_count=f.record_count,
        file_size_in_bytes=f.file_size_in_bytes,
        equality_ids=tuple(f.equality_ids) if f.equality_ids else None, **extra)


def _dv_for(f, data_path: str) -> DataFile | None:
    """The DV in Puffin file `f` for a data file. pyiceberg 0.12 reads no v3 fields, so the
    manifest entry does not say which blob is its own: several DVs in one Puffin file (one
    commit's, for several data files) each find their data file's blob, with its own count
    (the blob's `cardinality`), not the entry's."""
    for blob in puffin_blobs(f.file_path):
        if blob["properties"].get("referenced-data-file") == data_path:
            dv = _data_file(f, referenced_data_file=data_path, content_offset=blob["offset"],
                            content_size_in_bytes=blob["length"])
            cardinality = blob["properties"].get("cardinality")
            return dv if cardinality is None else dataclasses.replace(
                dv, record_count=int(cardinality))
    return None


def plan_tasks(metadata_location: str, snapshot_id: int) -> list[FileScanTask]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    specs = table.metadata.specs()
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    entries = [e for m in snapshot.manifests(table.io)
               for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]
    data = [e for e in entries if int(e.data_file.content) == 0]
    deletes = [e for e in entries if int(e.data_file.content) != 0]
    tasks = []
    global_eq, scoped_eq = [], []
    for x in deletes:
        if int(x.data_file.content) == 2:
            ref = DeleteFileRef(_data_file(x.data_file), x.sequence_number)
            (global_eq if specs[x.data_file.spec_id].is_unpartitioned() else scoped_eq).append(ref)
    equality = EqualityDeleteSet(
        tuple(sorted(global_eq, key=lambda r: r.sequence_number)),
        tuple(sorted(scoped_eq, key=lambda r: r.sequence_number))) if deletes else None
    for d in data:
        df = d.data_file
        refs = []
        puffins = set()  # each Puffin file gives a data file its one DV, once
        for x in deletes:
            f = x.data_file
            same_partition = f.spec_id == df.spec_id and f.partition == df.partition
            if int(f.content) == 1 and x.sequence_number >= d.sequence_number and same_partition:
                if str(getattr(f.file_format, "value", f.file_format)).upper() == "PUFFIN":
                    if f.file_path in puffins:
                        continue
                    puffins.add(f.file_path)
                    dv = _dv_for(f, df.file_path)
                    if dv is not None:
                        refs.append(DeleteFileRef(dv, x.sequence_number))
                else:
                    refs.append(DeleteFileRef(_data_file(f), x.sequence_number))
        task = FileScanTask(_data_file(df), d.sequence_number, tuple(refs), equality=equality)
        tasks.append(task if task.equality_deletes
                     else dataclasses.replace(task, equality=None))
    return tasks
