"""What a reader of one commit looks equality deletes up with follows from what its caller
says it reads (`ReadScope`), never from what its loader read before.

A one-commit read (a CLI `changes` of one upsert) decides liveness with lookups of the
changed keys only (`restricted_lookup`), where building the whole backlog's lookup would
group and sort every delete key to answer for the few rows the commit's keys reach; a
range or a stream builds the whole lookup once and extends it commit to commit. Checked on
every commit of Iceberg Java's equality-delete scenarios (deletes keyed on id, on name, on
(id, name), global and partition-scoped, a MOR delete between them): each commit read as
ONE_COMMIT gives the rows the same commit gives read after the ones before it as COMMITS,
and one-commit reads sharing one loader keep taking the restricted path, commit after
commit (they once built the whole lookup from the second on).
"""

from __future__ import annotations

from collections import Counter

import pytest

import meltwater.stream.engine.changes.equality_liveness as equality_liveness
from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.changes.change_feed import change_feed
from meltwater.stream.engine.changes.change_modes import ReadScope
from meltwater.stream.engine.changes.change_schema import RowOptions
from meltwater.stream.engine.changes.held_changes import read_parts
from meltwater.stream.engine.deletes.loader import DeleteLoader

IO = PyArrowFileIO()


def _rows(batches) -> Counter:
    return Counter(tuple(sorted(r.items())) for b in batches for r in b.to_pylist())


@pytest.mark.parametrize("name", ["equality_deletes", "equality_global"])
def test_a_commit_read_alone_is_the_commit_read_in_its_range(corpus, monkeypatch, name):
    restricted: list[int] = []
    original = equality_liveness.restricted_lookup

    def counting(*args, **kwargs):
        restricted.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(equality_liveness, "restricted_lookup", counting)
    scenario = corpus.scenarios[name]
    feed = change_feed(scenario.location, rows=RowOptions())
    parts = [CommitPart(commit, feed.schema, 0, len(commit.tasks))
             for commit in IncrementalPlanner(feed.table).plan(feed.change_range)]
    in_range, one_commit_reads = DeleteLoader(IO), DeleteLoader(IO)
    looked_alone = 0
    for part in parts:
        before = len(restricted)
        alone = _rows(read_parts([part], IO, feed.options, one_commit_reads,
                                 scope=ReadScope.ONE_COMMIT))
        looked_alone += len(restricted) > before
        during = len(restricted)
        assert _rows(read_parts([part], IO, feed.options, in_range,
                                scope=ReadScope.COMMITS)) == alone, (name, part.changes.commit)
        assert len(restricted) == during, "a range's reader builds the whole lookups"
    # every one-commit read took the cheap path, not only the loader's first
    assert looked_alone >= 2, looked_alone


def test_a_one_commit_read_after_a_range_on_the_same_loader_still_looks_up_its_keys_only(
        corpus, monkeypatch):
    """Whatever the loader holds (here every lookup a whole range built), a reader of one
    commit takes the restricted path: its cost follows its caller's word, not the
    process's history."""
    restricted: list[int] = []
    original = equality_liveness.restricted_lookup

    def counting(*args, **kwargs):
        restricted.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(equality_liveness, "restricted_lookup", counting)
    scenario = corpus.scenarios["equality_deletes"]
    feed = change_feed(scenario.location, rows=RowOptions())
    parts = [CommitPart(commit, feed.schema, 0, len(commit.tasks))
             for commit in IncrementalPlanner(feed.table).plan(feed.change_range)]
    loader = DeleteLoader(IO)
    in_range = [_rows(read_parts([part], IO, feed.options, loader, scope=ReadScope.COMMITS))
                for part in parts]
    assert restricted == []
    for part, rows in zip(parts, in_range, strict=True):
        assert _rows(read_parts([part], IO, feed.options, loader,
                                scope=ReadScope.ONE_COMMIT)) == rows
    assert len(restricted) >= 2
