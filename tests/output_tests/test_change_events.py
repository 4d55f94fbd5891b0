"""Debezium-style JSON envelopes for change rows."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from meltwater.output.change_events import debezium_events, write_debezium_jsonl
from meltwater.output.errors import ChangeOutputError
from meltwater.stream.engine.changes.change_columns import METADATA_FIELDS
from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY


def F(name: str, type_: pa.DataType, fid: int) -> pa.Field:
    return pa.field(name, type_, metadata={FIELD_ID_KEY: str(fid).encode()})


TS = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
SCHEMA = pa.schema([F("id", pa.int64(), 1), F("amount", pa.decimal128(5, 2), 2),
                    F("v", pa.float64(), 3), *METADATA_FIELDS])


def batch(rows: list[tuple[str, int, str | None, float | None]], snapshot: int = 7
          ) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([
        {"id": id_, "amount": None if amount is None else Decimal(amount), "v": v,
         "_change_type": change_type, "_change_ordinal": 0, "_commit_snapshot_id": snapshot,
         "_commit_sequence_number": 3, "_commit_timestamp": TS}
        for change_type, id_, amount, v in rows], schema=SCHEMA)


def test_envelopes_for_insert_delete_and_update_pair() -> None:
    events = list(debezium_events([batch([
        ("DELETE", 1, "1.50", None),
        ("UPDATE_BEFORE", 2, "2.00", 1.0),
        ("UPDATE_AFTER", 2, "2.50", float("nan")),
        ("INSERT", 3, None, 0.5),
    ])], "db.events", ts_ms=42))
    assert [e["op"] for e in events] == ["d", "u", "c"]
    assert events[0] == {
        "before": {"id": 1, "amount": Decimal("1.50"), "v": None}, "after": None, "op": "d",
        "source": {"table": "db.events", "snapshot_id": 7, "sequence_number": 3,
                   "ts_ms": 1704164645678},
        "ts_ms": 42,
    }
    assert events[1]["before"]["id"] == 2 and events[1]["after"]["v"] == "NaN"
    assert events[2]["before"] is None and events[2]["after"]["id"] == 3


def test_update_pair_split_across_batches_and_delta_names() -> None:
    events = list(debezium_events([batch([("update_preimage", 1, "1.00", None)]),
                                   batch([("update_postimage", 1, "2.00", None)])], "t"))
    assert len(events) == 1 and events[0]["op"] == "u"
    assert events[0]["before"]["amount"] == Decimal("1.00")
    assert events[0]["after"]["amount"] == Decimal("2.00")
    assert isinstance(events[0]["ts_ms"], int)


def test_initial_snapshot_reads_are_r() -> None:
    events = debezium_events([batch([("INSERT", 1, None, None)])], "t", initial_snapshot=True)
    assert [e["op"] for e in events] == ["r"]


@pytest.mark.parametrize("rows", [
    [("UPDATE_BEFORE", 1, None, None)],
    [("UPDATE_AFTER", 1, None, None)],
    [("UPDATE_BEFORE", 1, None, None), ("INSERT", 2, None, None)],
])
def test_unpaired_update_images_are_refused(rows) -> None:
    with pytest.raises(ChangeOutputError):
        list(debezium_events([batch(rows)], "t"))


def test_jsonl_to_a_path_and_a_stream(tmp_path) -> None:
    reader = pa.RecordBatchReader.from_batches(SCHEMA, [batch([
        ("INSERT", 1, "9.99", None), ("DELETE", 2, None, None)])])
    path = tmp_path / "events.jsonl"
    assert write_debezium_jsonl(reader, str(path), "db.t", ts_ms=1) == 2
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["after"] == {"id": 1, "amount": "9.99", "v": None}
    assert lines[1]["op"] == "d" and lines[1]["source"]["table"] == "db.t"
    out = io.StringIO()
    assert write_debezium_jsonl([batch([("INSERT", 5, None, None)])], out, "t") == 1
    assert json.loads(out.getvalue())["after"]["id"] == 5


def _strict_json(line: str):
    """json.loads that rejects the bare NaN/Infinity/-Infinity other parsers reject."""
    def refuse(constant: str):
        raise ValueError(f"bare {constant} is not JSON")
    return json.loads(line, parse_constant=refuse)


def test_non_finite_floats_are_strings_at_any_depth(corpus, tmp_path) -> None:
    """JSON has no literal for NaN or the infinities: `jsonl` and `debezium-jsonl` write
    them as the strings "NaN", "Infinity" and "-Infinity", in nested values too. The
    rows are an Iceberg Java table's changes with its double column set to them."""
    import meltwater.stream
    from meltwater.output.writers import write_stream

    changes = meltwater.stream.changes(corpus.scenarios["random_mix"].location).read_all()
    rows = changes.slice(0, 3)
    specials = [float("inf"), float("-inf"), float("nan")]
    index = rows.schema.get_field_index("dbl")
    rows = rows.set_column(index, rows.schema.field(index),
                           pa.array(specials, rows.schema.field(index).type))
    nested = pa.array([{"s": v, "l": [v, 1.0], "m": [("k", v)]} for v in specials],
                      pa.struct([("s", pa.float64()), ("l", pa.list_(pa.float64())),
                                 ("m", pa.map_(pa.string(), pa.float64()))]))
    rows = rows.append_column("nested", nested)
    want = ["Infinity", "-Infinity", "NaN"]
    path = tmp_path / "out.jsonl"
    assert write_stream(pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches()),
                        "jsonl", str(path)) == 3
    written = [_strict_json(line) for line in path.read_text().splitlines()]
    assert [r["dbl"] for r in written] == want
    assert [r["nested"] for r in written] == [{"s": w, "l": [w, 1.0], "m": {"k": w}}
                                              for w in want]
    inserts = rows.filter(pa.compute.equal(rows["_change_type"], "INSERT"))
    assert inserts.num_rows > 0
    out = io.StringIO()
    write_debezium_jsonl(inserts.to_batches(), out, "db.t", ts_ms=1)
    events = [_strict_json(line) for line in out.getvalue().splitlines()]
    assert [e["after"]["dbl"] for e in events] == want[:inserts.num_rows]
    assert [e["after"]["nested"]["l"][0] for e in events] == want[:inserts.num_rows]
