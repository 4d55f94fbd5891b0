"""Small batches gathered up to the batch size (`batch_size.gathered`): consecutive batches of
one kind and schema are joined in order, their per-row arrays with them; a change of kind
or schema, or the size bound, starts a new batch; nothing is lost, reordered or doubled."""

from __future__ import annotations

import pyarrow as pa

from meltwater.stream.engine.decode.batch_size import gathered


def _batch(start: int, rows: int, schema: pa.Schema | None = None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": list(range(start, start + rows))}, schema=schema)


def _ids(batch: pa.RecordBatch) -> list[int]:
    return batch.column("id").to_pylist()


def test_batches_of_one_kind_are_joined_up_to_the_size_in_order():
    items = [("D", _batch(i * 3, 3), pa.array([i] * 3, pa.int64())) for i in range(5)]
    out = list(gathered(items, batch_size=7))
    assert [(kind, _ids(b), a.to_pylist()) for kind, b, a in out] == [
        ("D", list(range(0, 6)), [0, 0, 0, 1, 1, 1]),
        ("D", list(range(6, 12)), [2, 2, 2, 3, 3, 3]),
        ("D", list(range(12, 15)), [4, 4, 4]),
    ]


def test_a_change_of_kind_or_schema_starts_a_batch_and_empty_ones_go():
    required = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    items = [("D", _batch(0, 2), None), ("D", _batch(2, 0), None), ("I", _batch(2, 2), None),
             ("I", _batch(4, 2, required), None), ("I", _batch(6, 1, required), None),
             ("D", _batch(7, 1), None)]
    out = list(gathered(items, batch_size=100))
    assert [(kind, _ids(b)) for kind, b, _ in out] == [
        ("D", [0, 1]), ("I", [2, 3]), ("I", [4, 5, 6]), ("D", [7])]
    assert all(a is None for _, _, a in out)


def test_a_batch_larger_than_the_size_passes_alone():
    items = [("D", _batch(0, 1), None), ("D", _batch(1, 50), None), ("D", _batch(51, 1), None)]
    out = list(gathered(items, batch_size=10))
    assert [_ids(b) for _, b, _ in out] == [[0], list(range(1, 51)), [51]]
