"""The service as supervisors run it: a pipeline that cannot heal stopped (not restarted
forever) with its reason in meltwater's words, available-now runs ending with a status that
says how they went.
"""

from __future__ import annotations

import json
import time

import pyarrow.dataset as ds

from meltwater.stream import changes
from service_tests.harness import Pipeline, write_config

DUPLICATE = "choose key columns that are unique"


def json_lines(text: str) -> list[dict]:
    """The service's own log lines (log = "json"); Spark's JVM writes its own lines too."""
    found = []
    for line in text.splitlines():
        if line.startswith('{"time"'):
            found.append(json.loads(line))
    return found


def test_available_now_ends_naming_a_failure_that_cannot_heal(tmp_path, corpus, serve):
    """Two available-now pipelines: an archive with no [pipelines.options] at all (the stream
    is read as changes whatever the trigger) finishes; a mirror keyed on a column that is
    not unique stops at its first batch, once, and the run exits 2 naming it, in
    meltwater's words, in JSON log lines."""
    table = corpus.scenarios["equality_deletes"].location
    archive = tmp_path / "archive"
    config = write_config(tmp_path / "svc.toml", [
        Pipeline("archive", table, tmp_path / "chk-archive", {"type": "parquet",
                                                              "path": str(archive)},
                 trigger="available-now", options={}),
        Pipeline("dup", table, tmp_path / "chk-dup",
                 {"type": "sqlite", "url": f"sqlite:///{tmp_path}/m.db", "key": ["part"]},
                 trigger="available-now", options={})], port=0, progress="off")
    config.write_text(config.read_text().replace('http = "127.0.0.1:0"', 'http = "off"'))
    started = time.monotonic()
    result = serve.run(config, timeout=400)
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr[-3000:]
    logged = json_lines(result.stderr)
    stopped = [r for r in logged if r.get("pipeline") == "dup" and r["level"] == "error"]
    assert len(stopped) == 1, stopped  # stopped once, not restarted
    assert stopped[0]["message"].startswith("pipeline stopped: restarting cannot fix this")
    assert stopped[0]["error"].startswith("DuplicateKeyError: batch 0 of pipeline 'dup@")
    assert stopped[0]["error"].endswith(DUPLICATE)
    assert not any("restarting from its checkpoint" in r["message"] for r in logged)
    final = logged[-1]
    assert final["message"] == "pipelines failed" and final["failed"].startswith("dup: "), final
    assert any(r["message"] == "pipeline finished" and r["pipeline"] == "archive"
               for r in logged)
    files = [str(p) for p in archive.rglob("*.parquet")]  # in _commit_snapshot_id=... folders
    written = ds.dataset(files, format="parquet").to_table()
    assert written.num_rows == changes(table).read_all().num_rows > 0
    print(f"\navailable-now run with a duplicate key ended (exit 2) in {elapsed:.0f}s")
