"""`meltwater serve --check`: everything that can be known without running is checked, each
problem one line naming the key (exit 2), and nothing is created or changed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback_ports import free_port

from meltwater.service.checkpoints import CheckpointLock
from meltwater.service.checkpoints import holder as holder_of
from service_tests.harness import tree


def run_serve(config: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "meltwater.cli.main", "serve", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=timeout)


def write(path: Path, *, table: str, checkpoint: Path | str, sink: str, options: str = "",
          http: str = "off", catalogs: str = "", spark: str = "") -> Path:
    path.write_text(f"""
[service]
http = "{http}"
{spark}
{catalogs}
[[pipelines]]
name = "orders"
table = "{table}"
checkpoint = "{checkpoint}"
[pipelines.options]
{options}
[pipelines.sink]
{sink}
""")
    return path


def test_check_changes_nothing(tmp_path, corpus):
    """A mirror, an archive and their checkpoints: all checked, none of them created (no
    SQLite file, mirror table, ledger or checkpoint directory)."""
    table = corpus.scenarios["equality_deletes"].location
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "svc.toml"
    config.write_text(f"""
[service]
http = "127.0.0.1:{free_port()}"
[[pipelines]]
name = "mirror"
table = "{table}"
checkpoint = "{work}/chk/mirror"
[pipelines.options]
start-snapshot-id = "{corpus.scenarios["equality_deletes"].snapshots[2].snapshot_id}"
[pipelines.sink]
type = "sqlite"
url = "sqlite:///{work}/mirror.db"
[[pipelines]]
name = "archive"
table = "{table}"
checkpoint = "file://{work}/chk/archive"
trigger = "available-now"
[pipelines.sink]
type = "parquet"
path = "{work}/archive"
""")
    before = tree(tmp_path)
    result = run_serve(config, "--check")
    assert result.returncode == 0, result.stderr
    assert "ok (2 pipelines: mirror, archive)" in result.stdout
    assert tree(tmp_path) == before


@pytest.fixture
def cases(tmp_path, corpus):
    """(name, config, the key and problem its one line must name) of configs --check refuses."""
    table = corpus.scenarios["equality_deletes"].location
    sqlite = f'type = "sqlite"\nurl = "sqlite:///{tmp_path}/m.db"'
    regular = tmp_path / "a-file"
    regular.write_text("not a directory")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    made = [
        ("port-in-use", dict(http=f"127.0.0.1:{port}"),
         f"service.http: cannot listen on 127.0.0.1:{port} (Address already in use)"),
        ("bad-host", dict(http="no-such-host.invalid:9464"),
         "service.http: cannot listen on no-such-host.invalid:9464 ("),
        ("checkpoint-under-a-file", dict(checkpoint=regular / "chk"),
         f"pipelines[0].checkpoint: cannot create {regular}/chk: {regular} is a file"),
        ("checkpoint-uri-under-a-file", dict(checkpoint=f"file://{regular}/chk"),
         f"pipelines[0].checkpoint: cannot create {regular}/chk: {regular} is a file"),
        ("unknown-start-snapshot", dict(options='start-snapshot-id = "12345"'),
         f"pipelines[0].options: start-snapshot-id 12345 is not a snapshot of table {table}"),
        ("misspelled-option", dict(options='streaming-max-file-per-micro-batch = 10'),
         "pipelines[0].options.streaming-max-file-per-micro-batch: option "
         "streaming-max-file-per-micro-batch is not an option of the meltwater stream (did "
         "you mean 'streaming-max-files-per-micro-batch'?)"),
        ("relative-sqlite", dict(sink='type = "sqlite"\nurl = "sqlite:///relative.db"'),
         "pipelines[0].sink: sqlite:///relative.db: names /relative.db in the root directory"),
        ("postgres-password", dict(sink='type = "postgres"\nurl = '
                                        '"postgresql://app:s3cr3t@127.0.0.1:1/db"'),
         "pipelines[0].sink: cannot connect to postgresql://app:***@127.0.0.1:1/db"),
        ("mirror-without-key", dict(table=corpus.scenarios["cow_partitioned"].location),
         f"pipelines[0].sink.key: table {corpus.scenarios['cow_partitioned'].location} has no "
         "identifier fields and no key columns were given: set key = [\"<column>\", ...] in "
         "the pipeline's sink"),
        ("catalog-password", dict(table="lake.db.orders", catalogs=(
            '[catalogs.lake]\ntype = "sql"\nuri = "postgresql://app:s3cr3t@127.0.0.1:1/cat"')),
         "pipelines[0].table: table lake.db.orders: catalog 'lake' at "
         "postgresql://app:***@127.0.0.1:1/cat"),
    ]
    configs = []
    for name, given, expected in made:
        settings = {"table": table, "checkpoint": tmp_path / "chk", "sink": sqlite, **given}
        configs.append((name, write(tmp_path / f"{name}.toml", **settings), expected))
    try:
        yield configs
    finally:
        taken.close()


def test_check_refuses_what_would_fail_later(cases):
    for name, config, expected in cases:
        result = run_serve(config, "--check")
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        assert len(lines) == 1 and expected in lines[0], (name, result.stderr)
        assert "s3cr3t" not in result.stderr
        assert "Traceback" not in result.stderr
        assert "key_columns" not in result.stderr  # the Python API's name, not the TOML key


def test_a_start_option_is_not_checked_once_the_checkpoint_has_run(tmp_path, corpus):
    """A pipeline resuming from its checkpoint does not read its start options again: a start
    snapshot expired since is no reason to refuse it. Until a query has run from the
    checkpoint (Spark's `offsets/<N>`), the same option is checked and refused."""
    checkpoint = tmp_path / "chk"
    (checkpoint / "offsets").mkdir(parents=True)
    config = write(tmp_path / "svc.toml", table=corpus.scenarios["equality_deletes"].location,
                   checkpoint=checkpoint, options='start-snapshot-id = "12345"',
                   sink=f'type = "sqlite"\nurl = "sqlite:///{tmp_path}/m.db"')
    fresh = run_serve(config, "--check")
    assert fresh.returncode == 2, fresh.stderr
    assert "pipelines[0].options: start-snapshot-id 12345 is not a snapshot" in fresh.stderr
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n")
    before = tree(tmp_path)
    resumed = run_serve(config, "--check")
    assert resumed.returncode == 0, resumed.stderr
    assert (resumed.stdout, resumed.stderr) == (f"{config}: ok (1 pipeline: orders)\n", "")
    assert tree(tmp_path) == before  # --check changed nothing


def test_a_status_server_beyond_loopback_is_warned_of(tmp_path, corpus):
    port = free_port()
    config = write(tmp_path / "svc.toml", table=corpus.scenarios["equality_deletes"].location,
                   checkpoint=tmp_path / "chk", http=f"0.0.0.0:{port}",
                   sink=f'type = "sqlite"\nurl = "sqlite:///{tmp_path}/m.db"')
    result = run_serve(config, "--check")
    assert result.returncode == 0, result.stderr
    assert (f"meltwater: warning: {config}: service.http: the status server listens on "
            f"0.0.0.0:{port}, which other machines can reach") in result.stderr


def test_serve_with_its_port_taken_says_so_in_one_line(tmp_path, corpus):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write(tmp_path / "svc.toml",
                       table=corpus.scenarios["equality_deletes"].location,
                       checkpoint=tmp_path / "chk", http=f"127.0.0.1:{port}",
                       sink=f'type = "sqlite"\nurl = "sqlite:///{tmp_path}/m.db"')
        started = time.monotonic()
        result = run_serve(config)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"meltwater: {config}: service.http: cannot listen on 127.0.0.1:{port} "
        "(Address already in use)"]
    assert time.monotonic() - started < 30, "did it start Spark first?"
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "chk").exists()
    assert os.listdir(tmp_path) == ["svc.toml"]


HOLD = """\
import sys
from pathlib import Path
from meltwater.service.checkpoints import CheckpointLock
CheckpointLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
sys.stdin.read()
"""


def test_a_held_checkpoint_is_warned_of_by_check_and_refused_by_serve(tmp_path, corpus):
    """A checkpoint whose lock another process holds: `--check` says so and changes nothing,
    `serve` refuses at once in one line naming it and the holder's pid (before Spark), and
    once the holder is killed with SIGKILL the lock is free again."""
    checkpoint = tmp_path / "chk"
    with subprocess.Popen([sys.executable, "-c", HOLD, str(checkpoint)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder:
        try:
            _refused_while_held(tmp_path, corpus, checkpoint, holder.pid, holder.stdout)
        finally:
            holder.kill()
            holder.wait(timeout=30)
    assert holder_of(checkpoint) is None  # the kernel let go of it with the process
    lock = CheckpointLock(checkpoint).acquire()
    assert (checkpoint / "meltwater.lock").read_text() == f"{os.getpid()}\n"
    lock.release()


def _refused_while_held(tmp_path: Path, corpus, checkpoint: Path, pid: int, stdout) -> None:
    """`--check` warns, `serve` refuses, while process `pid` holds the lock."""
    assert stdout.readline() == "held\n"
    config = write(tmp_path / "svc.toml",
                   table=corpus.scenarios["equality_deletes"].location,
                   checkpoint=checkpoint, sink=f'type = "sqlite"\nurl = '
                                               f'"sqlite:///{tmp_path}/m.db"',
                   spark='[spark]\nmaster = "local[1]"')
    held = (f"pipelines[0].checkpoint: checkpoint {checkpoint} is held by another "
            f"meltwater serve (pid {pid}): two services on one checkpoint would "
            "both write its offsets and its sink")
    before = tree(tmp_path)
    result = run_serve(config, "--check")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"meltwater: warning: {config}: {held}"), result.stderr
    assert tree(tmp_path) == before
    result = run_serve(config)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"meltwater: {config}: {held}"), lines
    assert tree(tmp_path) == before and not (tmp_path / "m.db").exists()


def test_serve_without_a_master_outside_spark_submit_says_so_in_one_line(tmp_path, corpus):
    """No [spark] master and no spark-submit above it: pyspark would start local[*] with
    workers running whatever `python3` is on PATH, each query failing to create its source
    and retried forever. Refused at start instead, before Spark; `--check` passes (the
    configuration may be meant for spark-submit)."""
    config = write(tmp_path / "svc.toml", table=corpus.scenarios["equality_deletes"].location,
                   checkpoint=tmp_path / "chk",
                   sink=f'type = "sqlite"\nurl = "sqlite:///{tmp_path}/m.db"')
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_GATEWAY_PORT",
                                                            "PYSPARK_PYTHON")}
    assert subprocess.run([sys.executable, "-m", "meltwater.cli.main", "serve", "--config",
                           str(config), "--check"], capture_output=True, text=True,
                          timeout=60, env=env).returncode == 0
    result = subprocess.run([sys.executable, "-m", "meltwater.cli.main", "serve", "--config",
                             str(config)], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"meltwater: {config}: spark.master: not set, and the service is not running under "
        "spark-submit (which would set it): set [spark] master = \"local[2]\", or start it "
        "with spark-submit (deploy/spark)"]
    assert os.listdir(tmp_path) == ["svc.toml"]


def test_a_jvm_that_cannot_start_is_one_line_naming_its_reason(tmp_path, corpus):
    """A setting the JVM refuses: Spark's JVM exits at once; the service says why in one line
    (the JVM's own words, not its boilerplate) and where the rest is, exit 2."""
    config = write(tmp_path / "svc.toml", table=corpus.scenarios["equality_deletes"].location,
                   checkpoint=tmp_path / "chk", sink='type = "console"',
                   spark='[spark]\nmaster = "local[1]"\n[spark.conf]\n'
                         '"spark.driver.memory" = "lots"')
    result = run_serve(config)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "meltwater: Spark's JVM exited while starting: Invalid maximum heap size: -Xmxlots "
        f"(its output: {tmp_path / 'chk' / 'spark.log'})")
    assert "Traceback" not in result.stderr


def test_a_pattern_s_sink_is_checked_against_a_table_it_names(tmp_path):
    """`tables = "local.db.*"`: --check expands the template for the first table the pattern
    names and checks that pipeline as any other (here an Avro topic with no schema
    registry, which every table's pipeline would fail on); a pattern naming no table yet
    passes, and one whose catalog cannot be listed is refused, naming `tables`."""
    from pyiceberg.catalog import load_catalog

    from corpus.pyiceberg_writer import write_history

    root = tmp_path / "warehouse"
    root.mkdir()
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
               "warehouse": root.as_uri()}
    write_history(load_catalog("local", **catalog), ("db", "orders"))

    def config(name: str, tables: str, sink: str, uri: str = catalog["uri"]) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(f"""
[service]
http = "off"
[catalogs.local]
type = "sql"
uri = "{uri}"
warehouse = "{catalog['warehouse']}"
[[pipelines]]
name = "db"
tables = "{tables}"
checkpoint = "{tmp_path}/chk"
[pipelines.sink]
{sink}
""")
        return path

    avro = ('type = "kafka"\nbootstrap-servers = "127.0.0.1:1"\ntopic = "lake.{table}"\n'
            'format = "avro"')
    refused = run_serve(config("avro", "local.db.*", avro), "--check")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "pipelines[0] (table local.db.orders).sink: " in lines[0] \
        and "schema-registry-url" in lines[0], refused.stderr

    sqlite = f'type = "sqlite"\nurl = "sqlite:///{tmp_path}/m.db"\ntable = "{{table}}"'
    for tables in ("local.db.*", "local.db.none_yet_*"):
        passed = run_serve(config("sqlite", tables, sqlite), "--check")
        assert passed.returncode == 0, passed.stderr
        assert f"ok (1 pipeline: db (tables {tables}))" in passed.stdout
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "chk").exists()

    unlisted = run_serve(config("down", "local.db.*", sqlite,
                                uri=f"sqlite:///{tmp_path}/no/such/dir/catalog.db"), "--check")
    assert unlisted.returncode == 2, unlisted.stdout + unlisted.stderr
    assert unlisted.stderr.count("\n") == 1 and "pipelines[0].tables: " in unlisted.stderr, \
        unlisted.stderr
