"""The soak's short version (bench/soak.py, issue 33), as CI runs it: three minutes of the
live Iceberg Java writer and a pyiceberg writer on S3 against one service with a SQLite
mirror, a Kafka topic and an S3 table's mirror, a fault every 30 s (kill -9, the broker cut,
the catalog and S3 unreachable, the checkpoints' disk full), each in turn. The soak itself
checks every mirror against Iceberg Java whenever its ledger names a commit, and the topic
folded by key every minute, and exits 1 on the first difference; here its report must show
that it checked, that each fault happened, and that nothing was lost or doubled.

The long run (two hours and more) is the benchmark's: bench/README.md, "Soak".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAULTS = {"kill-9", "broker-cut", "store-down", "disk-full"}

pytestmark = [pytest.mark.service, pytest.mark.objectstore, pytest.mark.kafka]


def test_three_minutes_of_faults_lose_and_double_nothing(tmp_path):
    report = tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", "3",
         "--fault-every", "0.5", "--outage", "12", "--interval", "3", "--sample-every", "10",
         "--no-figure", "--out", str(report)],
        capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    result = json.loads(report.read_text())
    ran = set(result["fault_counts"])
    assert ran | set(result["skipped_faults"]) == FAULTS, result["fault_counts"]
    assert ran >= FAULTS - {"disk-full"}, result["fault_counts"]
    assert result["fault_counts"]["kill-9"] >= 2 and result["service_starts"] >= 3
    assert result["pipelines_stopped"] == []
    assert result["commits_unmirrored"] == 0 and result["events_twice"] == 0
    checks = result["checks"]
    assert checks["mirror"] >= 20 and checks["items"] >= 5 and checks["topic"] >= 3, checks
    assert result["topic_events"] > 0 and result["service_exit"] == 0
    # each outage was seen: /health said which pipeline failed and why, in one line each
    said = {f["kind"]: " ".join(f["health"]) for f in result["faults"]}
    assert "cannot be reached" in said["store-down"], said
    if "disk-full" in ran:
        assert "No space left on device" in said["disk-full"], said
    print(f"\nsoak: {result['live_commits']} live commits, checks {checks}, "
          f"faults {result['fault_counts']}")
