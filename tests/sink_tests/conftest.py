"""Fixtures of the sink tests: a database per test, once per dialect (PostgreSQL's server
is the session's, from tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def sqlite_database(tmp_path) -> str:
    return f"sqlite://{tmp_path / 'mirror.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request) -> str:
    """The URL of an empty database, once per dialect."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_database")
    return request.getfixturevalue("pg_database")
