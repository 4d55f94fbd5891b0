"""Inputs the `meltwater` command once answered with a traceback or a wrong answer (issue 23),
on tables written by Iceberg Java: each is now one line naming the option as the user wrote
it, exit status 2, or a defined answer.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meltwater.planner.table.table_loading import load_table

MELTWATER = Path(sys.executable).parent / "meltwater"


def meltwater(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(MELTWATER), *args], capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


def refused(result: subprocess.CompletedProcess) -> str:
    """The one line of a refusal: exit status 2, nothing on stdout, one line on stderr."""
    assert result.returncode == 2, (result.returncode, result.stdout[:300], result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def answered(result: subprocess.CompletedProcess) -> list[dict]:
    """The rows of a `--format jsonl` answer with exit status 0."""
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


# -- change range starts ------------------------------------------------------------------


def test_a_start_sequence_number_beyond_the_head_is_refused_as_an_end_one_is(corpus):
    """random_mix's head is sequence number 16: `--from-sequence 9999` named no commit and
    answered an empty range with exit 0, while `--to-sequence 9999` was refused."""
    location = corpus.scenarios["random_mix"].location
    head = load_table(location).metadata.current_snapshot
    assert head.sequence_number == 16
    for option in ("--from-sequence", "--to-sequence"):
        line = refused(meltwater("changes", location, option, "9999"))
        assert line == (f"meltwater: {option} 9999 is beyond the table's head (sequence number "
                        f"16, snapshot {head.snapshot_id})")
    # the head itself as the start: nothing since
    assert answered(meltwater("changes", location, "--from-sequence", "16",
                              "--format", "jsonl")) == []
    last = answered(meltwater("changes", location, "--from-sequence", "15",
                              "--format", "jsonl"))
    assert last and {r["_commit_snapshot_id"] for r in last} == {head.snapshot_id}


def test_other_starts_past_the_head(corpus):
    """A snapshot id the table does not have is refused; a time after the head's commit
    (even one to come) is a moment with nothing committed since, as Iceberg Java's
    changelog scan answers it: empty, exit 0."""
    location = corpus.scenarios["random_mix"].location
    line = refused(meltwater("changes", location, "--from-snapshot", "42"))
    assert line.startswith("meltwater: --from-snapshot 42 is not a snapshot of table ")
    head = load_table(location).metadata.current_snapshot
    for start in (str(head.timestamp_ms + 1), "2999-01-01T00:00:00Z"):
        assert answered(meltwater("changes", location, "--from-timestamp", start,
                                  "--format", "jsonl")) == []


# -- errors name the option as the user wrote it -----------------------------------------


def test_compute_updates_without_identifier_fields_names_identifier_columns(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    assert corpus.scenarios["mor_partitioned"].record["identifier_fields"] == []
    assert refused(meltwater("changes", location, "--compute-updates")) == (
        "meltwater: --compute-updates needs identifier columns to pair updates by: the table "
        "has no identifier fields, so give them with --identifier-columns")
    assert refused(meltwater("changes", location, "--identifier-columns", "id,nope")) == (
        "meltwater: --identifier-columns: unknown column 'nope' (columns: id, category, "
        "amount, ts)")


@pytest.mark.parametrize("command", ["scan", "plan"])
def test_a_time_before_the_first_snapshot_names_as_of_and_the_time_given(corpus, command):
    location = corpus.scenarios["mor_partitioned"].location
    line = refused(meltwater(command, location, "--as-of", "2026-11-01T00:00:00Z"))
    assert line == (f"meltwater: --as-of 2026-11-01T00:00:00Z: table {location} has no "
                    "snapshot at or before 1793491200000 ms")
    assert refused(meltwater(command, location, "--snapshot", "42")).startswith(
        "meltwater: --snapshot 42: snapshot 42 does not exist in table ")
    assert refused(meltwater(command, location, "--ref", "nope")).startswith(
        f"meltwater: --ref 'nope': table {location} has no branch or tag 'nope'")


def test_range_times_are_named_as_given(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    assert refused(meltwater("changes", location, "--to-timestamp",
                             "2026-11-01T00:00:00Z")) == (
        "meltwater: --to-timestamp 2026-11-01T00:00:00Z: no snapshot at or before "
        "1793491200000 ms")
    line = refused(meltwater("changes", location, "--from-timestamp", "2027-01-01T00:00:00Z",
                             "--to-timestamp", "2026-12-01T00:00:00+01:00"))
    assert line == ("meltwater: --from-timestamp 2027-01-01T00:00:00Z is later than "
                    "--to-timestamp 2026-12-01T00:00:00+01:00: the range's start must not be "
                    "after its end")


def test_an_empty_as_of_is_refused_not_read_as_the_current_snapshot(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    assert refused(meltwater("scan", location, "--as-of", "")) == (
        "meltwater: --as-of '': expected milliseconds or an ISO-8601 time")


# -- pyiceberg's configuration file ----------------------------------------------------------


@pytest.mark.parametrize(("content", "problem"), [
    ("catalog:\n  lake:\n    uri: [http://x\n",
     "not valid YAML (line 3: Found ugly disallowed JSONesque flow mapping"),
    ("catalog:\n  lake:\n    uri: x\n   warehouse: y\n",
     "not valid YAML (line 4: expected <block end>, but found '<block mapping start>')"),
    ("- catalog\n- lake\n", "holds a list, not a mapping of settings"),
    ("lake\n", "holds a single value, not a mapping of settings"),
    ("catalog: lake\n", "Catalog configurations needs to be an object"),
])
def test_a_malformed_pyiceberg_yaml_is_one_line_naming_the_file(tmp_path, content, problem):
    """pyiceberg reads `.pyiceberg.yaml` from $PYICEBERG_HOME, then the home directory;
    its parser's traceback (or `AttributeError: 'list' object has no attribute 'items'`)
    reached the user."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".pyiceberg.yaml").write_text(content)
    env = {"HOME": str(home), "PYICEBERG_HOME": str(home)}
    line = refused(meltwater("scan", "lake.db.orders", env=env))
    assert line.startswith(f"meltwater: pyiceberg configuration {home / '.pyiceberg.yaml'}"), line
    assert problem in line, line


# -- CSV of bytes -------------------------------------------------------------------------


def _csv_bytes(text: str) -> dict[int, bytes | None]:
    """`"id","bin"` CSV as id -> the bytes its base64 cell holds: unquoted empty is null,
    `""` the empty value."""
    lines = text.splitlines()
    assert lines[0] == '"id","bin"', lines[0]
    values: dict[int, bytes | None] = {}
    for line in lines[1:]:
        key, cell = line.split(",", 1)
        values[int(key)] = None if cell == "" else base64.b64decode(cell.strip('"'),
                                                                    validate=True)
    return values


def test_csv_writes_binary_columns_in_base64_as_java_reads_them(corpus):
    """random_mix's `bin binary` column: `--format csv` ended in `ArrowInvalid: Invalid UTF8
    payload` (exit 1); its cells are now base64, as `jsonl` writes bytes."""
    scenario = corpus.scenarios["random_mix"]
    truth = {row["id"]: row["bin"] for row in scenario.snapshots[-1].rows().to_pylist()}
    assert any(v for v in truth.values()) and None in truth.values() and b"" in truth.values()
    result = meltwater("scan", scenario.location, "--format", "csv", "--columns", "id,bin")
    assert result.returncode == 0, result.stderr
    assert _csv_bytes(result.stdout) == truth
    everything = meltwater("scan", scenario.location, "--format", "csv", "--limit", "5")
    assert everything.returncode == 0, everything.stderr


def test_changes_csv_writes_bytes_as_its_jsonl_does(corpus):
    location = corpus.scenarios["random_mix"].location
    args = ("changes", location, "--columns", "id,bin", "--to-sequence", "3")
    csv = meltwater(*args, "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    header, *lines = csv.stdout.splitlines()
    assert header.startswith('"id","bin","_change_type"')
    cells = [line.split(",")[:2] for line in lines]
    rows = answered(meltwater(*args, "--format", "jsonl"))
    assert len(rows) == len(cells) > 0
    expected = [[str(r["id"]), "" if r["bin"] is None else f'"{r["bin"]}"'] for r in rows]
    assert sorted(expected) == sorted(cells)  # the rows of a commit come in no fixed order


# -- found reading the entry points ------------------------------------------------------


def test_sequence_bounds_on_a_format_v1_table_are_refused(corpus):
    """Every commit of a v1 table carries sequence number 0: `--from-sequence 0` answered
    no changes and `--to-sequence 0` all of them, exit 0 both."""
    location = corpus.scenarios["format_v1"].location
    assert {s.sequence_number for s in load_table(location).metadata.snapshots.values()} == {0}
    for option in ("--from-sequence", "--to-sequence"):
        assert refused(meltwater("changes", location, option, "0")) == (
            f"meltwater: {option} 0: table {location} is format version 1, whose commits "
            "carry no sequence numbers (all are 0); give the range by snapshot id, time or "
            "ref")


def test_a_location_with_catalog_is_refused_not_read_as_an_identifier(corpus):
    location = corpus.scenarios["mor_partitioned"].location
    assert refused(meltwater("scan", location, "--catalog", "lake")) == (
        f"meltwater: table {location!r} is a location, not namespace.table in catalog "
        "'lake': give one or the other")


def test_csv_without_rows_has_the_header_csv_with_rows_has(corpus):
    """Quoted, as Arrow writes it above rows: the header of an empty result was the names
    joined bare, which a comma or quote in a name would shift."""
    location = corpus.scenarios["mor_partitioned"].location
    some = meltwater("scan", location, "--format", "csv", "--limit", "1")
    none = meltwater("scan", location, "--format", "csv", "--limit", "0")
    empty_table = meltwater("changes", location + "/metadata/v1.metadata.json", "--format",
                            "csv")
    assert some.returncode == none.returncode == empty_table.returncode == 0
    header = '"id","category","amount","ts"\n'
    assert none.stdout == some.stdout.splitlines(keepends=True)[0] == header
    assert empty_table.stdout.startswith('"id","category","amount","ts","_change_type",')


@pytest.mark.parametrize("command", ["snapshots", "scan", "changes"])
def test_an_empty_output_path_is_refused_not_taken_for_stdout(corpus, command):
    """`--output "$UNSET"` wrote the rows to stdout, exit 0, and no file."""
    location = corpus.scenarios["mor_partitioned"].location
    assert refused(meltwater(command, location, "--format", "jsonl", "--output", "")) == (
        f"meltwater {command}: error: argument --output: expected a path, got an empty value")


@pytest.mark.parametrize("args", [["scan", "--format", "jsonl"], ["scan"], ["plan"],
                                  ["changes", "--format", "csv"],
                                  ["changes", "--format", "debezium-jsonl"]])
def test_a_closed_stdout_is_one_line(corpus, args):
    """`meltwater scan T >&-`: Python leaves sys.stdout None, and writing to it was an
    AttributeError traceback; `cat` says it cannot write, and so do we."""
    location = corpus.scenarios["mor_partitioned"].location
    result = subprocess.run([str(MELTWATER), args[0], location, *args[1:]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            timeout=120, preexec_fn=lambda: os.close(1))
    assert (result.returncode, result.stderr) == (
        2, "meltwater: cannot write to stdout: it is closed\n")
