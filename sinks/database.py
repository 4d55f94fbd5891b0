"""A SQL database by URL, behind the few operations a mirror needs.

    sqlite:///var/lib/meltwater/orders.db     an absolute path (sqlite:////abs works too;
                                              sqlite:///name.db is refused as ambiguous)
    sqlite:///:memory:                        a private in-memory database
    postgresql://user@host:5432/db            anything libpq takes (postgres:// as well)

`connect(url)` opens one connection. Each dialect module (`sqlite_database`,
`postgres_database`) does the bulk work its way: SQLite binds rows with `executemany`,
PostgreSQL COPYs CSV into a temp table and merges from there. Every statement of a
mirror's batch runs inside one `transaction()`, so a batch applies whole or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from meltwater.sinks.base import redact_url
from meltwater.sinks.errors import InvalidSinkUrlError
from meltwater.sinks.sql_schema import Column, Dialect

SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgresql", "postgres")


class Database(Protocol):
    """One connection to a mirror's database."""

    dialect: Dialect
    param: str  # the bind parameter marker: "?" or "%s"

    def transaction(self) -> AbstractContextManager[None]:
        """Everything inside commits together, or rolls back if an exception escapes."""
        ...

    def setup_transaction(self) -> AbstractContextManager[None]:
        """A transaction in which one mirror at a time creates tables in this database:
        mirrors of several pipelines share `meltwater_ledger` and `meltwater_columns`, and
        two `CREATE TABLE IF NOT EXISTS` of one table at once can fail on PostgreSQL."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one statement; the rows it returns, if any."""
        ...

    def table_columns(self, table: str) -> dict[str, str] | None:
        """The table's columns in order, name -> declared SQL type; None if it is absent."""
        ...

    def primary_key(self, table: str) -> set[str]:
        """The names of the table's primary key columns."""
        ...

    def upsert(self, table: str, columns: Sequence[Column], keys: Sequence[str],
               rows: pa.Table) -> int:
        """Insert rows (named by `columns`), replacing those whose keys exist; the count."""
        ...

    def delete(self, table: str, keys: Sequence[Column], rows: pa.Table) -> int:
        """Delete the rows with the given keys; how many the table held."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


def connect(url: str, *, dry_run: bool = False) -> Database:
    """Open the database a sink URL names (see the module doc for the forms).

    `dry_run`: whatever is done through the connection is undone, and nothing is created:
    SQLite works on an in-memory copy of the file (empty when there is none yet, after
    checking its folder could hold one), PostgreSQL in one transaction rolled back at
    `close()`. What opening a sink checks can so be checked without changing anything
    (`meltwater serve --check`)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in SQLITE_SCHEMES:
        from meltwater.sinks.sqlite_database import SqliteDatabase

        path = sqlite_path(url)
        return SqliteDatabase.copy_of(path) if dry_run else SqliteDatabase(path)
    if scheme in POSTGRES_SCHEMES:
        from meltwater.sinks.postgres_database import PostgresDatabase

        return PostgresDatabase(postgres_conninfo(url), dry_run=dry_run)
    raise InvalidSinkUrlError(f"{redact_url(url)} is not a database URL (use sqlite:///abs/path.db "
                         "or postgresql://user@host:port/db)")


def sqlite_path(url: str) -> str:
    """The file path of a sqlite URL: its path, absolute; `:memory:` for memory."""
    parts = urlsplit(url)
    if parts.netloc:
        raise InvalidSinkUrlError(f"{url}: a sqlite URL has no host; write sqlite:///abs/path.db")
    if parts.query or parts.fragment:
        raise InvalidSinkUrlError(f"{url}: a sqlite URL takes no query or fragment")
    path = unquote(parts.path)
    if path in ("/:memory:", ":memory:"):
        return ":memory:"
    if path.startswith("//"):  # sqlite:////abs/path.db, SQLAlchemy's absolute form
        path = path[1:]
    elif path.count("/") == 1 and len(path) > 1:
        # sqlite:///name.db: SQLAlchemy and most tools read a path relative to the working
        # directory; read as absolute it is a file in the root directory. Neither is taken.
        raise InvalidSinkUrlError(
            f"{url}: names {path} in the root directory, where other tools read "
            f"{path[1:]} relative to the working directory; give the file's absolute path, "
            f"e.g. sqlite:////var/lib/meltwater/{path[1:]} (sqlite:///{path} for the root)")
    if not path.startswith("/") or path.endswith("/"):
        raise InvalidSinkUrlError(f"{url}: a sqlite URL names a database file by absolute path, "
                             "e.g. sqlite:///var/lib/meltwater/orders.db")
    return path


def postgres_conninfo(url: str) -> str:
    """The URL itself once checked (libpq parses it); `postgresql://` for `postgres://`."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as e:
        raise InvalidSinkUrlError(f"{redact_url(url)}: {e}") from None
    if "/" in parts.path.strip("/"):
        raise InvalidSinkUrlError(f"{redact_url(url)}: the path must be one database name")
    return url
