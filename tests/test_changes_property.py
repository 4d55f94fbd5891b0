"""Property test: random table histories, written by pyiceberg (a second Iceberg writer),
replay exactly under meltwater's changes.

Hypothesis draws a sequence of appends, copy-on-write deletes and partition overwrites;
after each commit pyiceberg reads the table back as the truth. For every commit, and for
the whole history, applying meltwater's change rows to the truth before it must give the
truth after it, with every DELETE removing a row that existed, and net changes must equal
the multiset difference. Delete files (merge-on-read) are covered by the Iceberg Java
corpus; pyiceberg writes copy-on-write, which exercises removed data files and carry-over.
"""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import meltwater.stream
from corpus.compare import _canonical, row_multiset

REMOVES = {"DELETE", "UPDATE_BEFORE"}
META = {"_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_sequence_number",
        "_commit_timestamp"}

values = st.tuples(st.integers(0, 30), st.one_of(st.none(), st.text("abc", max_size=3)),
                   st.integers(0, 2))
operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(values, min_size=1, max_size=12)),
    st.tuples(st.just("delete"), st.integers(0, 30), st.integers(0, 30)),
    st.tuples(st.just("overwrite"), st.integers(0, 2), st.lists(values, max_size=5)),
), min_size=1, max_size=6)


def _new_table(warehouse: str):
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    catalog = SqlCatalog("h", uri="sqlite:///:memory:", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "v", StringType(), required=False),
                    NestedField(3, "g", IntegerType(), required=False))
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "g"))
    return catalog.create_table("db.t", schema, partition_spec=spec,
                                properties={"format-version": "2"})


def _arrow(rows) -> pa.Table:
    ids, vs, gs = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(vs, pa.string()),
                     "g": pa.array(gs, pa.int32())})


def _replay(before: Counter, changes: pa.Table) -> Counter:
    state = Counter(before)
    columns = [c for c in changes.column_names if c not in META]
    for row in sorted(changes.to_pylist(),
                      key=lambda r: (r["_change_ordinal"], r["_change_type"] not in REMOVES)):
        key = tuple(_canonical(row[c]) for c in columns)
        if row["_change_type"] in REMOVES:
            assert state[key] > 0, f"DELETE of a row that did not exist: {row}"
            state[key] -= 1
            state += Counter()  # drop zero counts
        else:
            state[key] += 1
    return state


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(operations)
def test_random_histories_replay_exactly(ops):
    # Each example writes a table of its own, removed when the example ends, passed or not
    # (hypothesis runs many examples in one call, so pytest's tmp_path would be shared).
    with tempfile.TemporaryDirectory(prefix="meltwater-hypothesis-") as warehouse:
        _check_history(_new_table(warehouse), ops)


def _check_history(table, ops):
    truths: list[tuple[int | None, Counter]] = [(None, Counter())]
    for op in ops:
        if op[0] == "append":
            table.append(_arrow(op[1]))
        elif op[0] == "delete":
            low, high = sorted(op[1:])
            table.delete(f"id >= {low} and id <= {high}")
        else:
            table.overwrite(_arrow([(i, v, op[1]) for i, v, _ in op[2]]),
                            overwrite_filter=f"g = {op[1]}")
        table = table.refresh()
        snapshot = table.current_snapshot()
        if snapshot is None or snapshot.snapshot_id == truths[-1][0]:
            continue
        truths.append((snapshot.snapshot_id, row_multiset(table.scan().to_arrow())))
    location = table.metadata_location
    for (start, before), (end, after) in itertools.pairwise(truths):
        changes = meltwater.stream.changes(location, from_snapshot_id=start,
                                           to_snapshot_id=end).read_all()
        assert _replay(before, changes) == after, f"commit {end}"
    if len(truths) > 1:
        whole = meltwater.stream.changes(location, to_snapshot_id=truths[-1][0]).read_all()
        assert _replay(Counter(), whole) == truths[-1][1]
        net = meltwater.stream.changes(location, net=True).read_all()
        removed, added = Counter(), Counter()
        columns = [c for c in net.column_names if c not in META]
        for row in net.to_pylist():
            key = tuple(_canonical(row[c]) for c in columns)
            (removed if row["_change_type"] in REMOVES else added)[key] += 1
        assert removed == Counter() and added == truths[-1][1]
