"""Writes a table history with pyiceberg through any catalog, and what each step must read.

    history = write_history(catalog, ("py", "orders"))
    for step in history.steps:
        step.snapshot_id, step.rows     # the table at that snapshot, from a plain-Python model

The second real Iceberg writer for the object-store tests (Iceberg Java's histories come from
the corpus written at s3:// locations, build.ensure_s3_corpus). pyiceberg writes
copy-on-write only, so its history has no delete files, but every kind of commit it makes:
appends, a filtered overwrite, a dynamic partition overwrite, a delete and an upsert.

The expected rows are kept by a dict model keyed by `id`, updated by the same operation in
plain Python, never by reading the table back, so a reader under test is compared with
something independent of pyiceberg's reader. A pyiceberg operation can commit more than one
snapshot (overwrite = delete + append); `step.snapshot_id` is the last one, whose contents
the model describes, and `step.snapshot_ids` lists all the step committed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("category", pa.string(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("amount", pa.float64()),
])


@dataclass(frozen=True)
class Step:
    """One operation: its label, the snapshots it committed and the table after it."""

    label: str
    operation: str
    snapshot_ids: tuple[int, ...]
    rows: pa.Table

    @property
    def snapshot_id(self) -> int:
        return self.snapshot_ids[-1]


@dataclass
class History:
    identifier: tuple[str, ...]
    table: Any
    steps: list[Step] = field(default_factory=list)


def _rows(ids: range, category: Callable[[int], str], tag: str) -> list[dict[str, Any]]:
    return [{"id": i, "category": category(i), "name": f"{tag}{i}", "amount": i * 1.5}
            for i in ids]


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["id"]), schema=SCHEMA)


def write_history(catalog: Any, identifier: tuple[str, ...],
                  properties: dict[str, str] | None = None) -> History:
    """Create `identifier` (partitioned by category, identifier field id) and commit a history."""
    from pyiceberg.expressions import EqualTo, LessThan
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    catalog.create_namespace_if_not_exists(identifier[:-1])
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "category", StringType(), required=True),
        NestedField(3, "name", StringType(), required=False),
        NestedField(4, "amount", DoubleType(), required=False),
        identifier_field_ids=[1],
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000,
                                        transform=IdentityTransform(), name="category"))
    table = catalog.create_table(identifier, schema=schema, partition_spec=spec,
                                 properties=properties or {})
    history = History(identifier, table)
    model: dict[int, dict[str, Any]] = {}

    def commit(label: str, operation: str, action: Callable[[], None]) -> None:
        before = {s.snapshot_id for s in table.refresh().snapshots()}
        action()
        table.refresh()
        new = [s for s in table.snapshots() if s.snapshot_id not in before]
        new.sort(key=lambda s: s.sequence_number)
        assert new and new[-1].snapshot_id == table.current_snapshot().snapshot_id, label
        history.steps.append(Step(label, operation, tuple(s.snapshot_id for s in new),
                                  _table(list(model.values()))))

    def cat3(i: int) -> str:
        return "abc"[i % 3]

    first = _rows(range(1, 31), cat3, "n")
    model.update({r["id"]: r for r in first})
    commit("append ids 1..30", "append", lambda: table.append(_table(first)))

    second = _rows(range(31, 41), cat3, "n")
    model.update({r["id"]: r for r in second})
    commit("append ids 31..40", "append", lambda: table.append(_table(second)))

    replacement = _rows(range(100, 104), lambda _: "a", "a-new")
    for key in [k for k, r in model.items() if r["category"] == "a"]:
        del model[key]
    model.update({r["id"]: r for r in replacement})
    commit("overwrite category = 'a'", "overwrite",
           lambda: table.overwrite(_table(replacement), overwrite_filter=EqualTo("category", "a")))

    dynamic = _rows(range(200, 203), lambda _: "b", "b-new")
    for key in [k for k, r in model.items() if r["category"] == "b"]:
        del model[key]
    model.update({r["id"]: r for r in dynamic})
    commit("dynamic partition overwrite of category b", "overwrite",
           lambda: table.dynamic_partition_overwrite(_table(dynamic)))

    for key in [k for k in model if k < 10]:
        del model[key]
    commit("delete id < 10", "delete", lambda: table.delete(LessThan("id", 10)))

    changes = [{**model[k], "name": f"u{k}", "amount": -1.0} for k in sorted(model)[:3]]
    changes += _rows(range(300, 303), lambda _: "c", "up")
    model.update({r["id"]: r for r in changes})
    commit("upsert 3 updates + 3 inserts", "upsert",
           lambda: table.upsert(_table(changes), join_cols=["id"]))
    return history
