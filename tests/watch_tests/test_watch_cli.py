"""`meltwater watch` as a user runs it: a child process printing commits as they land."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from meltwater.planner.table.table_loading import load_table
from watch_tests.replay import Replay

MELTWATER = str(Path(sys.executable).parent / "meltwater")


class Watch:
    """`meltwater watch ...` in a child process, its stdout lines read as they come."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([MELTWATER, "watch", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.status = self.process.stderr.readline()  # "watching ..." once it has started

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def line(self, timeout: float = 10.0) -> str:
        return self.lines.get(timeout=timeout)

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        """Send `signum`; the exit status and the rest of stderr. Closes the pipes."""
        self.process.send_signal(signum)
        try:
            status = self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)
            self.reader.join(timeout=10)  # stdout ends with the process
            errors = self.process.stderr.read()
            self.process.stdout.close()
            self.process.stderr.close()
        return status, errors


@pytest.mark.parametrize("poll", [False, True], ids=["events", "polling"])
def test_watch_prints_commits_and_exits_0_on_sigterm(corpus, tmp_path, poll):
    replay = Replay(corpus.scenarios["mor_partitioned"].location, tmp_path / "t")
    replay.commit_until(len(replay.sources))
    burst = replay.synthesized(5)
    watch = Watch(replay.location, "--format", "jsonl",
                  *(["--poll", "--interval", "0.5"] if poll else []))
    try:
        assert watch.status.startswith(f"watching {replay.location} (")
        for _, text in burst:
            replay.commit(text)
        events = [json.loads(watch.line()) for _ in burst]
        assert [e["snapshot_id"] for e in events] == [snapshot_id for snapshot_id, _ in burst]
        assert [e["added_records"] for e in events] == [1, 2, 3, 4, 5]
        assert events[0]["committed_at"].endswith("Z") and events[0]["operation"] == "append"
        assert watch.lines.empty()
    finally:
        status, errors = watch.stop()
    assert status == 0, errors


def test_watch_text_lines_after_a_snapshot_and_ctrl_c(corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    metadata = load_table(scenario.location).metadata
    main = metadata.ancestors(metadata.current_snapshot_id)[::-1]  # oldest first
    watch = Watch(scenario.location, "--after", str(main[-3].snapshot_id))
    try:
        lines = [watch.line(), watch.line()]
    finally:
        status, errors = watch.stop(signal.SIGINT)
    assert status == 0, errors
    words = [line.split() for line in lines]
    assert [int(w[1]) for w in words] == [s.snapshot_id for s in main[-2:]]
    assert [w[3] for w in words] == [s.operation for s in main[-2:]]
    assert all(w[2].startswith("seq=") and w[4].startswith("rows=+") for w in words)


def test_watch_bad_table_and_interval_exit_2(tmp_path):
    result = subprocess.run([MELTWATER, "watch", str(tmp_path / "missing")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "not an Iceberg table" in result.stderr
    for interval in ("0", "-1", "inf", "nan", "1e308", "86400"):
        result = subprocess.run([MELTWATER, "watch", str(tmp_path), "--interval", interval],
                                capture_output=True, text=True, timeout=60)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert result.stderr.startswith(f"meltwater: --interval {float(interval)}: expected a "
                                        "positive number of seconds below 86400")
