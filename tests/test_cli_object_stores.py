"""Object stores that cannot be reached, or will not say who we are: every scheme meltwater
reads ends in one line naming the file, exit status 2, within its storage timeout.

The stores are loopback ports: one bound but not listening (every connection refused) and
one listening that never accepts or answers (connections complete and then wait forever,
as behind a dropped route). The environment points each client there: S3's endpoint,
Google's metadata server (where its default credentials come from), Azure's managed
identity endpoint. Before, `abfs://` without credentials was a pyarrow traceback, `gs://`
and a silent S3 or Azure identity endpoint held the command for minutes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

MELTWATER = str(Path(sys.executable).parent / "meltwater")
TIMEOUT_S = 2  # MELTWATER_STORAGE_TIMEOUT for these runs
# Whatever points a client elsewhere, and credentials, are set by each case alone.
_CLIENT_VARIABLES = ("AWS_", "AZURE_", "GOOGLE_", "GCE_", "IDENTITY_", "MSI_", "IMDS_",
                     "STORAGE_EMULATOR_HOST", "CLOUDSDK_", "MELTWATER_STORAGE_TIMEOUT")


@pytest.fixture(scope="module")
def ports() -> Iterator[dict[str, int]]:
    """`refused`: bound, not listening; `silent`: listening, never accepting."""
    refusing, silent = socket.socket(), socket.socket()
    refusing.bind(("127.0.0.1", 0))
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        yield {"refused": refusing.getsockname()[1], "silent": silent.getsockname()[1]}
    finally:
        refusing.close()
        silent.close()


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLIENT_VARIABLES)}
    return {**env, "MELTWATER_STORAGE_TIMEOUT": str(TIMEOUT_S), **extra}


def _cases(ports: dict[str, int]) -> dict[str, tuple[str, dict[str, str], str]]:
    """name -> (table location, environment, what the line says after the file)."""
    refused, silent = (f"127.0.0.1:{ports[k]}" for k in ("refused", "silent"))
    s3 = {"AWS_ACCESS_KEY_ID": "meltwater", "AWS_SECRET_ACCESS_KEY": "meltwater",
          "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    no_answer = f"the storage endpoint did not answer within {TIMEOUT_S} s"
    no_credentials = "no credentials for the storage could be obtained"
    azure = "c@account.dfs.core.windows.net/db/orders"
    return {
        # refused: the client's retries may outlast the timeout; either way, one line
        "s3 refused": ("s3://bucket/db/orders", {**s3, "AWS_ENDPOINT_URL": f"http://{refused}"},
                       "the storage endpoint"),
        "s3 silent": ("s3://bucket/db/orders", {**s3, "AWS_ENDPOINT_URL": f"http://{silent}"},
                      no_answer),
        "gs refused": ("gs://bucket/db/orders", {"GCE_METADATA_ROOT": refused}, ""),
        "gs silent": ("gs://bucket/db/orders", {"GCE_METADATA_ROOT": silent}, no_answer),
        # no Azure credentials at all (the managed identity probe fails at once off Azure):
        # a longer timeout, so that the credential chain's own answer comes first
        "abfs without credentials": (f"abfs://{azure}", {"MELTWATER_STORAGE_TIMEOUT": "30"},
                                     no_credentials),
        "abfss without credentials": (f"abfss://{azure}", {"MELTWATER_STORAGE_TIMEOUT": "30"},
                                      no_credentials),
        "abfs identity refused": (f"abfs://{azure}", {
            "IDENTITY_ENDPOINT": f"http://{refused}/token", "IDENTITY_HEADER": "x"}, ""),
        "abfss identity silent": (f"abfss://{azure}", {
            "IDENTITY_ENDPOINT": f"http://{silent}/token", "IDENTITY_HEADER": "x"}, no_answer),
        # without Hadoop's native client (as here) that is the line; with it, the name node
        "hdfs refused": (f"hdfs://{refused}/db/orders", {}, ""),
        "http": (f"http://{silent}/db/orders", {}, "meltwater does not read http:// locations"),
        "https": (f"https://{silent}/db/orders", {},
                  "meltwater does not read https:// locations"),
    }


def test_unreachable_and_unauthenticated_stores_are_one_line_within_the_timeout(ports):
    cases = _cases(ports)
    running = {name: subprocess.Popen([MELTWATER, "scan", location],
                                      env=_environment(env), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
               for name, (location, env, _) in cases.items()}
    try:
        # all at once, each bounded by TIMEOUT_S: a generous deadline for a loaded machine
        ended = {name: process.communicate(timeout=60) for name, process in running.items()}
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    for name, (location, _, problem) in cases.items():
        stdout, stderr = ended[name]
        lines = stderr.splitlines()
        assert running[name].returncode == 2 and stdout == "", (name, stderr)
        assert len(lines) == 1, (name, stderr)
        assert lines[0].startswith(f"meltwater: {location}/metadata/"), (name, lines[0])
        assert problem in lines[0], (name, lines[0])


def test_a_malformed_storage_timeout_is_one_line():
    result = subprocess.run([MELTWATER, "scan", "s3://bucket/db/orders"],
                            env={**_environment({}), "MELTWATER_STORAGE_TIMEOUT": "soon"},
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (
        2, "meltwater: MELTWATER_STORAGE_TIMEOUT='soon': expected seconds, e.g. 30\n")
