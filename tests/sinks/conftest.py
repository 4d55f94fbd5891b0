"""Fixtures of the sink tests: a PostgreSQL server for the session, a database per test.

PostgreSQL is mandatory like the corpus: without its server binaries the tests that need it
fail, saying `make sysdeps` installs them; they never skip.
"""

from __future__ import annotations

import itertools

import pytest
from pg_server import PostgresServer, PostgresUnavailable, create_database

_numbers = itertools.count()


@pytest.fixture(scope="session")
def postgres_url():
    """The URL of a PostgreSQL server started for this test session (stopped at its end)."""
    server = PostgresServer()
    try:
        url = server.start()
    except PostgresUnavailable as error:
        server.stop()
        pytest.fail(f"PostgreSQL is unavailable: {error}", pytrace=False)
    yield url
    server.stop()


@pytest.fixture
def pg_database(postgres_url) -> str:
    """A fresh, empty database on the session's server, for one test."""
    return create_database(postgres_url, f"t{next(_numbers)}")


@pytest.fixture
def sqlite_database(tmp_path) -> str:
    return f"sqlite://{tmp_path / 'mirror.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request) -> str:
    """The URL of an empty database, once per dialect."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_database")
    return request.getfixturevalue("pg_database")
