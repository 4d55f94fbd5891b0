"""Object stores that cannot be reached, or will not say who we are: every scheme meltwater
reads ends in one line naming the file, exit status 2, within its storage timeout.

The stores are loopback ports: one bound but not listening (every connection refused) and
one listening that never accepts or answers (connections complete and then wait forever,
as behind a dropped route). The environment points each client there: S3's endpoint,
Google's metadata server (where its default credentials come from), Azure's managed
identity endpoint. Before, `abfs://` without credentials was a pyarrow traceback, `gs://`
and a silent S3 or Azure identity endpoint held the command for minutes.

The same for GCS and Azure given by FileIO properties (what a catalog or the Spark source's
`io.*` options give the reader), through the API, whose errors are the CLI's lines: an
endpoint that refuses or never answers, a wrong Azure key (against Azurite), and property
values that cannot mean anything.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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


# -- the same stores given by FileIO properties (a catalog's, or the Spark source's io.*) ------

def _properties_cases(ports: dict[str, int]) -> dict[str, tuple[str, dict[str, str], str]]:
    """name -> (table location, FileIO properties, what the line says after the file)."""
    refused, silent = (f"127.0.0.1:{ports[k]}" for k in ("refused", "silent"))
    azure = "abfs://c@account.dfs.core.windows.net/db/orders"
    host = "account.dfs.core.windows.net"
    key = {"adls.auth.shared-key.account.name": "account",
           "adls.auth.shared-key.account.key": "a2V5"}
    no_answer = f"the storage endpoint did not answer within {TIMEOUT_S} s"
    return {
        "gs refused": ("gs://bucket/db/orders", {"gcs.service.host": f"http://{refused}",
                                                 "gcs.no-auth": "true"},
                       "the storage endpoint cannot be reached"),
        "gs silent": ("gs://bucket/db/orders", {"gcs.service.host": f"http://{silent}",
                                                "gcs.no-auth": "true"}, no_answer),
        # refused: the client's retries may outlast the timeout; either way, one line
        "abfs refused": (azure, {**key, f"adls.connection-string.{host}":
                                 f"http://{refused}/account"}, "the storage endpoint"),
        "abfs silent": (azure, {**key, f"adls.connection-string.{host}":
                                f"http://{silent}/account"}, no_answer),
        "abfs silent by connection string": (azure, {"adls.connection-string": (
            f"AccountName=account;AccountKey=a2V5;BlobEndpoint=http://{silent}/account")},
            no_answer),
    }


def test_stores_given_by_properties_that_do_not_answer_are_one_line(ports, monkeypatch):
    """Before, `gcs.service.host` with `gcs.no-auth` looked for Google's default
    credentials, and no Azure property of Iceberg Java's was read."""
    from meltwater.planner.errors import StorageError
    from meltwater.planner.table.fileio import PyArrowFileIO
    from meltwater.planner.table.table_loading import load_table

    monkeypatch.setenv("MELTWATER_STORAGE_TIMEOUT", str(TIMEOUT_S))
    cases = _properties_cases(ports)

    def error_of(location: str, properties: dict[str, str]) -> BaseException | None:
        try:
            load_table(location, PyArrowFileIO(properties))
        except BaseException as error:  # noqa: BLE001 - judged below
            return error
        return None

    with ThreadPoolExecutor(len(cases)) as pool:  # all at once, each bounded by TIMEOUT_S
        errors = dict(zip(cases, pool.map(lambda c: error_of(c[0], c[1]), cases.values()),
                          strict=True))
    for name, (location, _, problem) in cases.items():
        assert isinstance(errors[name], StorageError), (name, errors[name])
        line = str(errors[name])
        assert "\n" not in line and line.startswith(f"{location}/metadata/"), (name, line)
        assert problem in line, (name, line)


@pytest.mark.parametrize(("properties", "problem"), [
    ({"gcs.no-auth": "true", "gcs.oauth2.token": "t"},
     "gcs.no-auth=true and gcs.oauth2.token: give one or the other"),
    ({"gcs.no-auth": "yes"}, "gcs.no-auth='yes': expected true or false"),
    ({"gcs.service.host": "127.0.0.1:4443"},
     "gcs.service.host='127.0.0.1:4443': expected an http:// or https:// URL"),
    ({"gcs.oauth2.token": "t", "gcs.oauth2.token-expires-at": "tomorrow"},
     "gcs.oauth2.token-expires-at='tomorrow': expected milliseconds since the epoch"),
])
def test_gcs_properties_that_cannot_mean_anything_are_one_line(properties, problem):
    from meltwater.planner.errors import StorageError
    from meltwater.planner.table.fileio import PyArrowFileIO

    with pytest.raises(StorageError) as raised:
        PyArrowFileIO(properties).exists("gs://bucket/db/orders/metadata/version-hint.text")
    assert str(raised.value) == f"gs://bucket/db/orders/metadata/version-hint.text: {problem}"


@pytest.mark.parametrize(("properties", "problem"), [
    ({"adls.connection-string.account.dfs.core.windows.net": "http://127.0.0.1:1/other"},
     "the endpoint's path must be the account name 'account'"),
    ({"adls.connection-string.account.dfs.core.windows.net": "https://elsewhere.example"},
     "the endpoint names neither account 'account' in its host"),
    ({"adls.client-id": "id", "adls.tenant-id": "tenant"},
     "a service principal needs all three (given: client_id, tenant_id)"),
    ({"adls.connection-string": "AccountName"}, "expected Key=value;... settings"),
])
def test_azure_properties_that_cannot_mean_anything_are_one_line(properties, problem):
    from meltwater.planner.errors import StorageError
    from meltwater.planner.table.fileio import PyArrowFileIO

    location = "abfs://c@account.dfs.core.windows.net/db/orders/metadata/version-hint.text"
    with pytest.raises(StorageError) as raised:
        PyArrowFileIO(properties).exists(location)
    line = str(raised.value)
    assert "\n" not in line and line.startswith(f"{location}: ") and problem in line, line


def test_a_wrong_azure_key_is_one_line_naming_the_credentials(azurite):
    """Against Azurite, which checks a shared key's signature; before, a traceback."""
    from meltwater.planner.errors import StorageError
    from meltwater.planner.table.fileio import PyArrowFileIO
    from meltwater.planner.table.table_loading import load_table

    host = f"{azurite.account}.dfs.core.windows.net"
    location = f"abfs://lake@{host}/db/orders"
    wrong = {**azurite.java_file_io_properties(host),
             "adls.auth.shared-key.account.key": "d3Jvbmc="}
    with pytest.raises(StorageError) as raised:
        load_table(location, PyArrowFileIO(wrong))
    line = str(raised.value)
    assert "\n" not in line and line.startswith(f"{location}/metadata/"), line
    assert "the credentials were rejected or have expired" in line, line
