"""Change reads through a key index give the rows they give without one, on tables Iceberg
Java wrote, and replay to Iceberg Java's own reads.

The equality-delete scenarios of the corpus (deletes keyed on id, on name, on (id, name),
global and partition-scoped, null keys, upserts in the same commit as their data) are read
commit by commit with an index built cold, then again from the index a first pass left:
the second pass reads no key column of a file the index holds. Read newest commit first,
an index holding files of later snapshots (as after a rollback or from another branch)
answers for the files of the snapshot read only. A range read, a CLI command (persisting
the index by default, or with --no-key-index keeping none), a damaged segment and an index
of another key type all give the same rows.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import meltwater.stream
from corpus.compare import assert_replays, live_ranges
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.keys import key_index as key_index_module

SCENARIOS = ["equality_deletes", "equality_global"]


def _rows(table) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in table.to_pylist())


def _indexes(root: Path) -> list[key_index_module.KeyIndex]:
    return [index for directory, index in key_index_module._indexes.items()
            if root in directory.parents]


@pytest.mark.parametrize("name", SCENARIOS)
def test_commits_read_through_the_index_equal_those_read_without(corpus, tmp_path, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    ranges = list(live_ranges(scenario, table.metadata))
    plain = {}
    for parent, child in ranges:
        plain[child] = meltwater.stream.changes(table, from_snapshot_id=parent,
                                                to_snapshot_id=child).read_all()
    for label, order in (("cold", ranges), ("warm", ranges), ("newest first", ranges[::-1])):
        for parent, child in order:
            indexed = meltwater.stream.changes(table, from_snapshot_id=parent,
                                               to_snapshot_id=child,
                                               key_index_dir=tmp_path).read_all()
            assert _rows(indexed) == _rows(plain[child]), f"{label} read of {child}"
            assert_replays(scenario, table.metadata, parent, child, indexed)
        indexes = _indexes(tmp_path)
        assert indexes, "no commit of the scenario was read through an index"
        if label == "cold":
            assert sum(i.files_missing for i in indexes) > 0
        else:
            assert sum(i.files_missing for i in indexes) == 0, f"{label}: keys read again"
            assert sum(i.files_found for i in indexes) > 0
        for index in indexes:
            index.files_found = index.files_missing = 0


def test_a_range_read_through_the_index_equals_one_without(corpus, tmp_path):
    scenario = corpus.scenarios["equality_deletes"]
    table = load_table(scenario.location)
    main = [s.snapshot_id for s in reversed(table.metadata.ancestors(
        table.metadata.current_snapshot_id))]
    for _ in range(2):
        indexed = meltwater.stream.changes(table, from_snapshot_id=main[0],
                                           key_index_dir=tmp_path).read_all()
        plain = meltwater.stream.changes(table, from_snapshot_id=main[0]).read_all()
        assert _rows(indexed) == _rows(plain)
        assert_replays(scenario, table.metadata, main[0], main[-1], indexed)


def test_a_damaged_segment_gives_the_same_rows_and_is_rebuilt(corpus, tmp_path, caplog):
    scenario = corpus.scenarios["equality_global"]
    table = load_table(scenario.location)
    ranges = list(live_ranges(scenario, table.metadata))
    for parent, child in ranges:
        meltwater.stream.changes(table, from_snapshot_id=parent, to_snapshot_id=child,
                                 key_index_dir=tmp_path).read_all()
    segments = list(tmp_path.rglob("seg-*.arrow"))
    assert segments
    for segment in segments:
        data = bytearray(segment.read_bytes())
        data[-20] ^= 0x01
        segment.write_bytes(bytes(data))
    key_index_module._indexes.clear()  # as a new process: segments not yet checked
    for parent, child in ranges:
        indexed = meltwater.stream.changes(table, from_snapshot_id=parent,
                                           to_snapshot_id=child,
                                           key_index_dir=tmp_path).read_all()
        plain = meltwater.stream.changes(table, from_snapshot_id=parent,
                                         to_snapshot_id=child).read_all()
        assert _rows(indexed) == _rows(plain)
    assert "dropping its runs" in caplog.text  # the damage was found, not read past
    assert not [s for s in segments if s.exists()], "damaged segments were kept"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "meltwater"), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_cli_keeps_the_index_by_default_and_none_when_told(corpus, tmp_path):
    scenario = corpus.scenarios["equality_deletes"]
    table = load_table(scenario.location)
    for parent, child in live_ranges(scenario, table.metadata):  # an upsert the index serves
        scratch = tmp_path / f"scratch-{child}"
        expected = meltwater.stream.changes(table, from_snapshot_id=parent,
                                            to_snapshot_id=child,
                                            key_index_dir=scratch).read_all()
        if expected.num_rows and list(scratch.rglob("catalog.json")):
            break
    else:
        pytest.fail(f"no commit of {scenario.name} is read through a key index")
    argv = ["changes", scenario.location, "--from-snapshot", str(parent), "--to-snapshot",
            str(child), "--format", "jsonl"]
    outputs = [_cli(*argv, "--key-index-dir", str(tmp_path / "given")) for _ in range(2)]
    outputs.append(_cli(*argv, "--no-key-index"))
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == expected.num_rows
    assert outputs[0].stdout == outputs[1].stdout == outputs[2].stdout
    assert list((tmp_path / "given").rglob("catalog.json"))
    both = _cli(*argv, "--no-key-index", "--key-index-dir", str(tmp_path))
    assert both.returncode == 2 and "not allowed with" in both.stderr
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    refused = _cli(*argv, "--key-index-dir", str(a_file))
    assert refused.returncode == 2 and not refused.stdout
    assert refused.stderr.strip().splitlines() == [
        f"meltwater: --key-index-dir {a_file}: not a directory"]


def test_an_index_directory_that_cannot_be_used_is_read_past(corpus, tmp_path, caplog):
    """The index is a cache: a root under a file (as a default in a read-only or odd home
    would be) costs the key columns' reads and a warning, never rows or the read."""
    scenario = corpus.scenarios["equality_global"]
    table = load_table(scenario.location)
    (tmp_path / "a-file").write_text("")
    for parent, child in live_ranges(scenario, table.metadata):
        indexed = meltwater.stream.changes(table, from_snapshot_id=parent,
                                           to_snapshot_id=child,
                                           key_index_dir=tmp_path / "a-file").read_all()
        plain = meltwater.stream.changes(table, from_snapshot_id=parent,
                                         to_snapshot_id=child).read_all()
        assert _rows(indexed) == _rows(plain)
    assert "unusable" in caplog.text and "not updated" in caplog.text
