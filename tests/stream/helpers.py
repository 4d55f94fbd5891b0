"""Small Iceberg-shaped files for engine tests: data, position and equality deletes, DVs."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap

from meltwater.planner.files import DataFile, FileContent
from meltwater.planner.tasks import DeleteFileRef, FileScanTask

ID = b"PARQUET:field_id"


def F(name: str, type_: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable, metadata={ID: str(fid).encode()})


def write_parquet(path: Path, table: pa.Table, **options) -> DataFile:
    pq.write_table(table, path, **options)
    return DataFile(FileContent.DATA, str(path), "PARQUET", 0, (), table.num_rows,
                    path.stat().st_size)


def position_deletes(path: Path, entries: list[tuple[str, int]]) -> DataFile:
    schema = pa.schema([F("file_path", pa.string(), 2147483546, False),
                        F("pos", pa.int64(), 2147483545, False)])
    table = pa.Table.from_pylist([{"file_path": f, "pos": p} for f, p in entries],
                                 schema=schema)
    pq.write_table(table, path)
    return DataFile(FileContent.POSITION_DELETES, str(path), "PARQUET", 0, (), len(entries),
                    path.stat().st_size)


def equality_deletes(path: Path, table: pa.Table, ids: tuple[int, ...]) -> DataFile:
    pq.write_table(table, path)
    return DataFile(FileContent.EQUALITY_DELETES, str(path), "PARQUET", 0, (),
                    table.num_rows, path.stat().st_size, equality_ids=ids)


def portable_roaring64(positions: list[int]) -> bytes:
    """The spec's portable 64-bit Roaring layout, built by hand from 32-bit bitmaps."""
    by_key: dict[int, list[int]] = {}
    for pos in sorted(set(positions)):
        by_key.setdefault(pos >> 32, []).append(pos & 0xFFFFFFFF)
    out = struct.pack("<Q", len(by_key))
    for key in sorted(by_key):
        out += struct.pack("<I", key) + BitMap(by_key[key]).serialize()
    return out


def dv_blob(positions: list[int]) -> bytes:
    body = b"\xd1\xd3\x39\x64" + portable_roaring64(positions)
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def write_puffin(path: Path, blob: bytes, referenced: str, cardinality: int) -> DataFile:
    """A Puffin file with one DV blob (footer omitted: readers seek to the blob directly)."""
    path.write_bytes(b"PFA1" + blob + b"PFA1")
    return DataFile(FileContent.POSITION_DELETES, str(path), "PUFFIN", 0, (), cardinality,
                    path.stat().st_size, referenced_data_file=referenced, content_offset=4,
                    content_size_in_bytes=len(blob))


def task(data: DataFile, *deletes: DataFile, **options) -> FileScanTask:
    return FileScanTask(data, 1, tuple(DeleteFileRef(d, 2) for d in deletes), **options)
