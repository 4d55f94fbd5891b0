"""The mirror's SQLite database: stdlib `sqlite3`, one connection, explicit transactions.

The connection runs in autocommit mode and each `transaction()` is `BEGIN IMMEDIATE` ...
`COMMIT`: IMMEDIATE takes the write lock up front, so two processes applying batches to
one file queue up instead of failing half-way with "database is locked". File databases
use WAL journaling, so readers of the mirror never block the writer (and vice versa).
Rows are bound with `executemany` over a lazy iterator of tuples, so a batch is never
copied into Python rows all at once beyond its column lists.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from meltwater.sinks.errors import SinkError, SinkUnavailableError
from meltwater.sinks.sql_schema import Column, Dialect, quote, quote_table
from meltwater.sinks.sql_values import sqlite_values

BUSY_TIMEOUT_S = 60.0
# SQLite's generic "SQL error" (e.g. DDL a view forbids): not worth retrying, unlike a busy
# or locked database, which sqlite3 reports as the same OperationalError class.
SQLITE_ERROR = 1


class SqliteDatabase:
    """A `Database` on a SQLite file (or `:memory:`)."""

    dialect: Dialect = "sqlite"
    param = "?"

    def __init__(self, path: str, *, connection: sqlite3.Connection | None = None) -> None:
        self.path = path
        if connection is not None:
            self._conn = connection
            return
        try:
            self._conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                         check_same_thread=False)
            if path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as e:
            raise SinkUnavailableError(f"cannot open SQLite database {path}: {e}") from e

    @classmethod
    def copy_of(cls, path: str) -> SqliteDatabase:
        """An in-memory copy of the database at `path` (SQLite's online backup, so a live
        writer's WAL is included), or an empty one when there is no file yet and its
        folder could hold one. Named `path` in messages; the file is never written."""
        memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        if path == ":memory:":
            return cls(path, connection=memory)
        file = Path(path)
        if not file.exists():
            folder = file.parent
            if not folder.is_dir():
                problem = "is not a directory" if folder.exists() else "does not exist"
                raise SinkUnavailableError(f"cannot create SQLite database {path}: {folder} "
                                           f"{problem}")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise SinkUnavailableError(f"cannot create SQLite database {path}: {folder} "
                                           "is not writable")
            return cls(path, connection=memory)
        try:
            source = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True,
                                     timeout=BUSY_TIMEOUT_S)
            try:
                source.backup(memory)
            finally:
                source.close()
        except sqlite3.Error as e:
            raise SinkUnavailableError(f"cannot read SQLite database {path}: {e}") from e
        return cls(path, connection=memory)

    def setup_transaction(self) -> AbstractContextManager[None]:
        """`transaction()`: BEGIN IMMEDIATE already lets one writer at a time in."""
        return self.transaction()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything inside commits together (BEGIN IMMEDIATE: one writer at a time), or rolls
        back if an exception escapes."""
        with self._errors():
            self._conn.execute("BEGIN IMMEDIATE")
        try:
            with self._errors():
                yield
                self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorcode", None) == SQLITE_ERROR:  # a refused statement
                raise SinkError(f"SQLite database {self.path} refused: {e}") from e
            raise SinkUnavailableError(f"SQLite database {self.path}: {e}") from e
        except sqlite3.Error as e:
            raise SinkError(f"SQLite database {self.path} refused: {e}") from e

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one statement; the rows it returns, if any."""
        with self._errors():
            return self._conn.execute(sql, params).fetchall()

    def _info(self, table: str) -> list[tuple]:
        schema, _, name = table.rpartition(".")
        prefix = f"{quote(schema)}." if schema else ""
        return self.execute(f"PRAGMA {prefix}table_info({quote(name)})")

    def table_columns(self, table: str) -> dict[str, str] | None:
        """The table's columns in order, name -> declared SQL type; None if it is absent."""
        info = self._info(table)
        return {row[1]: row[2] for row in info} if info else None

    def primary_key(self, table: str) -> set[str]:
        """The names of the table's primary key columns."""
        return {row[1] for row in self._info(table) if row[5]}

    def upsert(self, table: str, columns: Sequence[Column], keys: Sequence[str],
               rows: pa.Table) -> int:
        """Insert rows, replacing those whose keys exist; the count."""
        names = [quote(c.name) for c in columns]
        others = [quote(c.name) for c in columns if c.name not in keys]
        action = ("DO UPDATE SET " + ", ".join(f"{n} = excluded.{n}" for n in others)
                  if others else "DO NOTHING")
        sql = (f"INSERT INTO {quote_table(table)} ({', '.join(names)}) "
               f"VALUES ({', '.join('?' for _ in names)}) "
               f"ON CONFLICT ({', '.join(quote(k) for k in keys)}) {action}")
        values = [sqlite_values(rows.column(c.name).combine_chunks(), c) for c in columns]
        with self._errors():
            self._conn.executemany(sql, zip(*values, strict=True))
        return rows.num_rows

    def delete(self, table: str, keys: Sequence[Column], rows: pa.Table) -> int:
        """Delete the rows with the given keys; how many the table held."""
        where = " AND ".join(f"{quote(k.name)} = ?" for k in keys)
        values = [sqlite_values(rows.column(k.name).combine_chunks(), k) for k in keys]
        with self._errors():
            cursor = self._conn.executemany(f"DELETE FROM {quote_table(table)} WHERE {where}",
                                            zip(*values, strict=True))
            return cursor.rowcount

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
