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

from service_tests.harness import tree


def run_serve(config: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "meltwater.cli.main", "serve", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=timeout)


def write(path: Path, *, table: str, checkpoint: Path | str, sink: str, options: str = "",
          http: str = "off", catalogs: str = "") -> Path:
    path.write_text(f"""
[service]
http = "{http}"
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


def test_a_start_option_is_not_checked_once_the_checkpoint_has_run(tmp_path, corpus):
    """A pipeline resuming from its checkpoint does not read its start options again: a start
    snapshot expired since is no reason to refuse it."""
    checkpoint = tmp_path / "chk"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n")
    config = write(tmp_path / "svc.toml", table=corpus.scenarios["equality_deletes"].location,
                   checkpoint=checkpoint, options='start-snapshot-id = "12345"',
                   sink=f'type = "sqlite"\nurl = "sqlite:///{tmp_path}/m.db"')
    result = run_serve(config, "--check")
    assert result.returncode == 0, result.stderr


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
