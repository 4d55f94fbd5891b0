"""Key before-images (`before-images=key`): departing rows carry their key only.

Checked on every commit of Iceberg Java's corpus scenarios (whole-file deletes of
copy-on-write rewrites, position deletes, DVs, equality deletes key-only and full-row,
schema evolution): each commit read with key images equals the same commit read whole
(carry-over kept, as key images keep it), the DELETE and UPDATE_BEFORE rows' other columns
nulled; those columns are declared nullable; and an upsert's departing rows are read with
the key columns only, not whole.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

import meltwater.stream
import meltwater.stream.engine.changes.equality_changes as equality_changes
from corpus.compare import live_ranges
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.errors import ChangeOptionError

SCENARIOS = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
             "position_deletes_with_rows", "maintenance", "evolution", "v3_deletion_vectors",
             "random_mix", "file_formats", "column_evolution"]
LEAVING = {"DELETE", "UPDATE_BEFORE"}
META = ("_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_sequence_number",
        "_commit_timestamp")


def _rows(changes: pa.Table, kept: set[str] | None = None) -> Counter:
    """Change rows as a multiset (departing rows' columns outside `kept` as null)."""
    rows = Counter()
    for row in changes.to_pylist():
        if kept is not None and row["_change_type"] in LEAVING:
            row = {k: (v if k in kept or k in META else None) for k, v in row.items()}
        rows[repr(sorted(row.items()))] += 1
    return rows


@pytest.mark.parametrize("name", SCENARIOS)
def test_key_images_are_the_whole_rows_with_only_their_key(corpus, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    kept = {"id", "_row_id", "_last_updated_sequence_number"}
    departing = 0
    for parent, child in live_ranges(scenario, table.metadata):
        def read(parent=parent, child=child, **options):
            return meltwater.stream.changes(table, from_snapshot_id=parent,
                                            to_snapshot_id=child, identifier_columns=["id"],
                                            **options).read_all()

        keys = read(before_images="key")
        whole = read(keep_carryover=True)
        assert _rows(keys) == _rows(whole, kept), (name, child)
        for field in keys.schema:
            if field.name not in kept and field.name not in META:
                assert field.nullable, (name, field)
        departing += sum(t in LEAVING for t in keys.column("_change_type").to_pylist())
    assert departing > 0, name


def test_an_upserts_departing_rows_are_read_by_their_key_columns_only(corpus, monkeypatch):
    """The equality-delete scenario's upsert: the rows its keys had are read with `id`
    alone (and the rows it added whole); read whole, they are the same rows."""
    read: list[tuple[str, ...]] = []
    original = equality_changes.read_rows_at

    def recording(data_file, projection, *args, **kwargs):
        read.append(tuple(f.name for f in projection.fields))
        return original(data_file, projection, *args, **kwargs)

    monkeypatch.setattr(equality_changes, "read_rows_at", recording)
    location = corpus.scenarios["equality_deletes"].location
    keys = meltwater.stream.changes(location, identifier_columns=["id"],
                                    before_images="key").read_all()
    assert read and all(names == ("id",) for names in read), read
    assert keys.num_rows


def test_key_images_need_a_key_among_the_columns_and_refuse_net_changes(corpus):
    location = corpus.scenarios["format_v1"].location
    with pytest.raises(ChangeOptionError, match="before-images=key needs identifier columns"):
        meltwater.stream.changes(location, before_images="key", compute_updates=False)
    with pytest.raises(ChangeOptionError, match="does not combine with net changes"):
        meltwater.stream.changes(location, before_images="key", net=True,
                                 identifier_columns=["id"])
    with pytest.raises(ChangeOptionError, match="select id too"):
        meltwater.stream.changes(location, before_images="key", columns=["category"],
                                 identifier_columns=["id"])
    with pytest.raises(ChangeOptionError, match="before-images mode"):
        meltwater.stream.changes(location, before_images="partial")
