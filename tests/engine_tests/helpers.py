"""Small Iceberg-shaped files for engine tests: data, position and equality deletes, DVs."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap

from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet, FileScanTask
from meltwater.planner.spec.files import DataFile, FileContent

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
    """A task of sequence number 1 whose delete files (sequence number 2) all apply."""
    refs = [DeleteFileRef(d, 2) for d in deletes]
    equality = [r for r in refs if r.is_equality]
    return FileScanTask(data, 1, tuple(r for r in refs if not r.is_equality),
                        equality=EqualityDeleteSet(tuple(equality)) if equality else None,
                        **options)


ROW_ID = 2147483544


def position_deletes_with_rows(path: Path, entries: list[tuple[str, int, dict]],
                               row_fields: list[pa.Field]) -> DataFile:
    """A position delete file carrying each deleted row in the `row` struct (field id
    2147483544), as Iceberg Java writes when asked to keep deleted rows."""
    schema = pa.schema([F("file_path", pa.string(), 2147483546, False),
                        F("pos", pa.int64(), 2147483545, False),
                        F("row", pa.struct(row_fields), ROW_ID, False)])
    table = pa.Table.from_pylist([{"file_path": f, "pos": p, "row": r} for f, p, r in entries],
                                 schema=schema)
    pq.write_table(table, path)
    return DataFile(FileContent.POSITION_DELETES, str(path), "PARQUET", 0, (), len(entries),
                    path.stat().st_size)


class GuardedIO:
    """A FileIO that refuses to open some locations: proves a path is never read."""

    def __init__(self, inner, forbidden: set[str]) -> None:
        self.inner = inner
        self.forbidden = set(forbidden)
        self.opened: list[str] = []

    def _check(self, location: str) -> None:
        if location in self.forbidden:
            raise AssertionError(f"{location} must not be read")
        self.opened.append(location)

    def open_input(self, location: str):
        self._check(location)
        return self.inner.open_input(location)

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        self._check(location)
        return self.inner.read_bytes(location, offset, length)

    def exists(self, location: str) -> bool:
        return self.inner.exists(location)

    def list_dir(self, location: str) -> list[str]:
        return self.inner.list_dir(location)

    def resolve(self, _location: str) -> None:
        return None  # Arrow's readers would open files past the guard

    def is_local(self, location: str) -> bool:
        return self.inner.is_local(location)
