"""The changelog archive: Spark's JSON file sink through the service, exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from service_process import Pipeline, write_config

from corpus.compare import row_multiset
from meltwater.stream import changes


def committed_files(archive: Path) -> list[Path]:
    """The files Spark's file sink log says were committed (what readers of it see)."""
    files = []
    for log in sorted((archive / "_spark_metadata").iterdir()):
        if not log.name.isdigit():
            continue
        for line in log.read_text().splitlines()[1:]:  # first line: the log's version
            files.append(Path(json.loads(line)["path"].removeprefix("file:")))
    return files


def archived_rows(archive: Path) -> list[dict]:
    rows = []
    for path in committed_files(archive):
        snapshot = int(path.parent.name.split("=", 1)[1])  # partitioned by commit
        for line in path.read_text().splitlines():
            row = json.loads(line)
            row["_commit_snapshot_id"] = snapshot
            rows.append(row)
    return rows


def test_json_archive_holds_each_change_once_across_runs(tmp_path, corpus, serve):
    """Two available-now runs on one checkpoint: the archive holds the change feed once,
    every row with its commit's metadata columns and all its columns, nulls written as
    null, files partitioned by commit."""
    scenario = corpus.scenarios["equality_deletes"]
    archive = tmp_path / "archive"
    config = write_config(tmp_path / "archive.toml", [Pipeline(
        "eq-archive", scenario.location, tmp_path / "chk",
        {"type": "json", "path": str(archive)}, trigger="available-now")],
        port=0, progress="off")
    text = config.read_text().replace('http = "127.0.0.1:0"', 'http = "off"')
    config.write_text(text)
    for _ in range(2):
        result = serve.run(config)
        assert result.returncode == 0, result.stderr[-3000:]
    rows = archived_rows(archive)
    expected = changes(scenario.location).read_all()
    # Every line holds every column, null or not (the partition column is the directory).
    assert all(set(row) == set(expected.column_names) for row in rows)
    assert any(v is None for row in rows for v in row.values()), "the test needs nulls"
    columns = [c for c in expected.column_names if c != "_commit_timestamp"]
    # Column by column, each in the change feed's type: a schema inferred from whichever
    # line comes first would depend on the order of the corpus's random snapshot ids.
    got = pa.table({c: pa.array([row[c] for row in rows]).cast(expected.schema.field(c).type)
                    for c in columns})
    assert row_multiset(got) == row_multiset(expected.select(columns))
    partitions = {p.parent.name for p in committed_files(archive)}
    assert partitions == {f"_commit_snapshot_id={s}"
                          for s in set(expected["_commit_snapshot_id"].to_pylist())}
