r"""Avro object container files (manifests, manifest lists), decoded by fastavro a block at a time.

Two costs of `fastavro.reader` weigh on Iceberg metadata:

- it parses the writer schema from JSON for every file, which costs more than decoding the
  one entry of a manifest that one append wrote. A table of hundreds of such manifests
  paid it once per manifest, yet they all carry the same schema text. Here the
  parsed schema is kept per schema text (`_block_schema`).
- it inflates and decodes every block. Planning that needs a few named files can look at a
  block's inflated bytes first and decode only blocks that may hold them
  (`AvroFile.blocks`, then `records`).

The container framing is the spec's ("Object Container Files"): the magic `Obj\x01`, a
metadata map, a 16-byte sync marker, then blocks of (record count, byte size, data, sync
marker). A block's data is `count` records back to back, which is also how the spec encodes
an array block, so fastavro decodes a whole block in one call, as an array of the record
schema, in its own loop. Blocks in codecs other than null and deflate are read through
`fastavro.block_reader`.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from functools import lru_cache
from io import BytesIO
from typing import Any, cast

import fastavro
from fastavro.read import HEADER_SCHEMA
from fastavro.types import Schema

from meltwater.planner.errors import CorruptAvroError

_MAGIC = b"Obj\x01"
_HEADER = fastavro.parse_schema(HEADER_SCHEMA)
_LONG = fastavro.parse_schema("long")
_ARRAY_END = b"\x00"


@lru_cache(maxsize=64)
def _block_schema(schema_text: str) -> Schema:
    """A block as a record whose one field is an array of the file's records.

    A record with one field is encoded as that field, so this reads a block's bytes as an
    array. The wrapping record is there because fastavro marks parsed named schemas and
    reuses them as they are; a parsed bare array is walked again on every call.
    """
    return fastavro.parse_schema({
        "type": "record", "name": "block", "namespace": "meltwater.avro_files",
        "fields": [{"name": "records",
                    "type": {"type": "array", "items": json.loads(schema_text)}}]})


def _long_bytes(value: int) -> bytes:
    out = BytesIO()
    fastavro.schemaless_writer(out, _LONG, value)
    return out.getvalue()


def _read_long(fo: BytesIO) -> int:
    return cast(int, fastavro.schemaless_reader(fo, _LONG))


class AvroFile:
    """One container file in memory: its metadata, then its blocks on demand."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._fo = BytesIO(data)
        try:
            # The header schema makes this a record (fastavro types any Avro value).
            header = cast(dict[str, Any], fastavro.schemaless_reader(self._fo, _HEADER))
        except (EOFError, ValueError, TypeError) as error:
            raise CorruptAvroError(f"no Avro header ({error})") from error
        if header["magic"] != _MAGIC:
            raise CorruptAvroError("no Avro magic bytes")
        self.metadata: dict[str, bytes] = header["meta"]
        self._sync: bytes = header["sync"]
        self._blocks_at = self._fo.tell()
        try:
            self.schema_text = self.metadata["avro.schema"].decode()
        except KeyError:
            raise CorruptAvroError("no avro.schema in the header") from None
        self.codec = self.metadata.get("avro.codec", b"null").decode()

    def blocks(self) -> Iterator[tuple[int, bytes]]:
        """(record count, inflated data) of each block, in file order."""
        if self.codec not in ("null", "deflate"):
            for block in fastavro.block_reader(BytesIO(self._data)):
                # fastavro's stub omits Block.bytes_, which its __init__ sets (a BytesIO).
                yield block.num_records, block.bytes_.getvalue()  # type: ignore[attr-defined]
            return
        fo, end = self._fo, len(self._data)
        fo.seek(self._blocks_at)
        while fo.tell() < end:
            count = _read_long(fo)
            size = _read_long(fo)
            data = fo.read(size)
            if len(data) != size or fo.read(16) != self._sync:
                raise CorruptAvroError(f"truncated block or bad sync marker at byte {fo.tell()}")
            yield count, zlib.decompress(data, -15) if self.codec == "deflate" else data

    def records(self, count: int, data: bytes) -> list[dict[str, Any]]:
        """The records of one block, decoded by fastavro in one call."""
        if count == 0:
            return []
        array = BytesIO(_long_bytes(count) + data + _ARRAY_END)
        block = cast(dict[str, Any],
                     fastavro.schemaless_reader(array, _block_schema(self.schema_text)))
        records: list[dict[str, Any]] = block["records"]
        return records

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every record of the file."""
        for count, data in self.blocks():
            yield from self.records(count, data)
