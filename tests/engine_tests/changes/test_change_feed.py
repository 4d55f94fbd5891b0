"""stream/engine/changes/change_feed.py: planning a change read without reading any data.

`change_feed` resolves what a read will produce (its commits, its schema, how updates are
paired) from table metadata alone; a stream's driver relies on that. The expectations come
from Iceberg Java's record of each corpus table: the columns it read at the newest snapshot,
its identifier fields, the snapshots it committed. Range options are not exercised here
(planner/changes/change_range.py has its own tests); every feed below reads the whole history.
"""

from __future__ import annotations

import pytest

from meltwater.planner.changes.change_tasks import EqualityDeletedRowsTask
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.errors import FilterError, SchemaError
from meltwater.planner.expressions.tree import AlwaysTrue
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.changes.change_feed import change_feed
from meltwater.stream.engine.changes.change_schema import (
    LINEAGE_COLUMNS,
    METADATA_COLUMNS,
    RowOptions,
)
from meltwater.stream.errors import ChangeOptionError

# Every corpus history that is whole: maintenance's first snapshots have expired.
WHOLE = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
         "position_deletes_with_rows", "evolution", "column_evolution", "format_v1",
         "v3_deletion_vectors", "random_mix", "file_formats"]


class RecordingIO(PyArrowFileIO):
    """A FileIO that remembers every location it was asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def open_input(self, location: str):
        self.seen.append(location)
        return super().open_input(location)

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        self.seen.append(location)
        return super().read_bytes(location, offset, length)

    def exists(self, location: str) -> bool:
        self.seen.append(location)
        return super().exists(location)

    def list_dir(self, location: str) -> list[str]:
        self.seen.append(location)
        return super().list_dir(location)


def _current(scenario):
    return scenario.snapshot(scenario.record["current_snapshot_id"])


def _main_lineage(scenario) -> list[int]:
    """The main branch's commits, oldest first, by the parent ids Iceberg Java recorded."""
    parents = {s.snapshot_id: s.parent_id for s in scenario.snapshots}
    chain, current = [], scenario.record["current_snapshot_id"]
    while current is not None:
        chain.append(current)
        current = parents.get(current)
    return chain[::-1]


@pytest.mark.parametrize("name", WHOLE)
def test_a_feed_is_planned_from_metadata_alone(corpus, name):
    """Planning the feed, and then every commit's tasks, opens files under metadata/ only:
    the table's metadata, manifest lists and manifests; no data, delete or Puffin file."""
    scenario = corpus.scenarios[name]
    io = RecordingIO()
    feed = change_feed(scenario.location, io=io)
    assert [s.snapshot_id for s in feed.change_range.commits] == _main_lineage(scenario)
    tasks = [t for commit in IncrementalPlanner(feed.table).plan(feed.change_range)
             for t in commit.tasks]
    assert tasks  # there was something to plan
    metadata_dir = scenario.location.removeprefix("file:").rstrip("/") + "/metadata/"
    opened = {location.removeprefix("file:") for location in io.seen}
    assert opened and all(path.startswith(metadata_dir) for path in opened), sorted(
        p for p in opened if not p.startswith(metadata_dir))[:3]
    files = [f for t in tasks for f in ([r.file for r in t.candidates]
                                        if isinstance(t, EqualityDeletedRowsTask)
                                        else [t.data_file])]
    read = {f.file_path.removeprefix("file:") for f in files}
    assert not read & opened


@pytest.mark.parametrize("name", WHOLE)
def test_the_feed_has_the_columns_iceberg_java_read_at_the_end(corpus, name):
    """The output schema is the table's at the newest snapshot (the columns Iceberg Java
    read there, renamed, widened, dropped and re-added columns included), v3 row lineage
    for v3 tables, then the change metadata columns."""
    scenario = corpus.scenarios[name]
    feed = change_feed(scenario.location)
    lineage = list(LINEAGE_COLUMNS) if scenario.format_version >= 3 else []
    assert feed.output_schema.names == (_current(scenario).rows().column_names + lineage
                                        + list(METADATA_COLUMNS))


@pytest.mark.parametrize("name", WHOLE)
def test_updates_pair_by_the_tables_identifier_fields(corpus, name):
    """By default updates are paired when the table has identifier fields (as Iceberg Java
    recorded them), by those fields; a v3 table without them pairs by `_row_id`; others
    emit plain DELETE and INSERT."""
    scenario = corpus.scenarios[name]
    feed = change_feed(scenario.location)
    keys = scenario.record["identifier_fields"]
    ids = feed.options.identifier_field_ids
    if keys:
        assert feed.options.compute_updates
        assert [feed.schema.find_field(i).name for i in ids] == keys
    elif scenario.format_version >= 3:
        assert feed.options.compute_updates
        assert [feed.schema.find_field(i).name for i in ids] == ["_row_id"]
    else:
        assert not feed.options.compute_updates and ids is None
    unpaired = change_feed(scenario.location, rows=RowOptions(compute_updates=False))
    assert not unpaired.options.compute_updates


def test_pairing_asked_for_on_a_table_without_keys_needs_identifier_columns(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    assert corpus.scenarios["mor_partitioned"].record["identifier_fields"] == []
    with pytest.raises(ChangeOptionError, match="needs identifier columns"):
        change_feed(location, rows=RowOptions(compute_updates=True))
    feed = change_feed(location, rows=RowOptions(compute_updates=True,
                                                 identifier_columns=["id", "category"]))
    assert [feed.schema.find_field(i).name for i in feed.options.identifier_field_ids] == [
        "id", "category"]
    # Naming identifier columns is asking for pairs.
    assert change_feed(location, rows=RowOptions(identifier_columns=["id"])).options.compute_updates


def test_selected_columns_and_filters_are_checked_when_planning(corpus):
    scenario = corpus.scenarios["v3_deletion_vectors"]
    feed = change_feed(scenario.location,
                       rows=RowOptions(columns=["payload", "id"], filter="id > 5"))
    # Selected columns in the order asked; row lineage stays, for the stream to pair by.
    assert feed.output_schema.names == ["payload", "id", *LINEAGE_COLUMNS, *METADATA_COLUMNS]
    assert not isinstance(feed.row_filter, AlwaysTrue)
    assert isinstance(change_feed(scenario.location).row_filter, AlwaysTrue)
    with pytest.raises(SchemaError, match="unknown column 'nope'"):
        change_feed(scenario.location, rows=RowOptions(columns=["id", "nope"]))
    with pytest.raises(FilterError, match="unknown column 'nope'"):
        change_feed(scenario.location, rows=RowOptions(filter="nope = 1"))
    with pytest.raises(FilterError):
        change_feed(scenario.location, rows=RowOptions(filter="id >"))
