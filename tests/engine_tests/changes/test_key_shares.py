"""An upsert commit read in shares of its keys (`CommitPart.key_shares`) is the commit.

A Spark read spreads one upsert commit over executors by giving each a share of the
commit's changed keys: each share reads every candidate's key columns and only its own
rows, deleted and added, and compares them. The shares' rows together must be the
commit's, update pairs included, and no row may be in two shares: checked here on Iceberg
Java's upsert commit of the corpus (new id 4 and 30, deletes of 4 present and 99 absent),
and on every commit of the equality-delete scenarios that shares apply to.
"""

from __future__ import annotations

from collections import Counter

import pytest

from meltwater.planner.changes.incremental import IncrementalPlanner
from meltwater.planner.changes.micro_batch import CommitPart
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.changes.change_feed import change_feed
from meltwater.stream.engine.changes.change_schema import RowOptions
from meltwater.stream.engine.changes.held_changes import read_parts

IO = PyArrowFileIO()


def _rows(batches) -> Counter:
    return Counter(tuple(sorted(r.items())) for b in batches for r in b.to_pylist())


def _parts(corpus, name: str, rows: RowOptions):
    scenario = corpus.scenarios[name]
    feed = change_feed(scenario.location, rows=rows)
    planner = IncrementalPlanner(feed.table)
    for commit in planner.plan(feed.change_range):
        yield feed, CommitPart(commit, feed.schema, 0, len(commit.tasks))


@pytest.mark.parametrize("rows", [RowOptions(), RowOptions(compute_updates=False),
                                  RowOptions(keep_carryover=True, compute_updates=False)],
                         ids=["pairs", "no pairing", "carry-over kept"])
def test_shares_of_an_upsert_commit_are_the_commit(corpus, rows):
    shared = 0
    for name in ("equality_deletes", "equality_global"):
        for feed, part in _parts(corpus, name, rows):
            if not part.shareable:
                continue
            whole = _rows(read_parts([part], IO, feed.options))
            for count in (2, 3):
                pieces = [_rows(read_parts([share], IO, feed.options))
                          for share in part.key_shares(count)]
                assert sum(pieces, Counter()) == whole, (name, part.changes.commit)
            shared += 1
    assert shared >= 4  # the upserts and key-only deletes of both scenarios


def test_the_upsert_commit_pairs_its_update_within_one_share(corpus):
    for feed, part in _parts(corpus, "equality_deletes", RowOptions()):
        kinds = Counter(r["_change_type"] for b in read_parts([part], IO, feed.options)
                        for r in b.to_pylist())
        if part.shareable and kinds.get("UPDATE_BEFORE"):
            break
    else:
        pytest.fail("no shareable commit with an update in the corpus")
    per_share = [[r for b in read_parts([share], IO, feed.options) for r in b.to_pylist()]
                 for share in part.key_shares(2)]
    for rows in per_share:  # an update's two halves are never apart
        befores = {r["id"] for r in rows if r["_change_type"] == "UPDATE_BEFORE"}
        afters = {r["id"] for r in rows if r["_change_type"] == "UPDATE_AFTER"}
        assert befores == afters
    assert sum(len(rows) for rows in per_share) == sum(kinds.values())


def test_shares_read_each_changed_file_once(corpus, monkeypatch):
    """Keys go with the file holding them, so the shares together read each data file's
    changed rows once, as the whole commit does, not once a share (random keys touch
    every row group: shares by key rank would each decode every file)."""
    import meltwater.stream.engine.changes.equality_changes as equality_changes

    reads: list[str] = []
    original = equality_changes.read_rows_at

    def recording(data_file, *args, **kwargs):
        reads.append(data_file.file_path)
        return original(data_file, *args, **kwargs)

    monkeypatch.setattr(equality_changes, "read_rows_at", recording)
    checked = 0
    for name in ("equality_deletes", "equality_global"):
        for feed, part in _parts(corpus, name, RowOptions()):
            if not part.shareable:
                continue
            reads.clear()
            list(read_parts([part], IO, feed.options))
            whole = Counter(reads)
            reads.clear()
            for share in part.key_shares(2):
                list(read_parts([share], IO, feed.options))
            assert Counter(reads) == whole, (name, part.changes.commit)
            checked += bool(whole)
    assert checked >= 2
