"""Key before-images (`before-images=key`): departing rows carry their key only.

Checked on every commit of Iceberg Java's corpus scenarios (whole-file deletes of
copy-on-write rewrites, position deletes, DVs, equality deletes key-only and full-row,
schema evolution): each commit read with key images equals the same commit read whole
(carry-over kept, as key images keep it), the DELETE and UPDATE_BEFORE rows' other columns
nulled; those columns are declared nullable; an upsert's departing rows are made from the
keys they were found by, not read; those a row filter looks at are read with the key and
the filter's columns only.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

import meltwater.stream
import meltwater.stream.engine.changes.equality_changes as equality_changes
from corpus.compare import live_ranges
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.errors import ChangeOptionError, UnreadableFileError

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


def _recorded_reads(monkeypatch) -> list[tuple[str, ...]]:
    """The projections `equality_changes` reads rows at positions with, as they happen."""
    read: list[tuple[str, ...]] = []
    original = equality_changes.read_rows_at

    def recording(data_file, projection, *args, **kwargs):
        read.append(tuple(f.name for f in projection.fields))
        return original(data_file, projection, *args, **kwargs)

    monkeypatch.setattr(equality_changes, "read_rows_at", recording)
    return read


def test_an_upserts_departing_rows_are_the_keys_they_were_found_by(corpus, monkeypatch):
    """The equality-delete scenario's upserts: the rows their keys had are not read at all
    (their key images are the keys the lookup found them by), and they are the rows the
    whole read gives, with only `id`."""
    location = corpus.scenarios["equality_deletes"].location
    whole = meltwater.stream.changes(location, identifier_columns=["id"],
                                     keep_carryover=True).read_all()
    read = _recorded_reads(monkeypatch)
    keys = meltwater.stream.changes(location, identifier_columns=["id"],
                                    before_images="key").read_all()
    assert all(names != ("id",) for names in read), read
    leaving = [t in LEAVING for t in keys.column("_change_type").to_pylist()]
    assert sum(leaving) > 0
    assert _rows(keys) == _rows(whole, {"id"})


def test_departing_rows_a_filter_looks_at_are_read_with_its_column_only(corpus, monkeypatch):
    """With a row filter on `name`, departing rows are read with `name` alone (their `id` is
    the key they were found by; `name` is nulled once filtered on), never whole."""
    location = corpus.scenarios["equality_deletes"].location
    read = _recorded_reads(monkeypatch)
    keys = meltwater.stream.changes(location, identifier_columns=["id"], before_images="key",
                                    filter="name IS NOT NULL").read_all()
    departing_reads = [names for names in read if len(names) < len(keys.schema) - len(META)]
    assert departing_reads and all(names == ("name",) for names in departing_reads), read
    leaving = [t in LEAVING for t in keys.column("_change_type").to_pylist()]
    assert sum(leaving) > 0


def test_whole_departing_rows_read_every_column_but_the_key(corpus, monkeypatch):
    """Read whole, an upsert's departing rows take `id` from the keys they were found by
    and read the other columns; they are the rows a read without that shortcut gives
    (each commit's DELETE rows equal Iceberg Java's, `test_changes_interop`)."""
    location = corpus.scenarios["equality_deletes"].location
    read = _recorded_reads(monkeypatch)
    whole = meltwater.stream.changes(location, identifier_columns=["id"]).read_all()
    assert read and ("name", "val", "part") in read and ("id", "name", "val", "part") not in read
    assert sum(t in LEAVING for t in whole.column("_change_type").to_pylist()) > 0


def test_a_file_giving_fewer_rows_than_its_keys_named_is_refused(corpus, monkeypatch):
    """Departing rows whose other columns come back short (a data file that does not hold
    the positions its key column named) are refused naming the file, never given short."""
    original = equality_changes.read_rows_at

    def short(*args, **kwargs):
        for batch in original(*args, **kwargs):
            yield batch.slice(0, batch.num_rows - 1)

    monkeypatch.setattr(equality_changes, "read_rows_at", short)
    location = corpus.scenarios["equality_deletes"].location
    with pytest.raises(UnreadableFileError, match=r"\.parquet: holds \d+ of the \d+ rows"):
        meltwater.stream.changes(location, identifier_columns=["id"]).read_all()


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
