"""Fixtures for tests on an object store and in catalogs: SeaweedFS (S3 + Iceberg REST),
pyiceberg catalogs on it (REST, SQL on SQLite and PostgreSQL, Glue through moto), and the
AWS_* environment meltwater reads s3:// with.

Not wired into conftest.py yet; a test module imports what it uses:

    from object_store_fixtures import rest_catalog, seaweed  # noqa: F401

Like the corpus and PostgreSQL, the servers are mandatory: when one cannot start, the tests
that need it fail saying why; they never skip.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from seaweed_server import SeaweedServer, SeaweedUnavailable

_names = itertools.count()


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedServer]:
    """One SeaweedFS for the test session, on loopback, deleted at its end."""
    server = SeaweedServer()
    try:
        server.start()
    except SeaweedUnavailable as error:
        server.stop()
        pytest.fail(f"SeaweedFS is unavailable: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seaweed_vending() -> Iterator[SeaweedServer]:
    """A second SeaweedFS whose catalog vends table-scoped keys lasting 900 s (the minimum)."""
    server = SeaweedServer(vended_credentials_seconds=900)
    try:
        server.start()
    except SeaweedUnavailable as error:
        server.stop()
        pytest.fail(f"SeaweedFS is unavailable: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace name no other test of this session uses (tables share one server)."""
    return f"ns{next(_names)}"


@pytest.fixture
def rest_catalog(seaweed: SeaweedServer) -> Any:
    """A pyiceberg RestCatalog client on the session's SeaweedFS (OAuth2 client credentials)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("seaweed", **seaweed.catalog_properties())


@pytest.fixture
def sqlite_catalog(seaweed: SeaweedServer, tmp_path, namespace: str) -> Any:
    """pyiceberg's SqlCatalog on a SQLite file, its tables in SeaweedFS's plain bucket."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("sqlite", type="sql", uri=f"sqlite:///{tmp_path}/catalog.db",
                        warehouse=f"s3://warehouse/sqlite-{namespace}",
                        **seaweed.file_io_properties())


@pytest.fixture
def postgres_catalog(seaweed: SeaweedServer, pg_database: str, namespace: str) -> Any:
    """pyiceberg's SqlCatalog on the session's PostgreSQL (SQLAlchemy on psycopg 3)."""
    from pyiceberg.catalog import load_catalog

    uri = pg_database.replace("postgresql://", "postgresql+psycopg://", 1)
    return load_catalog("postgres", type="sql", uri=uri,
                        warehouse=f"s3://warehouse/pg-{namespace}",
                        **seaweed.file_io_properties())


@pytest.fixture(scope="session")
def moto_glue() -> Iterator[str]:
    """moto's server on a free loopback port, for its Glue API; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def glue_catalog(seaweed: SeaweedServer, moto_glue: str) -> Any:
    """pyiceberg's GlueCatalog on moto, its tables in SeaweedFS's plain bucket."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("glue", type="glue", warehouse="s3://warehouse/glue",
                        **{"glue.endpoint": moto_glue, "glue.region": "us-east-1",
                           "glue.access-key-id": "testing", "glue.secret-access-key": "testing"},
                        **seaweed.file_io_properties())


@pytest.fixture
def s3_env(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """AWS_* set for this test so pyarrow.fs, and so meltwater, reads s3:// from SeaweedFS."""
    env = seaweed.s3_env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
