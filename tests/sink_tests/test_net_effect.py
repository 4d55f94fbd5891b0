"""The net effect of a change batch per key: commit order, last event wins, bad input refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from meltwater.sinks.errors import DuplicateKeyError, InvalidChangesError, NullKeyError
from meltwater.sinks.net_effect import net_effect
from meltwater.sinks.source_table import last_commit


def changes(*rows: tuple, keys: tuple[str, ...] = ("id",)) -> pa.Table:
    """Rows of (ordinal, change type, *key values, v); snapshot id = 100 + ordinal."""
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(3 + len(keys))]
    data = {"_change_ordinal": pa.array(columns[0], pa.int32()),
            "_change_type": pa.array(columns[1], pa.string())}
    for i, key in enumerate(keys):
        data[key] = pa.array(columns[2 + i], pa.int64())
    data["v"] = pa.array(columns[-1], pa.string())
    data["_commit_snapshot_id"] = pa.array([100 + o for o in columns[0]], pa.int64())
    data["_commit_sequence_number"] = pa.array([o + 1 for o in columns[0]], pa.int64())
    return pa.table(data)


def present(effect, *keys) -> dict:
    return {tuple(r[k] for k in keys): r["v"] for r in effect.present.to_pylist()}


def test_the_javadoc_example_of_the_module():
    batch = changes((0, "INSERT", 1, "a"), (0, "INSERT", 2, "b"),
                    (1, "UPDATE_AFTER", 1, "c"), (1, "UPDATE_BEFORE", 1, "a"),
                    (2, "DELETE", 2, "b"))
    effect = net_effect(batch, ["id"])
    assert present(effect, "id") == {(1,): "c"}
    assert effect.absent.to_pylist() == [{"id": 2}]
    assert last_commit(batch) == (102, 3)  # the commit the batch reaches


def test_within_a_commit_departures_come_before_arrivals_whatever_the_input_order():
    batch = changes((0, "INSERT", 1, "new"), (0, "DELETE", 1, "old"))
    assert present(net_effect(batch, ["id"]), "id") == {(1,): "new"}


def test_commit_order_is_the_ordinal_not_the_input_order():
    batch = changes((3, "DELETE", 1, "b"), (1, "INSERT", 1, "a"), (5, "INSERT", 1, "c"),
                    (4, "DELETE", 2, "x"), (2, "INSERT", 2, "x"))
    effect = net_effect(batch, ["id"])
    assert present(effect, "id") == {(1,): "c"}
    assert effect.absent.to_pylist() == [{"id": 2}]
    assert last_commit(batch).snapshot_id == 105


def test_delta_change_type_names_are_understood():
    batch = changes((0, "insert", 1, "a"), (1, "update_preimage", 1, "a"),
                    (1, "update_postimage", 1, "b"), (1, "delete", 2, "q"))
    effect = net_effect(batch, ["id"])
    assert present(effect, "id") == {(1,): "b"}
    assert effect.absent.to_pylist() == [{"id": 2}]


def test_composite_keys():
    batch = changes((0, "INSERT", 1, 1, "a"), (0, "INSERT", 1, 2, "b"),
                    (1, "DELETE", 1, 1, "a"), keys=("k1", "k2"))
    effect = net_effect(batch, ["k1", "k2"])
    assert present(effect, "k1", "k2") == {(1, 2): "b"}
    assert effect.absent.to_pylist() == [{"k1": 1, "k2": 1}]


def test_a_key_deleted_twice_ends_absent_but_inserted_twice_is_a_duplicate():
    twice_gone = changes((0, "DELETE", 1, "a"), (0, "DELETE", 1, "b"))
    assert net_effect(twice_gone, ["id"]).absent.to_pylist() == [{"id": 1}]
    duplicate = changes((0, "INSERT", 1, "a"), (1, "INSERT", 1, "b"))
    with pytest.raises(DuplicateKeyError, match=r"key \{'id': 1\} arrives twice .* snapshot 101"):
        net_effect(duplicate, ["id"], what="batch 7")
    reinserted = changes((0, "INSERT", 1, "a"), (1, "DELETE", 1, "a"), (2, "INSERT", 1, "b"))
    assert present(net_effect(reinserted, ["id"]), "id") == {(1,): "b"}


def test_empty_batch():
    effect = net_effect(changes(), ["id"])
    assert effect.present.num_rows == 0 and effect.absent.num_rows == 0
    assert last_commit(changes()).snapshot_id is None


def test_bad_batches_are_refused_with_one_line():
    with pytest.raises(NullKeyError, match=r"1 change row.*key column 'id'"):
        net_effect(changes((0, "INSERT", None, "a")), ["id"])
    with pytest.raises(InvalidChangesError, match=r"unknown change type\(s\) \['UPSERT'\]"):
        net_effect(changes((0, "UPSERT", 1, "a")), ["id"])
    with pytest.raises(InvalidChangesError, match=r"lacks column\(s\) _change_ordinal"):
        net_effect(changes((0, "INSERT", 1, "a")).drop_columns(["_change_ordinal"]), ["id"])


def test_large_batch_is_vectorized_and_correct():
    n = 200_000
    ids = pa.array([i % 50_000 for i in range(n)], pa.int64())
    ordinals = pa.array([i // 50_000 for i in range(n)], pa.int32())  # 4 commits
    kinds = pa.array(["INSERT" if (i // 50_000) % 2 == 0 else "DELETE" for i in range(n)])
    table = pa.table({"_change_ordinal": ordinals, "_change_type": kinds, "id": ids,
                      "v": pa.array([str(i) for i in range(n)])})
    effect = net_effect(table, ["id"])  # insert, delete, insert, delete -> all absent
    assert effect.present.num_rows == 0 and effect.absent.num_rows == 50_000
