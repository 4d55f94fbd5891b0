"""deploy/: what can be checked here is checked, and the spark-submit recipe really runs."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from corpus.compare import row_multiset
from meltwater.service.config import load_config
from meltwater.stream import changes

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def unit_file(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit as {section: [(key, value), ...]}; keys may repeat, as systemd allows."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections[current] = []
            continue
        assert current is not None and "=" in line, f"not a unit file line: {raw!r}"
        key, value = line.split("=", 1)
        sections[current].append((key.strip(), value.strip()))
    return sections


def test_systemd_unit_runs_the_service_and_stops_it_with_sigterm():
    unit = unit_file(DEPLOY / "systemd" / "meltwater.service")
    assert set(unit) == {"Unit", "Service", "Install"}
    service = dict(unit["Service"])
    command = service["ExecStart"].split()
    assert command[0].endswith("/meltwater") and command[1:3] == ["serve", "--config"]
    assert service["ExecStartPre"].split()[-1] == "--check"
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "on-failure"
    # SIGTERM to the main process only; the service stops its JVM itself (it survives a
    # SIGTERM to its process group too: test_service_supervisors.py)
    assert service["KillMode"] == "mixed"
    assert service["RestartPreventExitStatus"] == "2"  # a bad config is not retried


def test_dockerfile_copies_the_packages_and_runs_serve():
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (\S+)", text, re.M)
    for source in copied:
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is missing"
    pyproject = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r"package-dir = \{(.*)\}", pyproject).group(1)
    for folder in re.findall(r'= "(\w+)"', packages):
        assert folder in copied, f"Dockerfile does not copy package folder {folder}/"
    assert 'ENTRYPOINT ["meltwater", "serve"]' in text
    assert "HEALTHCHECK" in text and "/health" in text


def test_readmes_reference_files_that_exist():
    for readme in (DEPLOY / "README.md", DEPLOY / "spark" / "README.md", ROOT / "README.md"):
        for name in re.findall(r"`((?:deploy/|\.\./|examples/|docker/|systemd/|spark/)"
                               r"[\w./-]+)`", readme.read_text()):
            target = (readme.parent / name).resolve()
            if not target.exists():
                target = ROOT / name
            assert target.exists(), f"{readme.relative_to(ROOT)} names {name}, missing"


def test_spark_submit_recipe_on_local_cluster(tmp_path, corpus, serve):
    """deploy/spark/submit.py under spark-submit --master local-cluster: the archive pipeline
    (available-now) holds exactly the table's change feed."""
    scenario = corpus.scenarios["mor_partitioned"]
    archive = tmp_path / "archive"
    config = tmp_path / "cluster.toml"
    config.write_text(f"""
[service]
http = "off"
progress = "lines"

[[pipelines]]
name = "mor"
table = "{scenario.location}"
checkpoint = "{tmp_path / 'chk'}"
trigger = "available-now"
[pipelines.options]
starting = "earliest"
[pipelines.sink]
type = "parquet"
path = "{archive}"
""")
    load_config(config)  # the recipe's config is a valid one
    result = serve.submit("--master", "local-cluster[2,1,1024]",
                          "--conf", "spark.executor.memory=768m",
                          str(DEPLOY / "spark" / "submit.py"), "--config", str(config))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    output = result.stdout + result.stderr  # spark-submit merges the driver's streams
    assert "pipeline finished" in output, output[-3000:]

    files = [str(p) for p in archive.rglob("*.parquet")]
    assert files, "the archive is empty"
    written = ds.dataset(files, format="parquet", partitioning="hive",
                         partition_base_dir=str(archive)).to_table()
    expected = changes(scenario.location).read_all()
    columns = [c for c in expected.column_names
               if c not in ("_commit_timestamp", "_commit_snapshot_id")]
    got = written.select(columns)
    got = got.append_column("_commit_snapshot_id", written["_commit_snapshot_id"].cast(pa.int64()))
    want = expected.select([*columns, "_commit_snapshot_id"])
    got = got.cast(want.schema)  # Spark's Parquet timestamps carry no zone; values are UTC
    got_rows, want_rows = row_multiset(got), row_multiset(want)
    assert got_rows == want_rows, (list((got_rows - want_rows).elements())[:3],
                                   list((want_rows - got_rows).elements())[:3], got.schema)
    assert expected.num_rows > 0


@pytest.mark.parametrize("name", ["sqlite-mirror.toml", "postgres-mirror.toml"])
def test_example_mirror_configs_name_a_mirror(name):
    config = load_config(DEPLOY / "examples" / name)
    assert {p.sink.type for p in config.pipelines} <= {"sqlite", "postgres"}
