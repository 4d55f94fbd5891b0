"""Fixtures of the sink tests: a database per test, once per dialect (PostgreSQL's server
is the session's, from tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def sqlite_database(tmp_path) -> str:
    return f"sqlite://{tmp_path / 'mirror.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request) -> str:
    """The URL of an empty database, once per dialect. PostgreSQL's is got at run time, out
    of sight of tests/conftest.py's marking by fixture, so its param carries the mark."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_database")
    return request.getfixturevalue("pg_database")
