"""`meltwater scan` against Apache Iceberg Java: every snapshot of every corpus scenario.

The truth is what Iceberg Java read at each snapshot (time travel, the snapshot's schema);
meltwater must return the same multiset of rows, with and without filters. Filtered reads
are compared with the truth filtered by plain Python predicates, independent of meltwater's
own filter code.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import meltwater.stream
from corpus import WRITERS_2026
from corpus.compare import assert_same_rows
from corpus.pyiceberg_corpus import PYICEBERG_SCENARIOS
from meltwater.planner.table.table_loading import load_table

ALL = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
       "position_deletes_with_rows", "maintenance", "evolution", "format_v1",
       "v3_deletion_vectors", "random_mix", "file_formats", "column_evolution", "small_pages",
       *WRITERS_2026,
       *PYICEBERG_SCENARIOS]


@pytest.mark.parametrize("name", ALL)
def test_every_snapshot_reads_exactly_what_iceberg_java_reads(corpus, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    checked = 0
    for snap in scenario.snapshots:
        if snap.expired:
            continue
        rows = meltwater.stream.scan(table, snapshot_id=snap.snapshot_id).read_all()
        assert_same_rows(rows, snap.rows(), f"{name} at {snap.snapshot_id} ({snap.label})")
        checked += 1
    assert checked >= 3


def _when(value, test):
    return value is not None and test(value)


UTC = dt.timezone.utc
FILTERS = [
    ("mor_partitioned", "id > 50 and category = 'a'",
     lambda r: _when(r["id"], lambda v: v > 50) and r["category"] == "a"),
    ("mor_partitioned", "ts >= timestamp '2024-01-01T02:00:00+00:00' or amount < 20",
     lambda r: _when(r["ts"], lambda v: v >= dt.datetime(2024, 1, 1, 2, tzinfo=UTC))
     or _when(r["amount"], lambda v: v < 20)),
    ("cow_partitioned", "d < date '2024-02-01' and region in ('east', 'west')",
     lambda r: _when(r["d"], lambda v: v < dt.date(2024, 2, 1))
     and r["region"] in ("east", "west")),
    ("equality_deletes", "name is null or id in (4, 40, 51)",
     lambda r: r["name"] is None or r["id"] in (4, 40, 51)),
    ("equality_global", "part = 'a' and id >= 20", lambda r: r["part"] == "a" and r["id"] >= 20),
    ("position_deletes_with_rows", "starts_with(name, 'n1')",
     lambda r: _when(r["name"], lambda v: v.startswith("n1"))),
    ("evolution", "full_name like 'name1%' or score > 100",
     lambda r: _when(r["full_name"], lambda v: v.startswith("name1"))
     or _when(r["score"], lambda v: v > 100)),
    ("format_v1", "d >= date '2022-01-01' and not (s = 'over')",
     lambda r: _when(r["d"], lambda v: v >= dt.date(2022, 1, 1))
     and _when(r["s"], lambda v: v != "over")),
    ("v3_deletion_vectors", "grp = 'x' and id < 30", lambda r: r["grp"] == "x" and r["id"] < 30),
    ("random_mix", "id = 9 or (dbl > 0 and b)",
     lambda r: r["id"] == 9 or (_when(r["dbl"], lambda v: v > 0) and r["b"] is True)),
    ("random_mix", "is_nan(dbl) or i is null", lambda r: r["i"] is None or (
        r["dbl"] is not None and r["dbl"] != r["dbl"])),
    ("random_mix", "dec > 0 and ts_ntz < timestamp '2024-01-03T00:00:00'",
     lambda r: _when(r["dec"], lambda v: v > Decimal(0))
     and _when(r["ts_ntz"], lambda v: v < dt.datetime(2024, 1, 3))),
    ("file_formats", "amount >= 10 and id != 40",
     lambda r: _when(r["amount"], lambda v: v >= 10) and _when(r["id"], lambda v: v != 40)),
]


@pytest.mark.parametrize(("name", "text", "predicate"), FILTERS,
                         ids=[f"{n}:{t}" for n, t, _ in FILTERS])
def test_filtered_scans_equal_the_truth_filtered(corpus, name, text, predicate):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    for snap in scenario.snapshots:
        if snap.expired:
            continue
        truth = snap.rows()
        if not all(c in truth.column_names for c in _columns(text)):
            continue  # the filter names a column this snapshot's schema does not have yet
        expected = pa.Table.from_pylist([r for r in truth.to_pylist() if predicate(r)],
                                        schema=truth.schema)
        got = meltwater.stream.scan(table, snapshot_id=snap.snapshot_id, filter=text).read_all()
        assert_same_rows(got, expected, f"{name} at {snap.snapshot_id} where {text}")


def _columns(text: str) -> list[str]:
    from meltwater.planner.expressions.filter_parser import parse_filter
    from meltwater.planner.expressions.tree import predicates

    return [p.term for p in predicates(parse_filter(text))]


def test_column_selection_and_limit(corpus):
    scenario = corpus.scenarios["random_mix"]
    truth = scenario.snapshots[-1].rows().select(["m", "id"])
    got = meltwater.stream.scan(scenario.location, columns=["m", "id"]).read_all()
    assert_same_rows(got, truth, "random_mix columns m, id")
    limited = meltwater.stream.scan(scenario.location, limit=7).read_all()
    assert limited.num_rows == 7


def _cli(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "meltwater"
    return subprocess.run([str(exe), *args], capture_output=True, text=True)


def test_cli_scan_formats_and_time_travel(corpus, tmp_path):
    scenario = corpus.scenarios["mor_partitioned"]
    snap = scenario.snapshots[3]
    out = tmp_path / "rows.parquet"
    result = _cli("scan", scenario.location, "--snapshot", str(snap.snapshot_id),
                  "--format", "parquet", "--output", str(out))
    assert result.returncode == 0, result.stderr
    import pyarrow.parquet as pq

    assert_same_rows(pq.read_table(out), snap.rows(), "cli parquet output")
    jsonl = _cli("scan", scenario.location, "--ref", "audit", "--format", "jsonl",
                 "--filter", "id = 900")
    assert jsonl.returncode == 0, jsonl.stderr
    assert '"id": 900' in jsonl.stdout and len(jsonl.stdout.splitlines()) == 1
    csv = _cli("scan", scenario.location, "--format", "csv", "--columns", "id,category",
               "--limit", "3")
    assert csv.returncode == 0 and csv.stdout.splitlines()[0] == '"id","category"'
    assert len(csv.stdout.splitlines()) == 4


def test_parquet_output_in_many_row_groups_reads_as_java_does(corpus, tmp_path, monkeypatch):
    """Row groups of 7 rows after a first of 3, encoded apart on worker threads and joined
    into one file (`parquet_parts`): every scenario's current rows, read back, are Java's."""
    import pyarrow.parquet as pq

    from meltwater.output import parquet_writer, writers

    monkeypatch.setattr(parquet_writer, "ROW_GROUP_ROWS", 7)
    monkeypatch.setattr(parquet_writer, "FIRST_ROW_GROUP_ROWS", 3)
    for name, scenario in sorted(corpus.scenarios.items()):
        snap = scenario.snapshots[-1]
        out = tmp_path / f"{name}.parquet"
        reader = meltwater.stream.scan(scenario.location, snapshot_id=snap.snapshot_id)
        written = writers.write_stream(reader, "parquet", str(out))
        assert written == pq.ParquetFile(out).metadata.num_rows
        groups = 0 if written == 0 else 1 + -(-max(written - 3, 0) // 7)
        assert pq.ParquetFile(out).metadata.num_row_groups == groups
        assert_same_rows(pq.read_table(out), snap.rows(), f"{name} in 7-row row groups")


@pytest.mark.parametrize(("args", "message"), [
    (["scan", "/no/such/table"], "/no/such/table: not an Iceberg table"),
    (["scan", "{table}", "--snapshot", "123"], "snapshot 123 does not exist"),
    (["scan", "{table}", "--ref", "nope"], "no branch or tag 'nope'"),
    (["scan", "{table}", "--columns", "nope"], "unknown column 'nope'"),
    (["scan", "{table}", "--filter", "id >"], "filter"),
    (["scan", "{table}", "--filter", "nope = 1"], "unknown column 'nope'"),
    (["scan", "{table}", "--filter", "category = 5"], "does not fit column 'category'"),
    (["scan", "{table}", "--as-of", "yesterday"], "--as-of 'yesterday'"),
    (["scan", "{table}", "--format", "parquet"], "--format parquet needs --output"),
])
def test_cli_bad_input_is_one_line_and_exit_2(corpus, args, message):
    location = corpus.scenarios["mor_partitioned"].location
    result = _cli(*[a.replace("{table}", location) for a in args])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


class _TruncatingIO:
    """A FileIO whose copy of one file is cut short, as after a failed upload."""

    def __init__(self, victim: str) -> None:
        from meltwater.planner.table.fileio import PyArrowFileIO

        self.base = PyArrowFileIO()
        self.victim = victim

    def open_input(self, location: str):
        if location == self.victim:
            return pa.BufferReader(self.base.read_bytes(location)[:200])
        return self.base.open_input(location)

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        data = self.base.read_bytes(location, offset, length)
        return data[:200] if location == self.victim else data

    def exists(self, location: str) -> bool:
        return self.base.exists(location)

    def resolve(self, _location: str) -> None:
        return None  # every read goes through the cut copy

    def is_local(self, location: str) -> bool:
        return self.base.is_local(location)

    def list_dir(self, location: str) -> list[str]:
        return self.base.list_dir(location)


@pytest.mark.parametrize("kind", ["data", "delete"])
def test_truncated_files_raise_a_typed_error_naming_the_file(corpus, kind):
    from meltwater.planner.errors import MeltwaterError

    scenario = corpus.scenarios["mor_partitioned"]
    planned = meltwater.stream.plan(scenario.location)
    task = next(t for t in planned.tasks if t.deletes)
    victim = task.data_file.file_path if kind == "data" else task.deletes[0].file.file_path
    table = load_table(scenario.location, _TruncatingIO(victim))
    with pytest.raises(MeltwaterError) as raised:
        meltwater.stream.scan(table).read_all()
    message = str(raised.value)
    assert victim in message and "\n" not in message
