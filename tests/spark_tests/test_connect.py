"""`format("meltwater")` from a Spark Connect client equals the classic session's reads.

A Connect client (`SparkSession.builder.remote("local[2]")`, tests/spark_tests/
connect_client.py, in a process of its own: it starts its own local Connect server JVM)
registers the source and reads a corpus table three ways: a snapshot, a change range and
an availableNow stream. The test session's classic SparkSession makes the same reads; the
two must match, and the snapshot must match what Iceberg Java read.

A Connect server whose Python lacks meltwater (here: the interpreter this virtualenv was
made from, as PYSPARK_PYTHON) is refused at registration with one line naming the fix.
Before, registration went through and each read failed in Spark's PYTHON_DATA_SOURCE_ERROR
with `ModuleNotFoundError: No module named 'meltwater'`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from corpus.compare import assert_same_rows

CLIENT = Path(__file__).parent / "connect_client.py"
SCENARIO = "mor_partitioned"


def _spec(scenario) -> dict:
    snapshots = [s for s in scenario.snapshots if not s.expired]
    middle = snapshots[len(snapshots) // 2]
    return {"table": scenario.location,
            "batch": {"snapshot": {"snapshot-id": str(middle.snapshot_id)},
                      "changes": {"start-snapshot-id": str(snapshots[1].snapshot_id)}},
            "stream": {"stream": {"starting": "earliest"}}}


def _connect(spec: dict, out: Path, python: str) -> subprocess.CompletedProcess:
    (out / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYSPARK_PYTHON": python}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return subprocess.run([sys.executable, str(CLIENT), str(out / "spec.json"), str(out)],
                          env=env, capture_output=True, text=True, timeout=600)


def _classic(spark, spec: dict, out: Path) -> None:
    for name, options in spec["batch"].items():
        frame = spark.read.format("meltwater").options(**options).load(spec["table"])
        pq.write_table(frame.toArrow(), out / f"{name}.parquet")
    for name, options in spec["stream"].items():
        query = (spark.readStream.format("meltwater").options(**options).load(spec["table"])
                 .writeStream.format("parquet")
                 .option("checkpointLocation", str(out / f"{name}.checkpoint"))
                 .trigger(availableNow=True).start(str(out / name)))
        query.awaitTermination()


def test_connect_client_reads_as_the_classic_session(corpus, spark, tmp_path):
    scenario = corpus.scenarios[SCENARIO]
    spec = _spec(scenario)
    remote, classic = tmp_path / "connect", tmp_path / "classic"
    remote.mkdir()
    classic.mkdir()
    done = _connect(spec, remote, sys.executable)
    assert done.returncode == 0, done.stderr[-3000:]
    _classic(spark, spec, classic)
    for name in (*spec["batch"], *spec["stream"]):
        ours, theirs = pq.read_table(remote / name if name in spec["stream"]
                                     else remote / f"{name}.parquet"), \
            pq.read_table(classic / name if name in spec["stream"]
                          else classic / f"{name}.parquet")
        assert ours.num_rows > 0, name
        assert_same_rows(ours, theirs, f"Connect vs classic: {name}")
    snapshot = scenario.snapshot(int(spec["batch"]["snapshot"]["snapshot-id"]))
    assert_same_rows(pq.read_table(remote / "snapshot.parquet"), snapshot.rows(),
                     "Connect vs Iceberg Java")


def test_a_connect_server_without_meltwater_is_refused_in_one_line(corpus, tmp_path):
    base = getattr(sys, "_base_executable", None) or sys.executable
    probe = subprocess.run([base, "-c", "import meltwater"], capture_output=True)
    assert probe.returncode != 0, f"{base} imports meltwater: no Python without it to test"
    done = _connect(_spec(corpus.scenarios[SCENARIO]), tmp_path, base)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert lines[-1] == (
        f"meltwater: the Spark Connect server's Python ({base}, Python "
        f"{sys.version_info[0]}.{sys.version_info[1]}) cannot import meltwater "
        "(ModuleNotFoundError: No module named 'meltwater'): install meltwater there, the "
        "same version as this client's, or point the server's spark.pyspark.python at a "
        "Python that has it"), lines[-1]
    # The server's JVM wrote to its log, not around meltwater's line (connect_client.py).
    assert (tmp_path / "server.log").stat().st_size > 0
    assert not [line for line in lines if " WARN " in line or line.lstrip().startswith("at ")]
