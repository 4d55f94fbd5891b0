"""The Avro container reader against fastavro's own reader, block by block."""

from __future__ import annotations

from io import BytesIO

import fastavro
import pytest

from meltwater.planner.errors import CorruptAvroError
from meltwater.planner.table.avro_files import AvroFile

SCHEMA = {"type": "record", "name": "entry", "fields": [
    {"name": "status", "type": "int"},
    {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [
        {"name": "file_path", "type": "string"},
        {"name": "bounds", "type": ["null", {"type": "array", "items": {
            "type": "record", "name": "k_v", "fields": [
                {"name": "key", "type": "int"}, {"name": "value", "type": "bytes"}]}}]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
    ]}},
]}


def _file(records: list[dict], codec: str, sync_interval: int = 200) -> bytes:
    out = BytesIO()
    fastavro.writer(out, SCHEMA, records, codec=codec, sync_interval=sync_interval)
    return out.getvalue()


def _records(n: int) -> list[dict]:
    return [{"status": i % 3, "data_file": {
        "file_path": f"s3://bucket/data/{i:05}.parquet",
        "bounds": None if i % 4 == 0 else [{"key": k, "value": bytes([k, i % 256])}
                                           for k in range(3)],
        "day": None if i % 5 == 0 else 19_000 + i}} for i in range(n)]


@pytest.mark.parametrize("codec", ["null", "deflate", "bzip2"])
def test_records_equal_fastavros_reader(codec):
    data = _file(_records(300), codec)
    avro = AvroFile(data)
    blocks = list(avro.blocks())
    assert len(blocks) > 3, "several blocks"
    assert sum(count for count, _ in blocks) == 300
    assert list(avro) == list(fastavro.reader(BytesIO(data)))
    assert avro.metadata["avro.codec"].decode() == codec


def test_a_block_is_searched_before_it_is_decoded():
    avro = AvroFile(_file(_records(300), "deflate"))
    needle = b"s3://bucket/data/00123.parquet"
    holding = [(count, data) for count, data in avro.blocks() if needle in data]
    assert len(holding) == 1
    paths = [r["data_file"]["file_path"] for r in avro.records(*holding[0])]
    assert "s3://bucket/data/00123.parquet" in paths


def test_empty_file_and_corrupt_files():
    assert list(AvroFile(_file([], "deflate"))) == []
    data = _file(_records(50), "deflate")
    with pytest.raises(CorruptAvroError, match="magic"):
        AvroFile(b"Obj\x02" + data[4:])
    with pytest.raises(CorruptAvroError):
        list(AvroFile(data[:-3]))
    with pytest.raises(CorruptAvroError, match="sync"):
        list(AvroFile(data[:-1] + bytes([data[-1] ^ 1])))
