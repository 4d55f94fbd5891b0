"""A reader's first look at an equality change decides liveness with lookups of the changed
keys only (`EqualityRows.liveness_lookups`), and every later one with the whole lookups.

A one-commit read (a CLI `changes` of one upsert) would otherwise group and sort the whole
backlog's delete keys to answer for the few rows the commit's keys reach. Checked on every
commit of Iceberg Java's equality-delete scenarios (deletes keyed on id, on name, on
(id, name), global and partition-scoped, a MOR delete between them): each commit read
alone, by a reader that has seen nothing (restricted lookups), gives the rows the same
commit gives when read after the ones before it by one reader (whole lookups, extended
commit to commit).
"""

from __future__ import annotations

from collections import Counter

import pytest

import meltwater.stream.engine.changes.equality_changes as equality_changes
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.changes.change_feed import change_feed
from meltwater.stream.engine.changes.change_schema import RowOptions
from meltwater.stream.engine.changes.held_changes import read_parts
from meltwater.stream.engine.deletes.loader import DeleteLoader

IO = PyArrowFileIO()


def _rows(batches) -> Counter:
    return Counter(tuple(sorted(r.items())) for b in batches for r in b.to_pylist())


@pytest.mark.parametrize("name", ["equality_deletes", "equality_global"])
def test_a_commit_read_alone_is_the_commit_read_in_its_range(corpus, monkeypatch, name):
    restricted: list[int] = []
    original = equality_changes.restricted_lookup

    def counting(*args, **kwargs):
        restricted.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(equality_changes, "restricted_lookup", counting)
    scenario = corpus.scenarios[name]
    feed = change_feed(scenario.location, rows=RowOptions())
    parts = [CommitPart(commit, feed.schema, 0, len(commit.tasks))
             for commit in IncrementalPlanner(feed.table).plan(feed.change_range)]
    in_range = DeleteLoader(IO)
    looked_alone = 0
    for part in parts:
        before = len(restricted)
        alone = _rows(read_parts([part], IO, feed.options, DeleteLoader(IO)))
        looked_alone += len(restricted) > before
        during = len(restricted)
        assert _rows(read_parts([part], IO, feed.options, in_range)) == alone, (
            name, part.changes.commit)
        # a reader that has looked at an equality change before uses the whole lookups
        assert len(restricted) == during or looked_alone == 1
    assert looked_alone >= 1
