"""Fixtures of the service tests: a PostgreSQL server for the session, a database per test."""

from __future__ import annotations

import itertools

import pytest
from pg_server import PostgresServer, PostgresUnavailable, create_database

_numbers = itertools.count()


@pytest.fixture(scope="session")
def service_postgres():
    """A PostgreSQL server for the service tests (never skipped: `make sysdeps` installs it)."""
    server = PostgresServer()
    try:
        url = server.start()
    except PostgresUnavailable as error:
        server.stop()
        pytest.fail(f"PostgreSQL is unavailable: {error}", pytrace=False)
    yield url
    server.stop()


@pytest.fixture
def mirror_db(service_postgres) -> str:
    """A fresh database on the session's server, for one test's mirrors."""
    return create_database(service_postgres, f"svc{next(_numbers)}")
