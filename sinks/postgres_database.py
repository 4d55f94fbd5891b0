"""The mirror's PostgreSQL database: psycopg 3, one connection, COPY for bulk rows.

A batch's rows go in as CSV through `COPY ... FROM STDIN` into a temp table (`ON COMMIT
DROP`, so it vanishes with the transaction whatever happens), then one statement merges
them: `INSERT ... SELECT ... ON CONFLICT (key) DO UPDATE` for upserts, `DELETE ... USING`
for deletes. COPY is PostgreSQL's fast path for many rows; the CSV is written by
`pyarrow.csv` from text columns `sql_values.postgres_text` builds, in slices of
`COPY_SLICE_ROWS` rows, so no per-row Python runs for flat columns.

CSV quoting tells NULL (an unquoted empty field) from the empty string (a quoted one):
every non-null value is quoted.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

from meltwater.sinks.base import redact_url
from meltwater.sinks.errors import InvalidSinkUrlError, SinkError, SinkUnavailableError
from meltwater.sinks.sql_schema import Column, Dialect, quote, quote_table
from meltwater.sinks.sql_values import postgres_text

COPY_SLICE_ROWS = 65_536
_CSV = pacsv.WriteOptions(include_header=False, quoting_style="all_valid")
UPSERT_STAGE = "meltwater_upsert_stage"
DELETE_STAGE = "meltwater_delete_stage"
# The advisory lock key mirrors take while creating tables (the bytes of "meltwtr\0").
SETUP_LOCK = int.from_bytes(b"meltwtr\0", "big")


class PostgresDatabase:
    """A `Database` on a PostgreSQL server."""

    dialect: Dialect = "postgresql"
    param = "%s"

    def __init__(self, url: str, *, dry_run: bool = False) -> None:
        """`dry_run`: everything runs in one transaction, rolled back at `close()` (the
        `transaction()` blocks inside it are savepoints)."""
        self.where = redact_url(url)
        self.dry_run = dry_run
        self._outer: Any = None
        try:
            self._conn = psycopg.connect(url, autocommit=True)
            if dry_run:  # one transaction around everything, always rolled back
                self._outer = self._conn.transaction(force_rollback=True)
                self._outer.__enter__()
        except psycopg.ProgrammingError as e:
            raise InvalidSinkUrlError(f"{self.where}: {_first_line(e)}") from e
        except psycopg.Error as e:
            raise SinkUnavailableError(f"cannot connect to {self.where}: {_first_line(e)}") from e

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything inside commits together, or rolls back if an exception escapes."""
        with self._errors(), self._conn.transaction():
            yield

    @contextmanager
    def setup_transaction(self) -> Iterator[None]:
        """`transaction()` holding a transaction-level advisory lock (`SETUP_LOCK`) first:
        PostgreSQL's `CREATE TABLE IF NOT EXISTS` is not safe against a concurrent one (the
        second fails on `pg_type`'s unique index), so mirrors opening in one database at
        once create their tables one after another. The lock ends with the transaction."""
        with self.transaction():
            self.execute("SELECT pg_advisory_xact_lock(%s)", [SETUP_LOCK])
            yield

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except psycopg.OperationalError as e:
            raise SinkUnavailableError(f"PostgreSQL {self.where}: {_first_line(e)}") from e
        except psycopg.Error as e:
            raise SinkError(f"PostgreSQL {self.where} refused: {_first_line(e)}") from e

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one statement; the rows it returns, if any."""
        with self._errors(), self._conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def table_columns(self, table: str) -> dict[str, str] | None:
        """The table's columns in order, name -> declared SQL type; None if it is absent."""
        found = self.execute("SELECT to_regclass(%s)::oid", [quote_table(table)])
        if found[0][0] is None:
            return None
        rows = self.execute("SELECT attname, format_type(atttypid, atttypmod) "
                            "FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                            "AND NOT attisdropped ORDER BY attnum", [found[0][0]])
        return {name: type_ for name, type_ in rows}

    def primary_key(self, table: str) -> set[str]:
        """The names of the table's primary key columns."""
        rows = self.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary", [quote_table(table)])
        return {r[0] for r in rows}

    def _stage(self, stage: str, table: str, columns: Sequence[Column], rows: pa.Table) -> None:
        """A temp table shaped like `columns` of `table`, filled with `rows` by COPY."""
        names = ", ".join(quote(c.name) for c in columns)
        self.execute(f"CREATE TEMP TABLE {stage} ON COMMIT DROP AS "
                     f"SELECT {names} FROM {quote_table(table)} WITH NO DATA")
        text = pa.table([postgres_text(rows.column(c.name).combine_chunks(), c)
                         for c in columns], names=[c.name for c in columns])
        with self._errors(), self._conn.cursor() as cursor, cursor.copy(
                f"COPY {stage} ({names}) FROM STDIN (FORMAT csv)") as copy:
            for start in range(0, text.num_rows, COPY_SLICE_ROWS):
                buffer = io.BytesIO()
                pacsv.write_csv(text.slice(start, COPY_SLICE_ROWS), buffer, _CSV)
                copy.write(buffer.getvalue())

    def upsert(self, table: str, columns: Sequence[Column], keys: Sequence[str],
               rows: pa.Table) -> int:
        """Insert rows through a COPY-loaded stage, replacing those whose keys exist; the count."""
        self._stage(UPSERT_STAGE, table, columns, rows)
        names = ", ".join(quote(c.name) for c in columns)
        others = [quote(c.name) for c in columns if c.name not in keys]
        action = ("DO UPDATE SET " + ", ".join(f"{n} = EXCLUDED.{n}" for n in others)
                  if others else "DO NOTHING")
        self.execute(f"INSERT INTO {quote_table(table)} ({names}) "
                     f"SELECT {names} FROM {UPSERT_STAGE} "
                     f"ON CONFLICT ({', '.join(quote(k) for k in keys)}) {action}")
        return rows.num_rows

    def delete(self, table: str, keys: Sequence[Column], rows: pa.Table) -> int:
        """Delete the rows with the given keys through a COPY-loaded stage; how many the table
        held."""
        self._stage(DELETE_STAGE, table, keys, rows)
        match = " AND ".join(f"t.{quote(k.name)} = s.{quote(k.name)}" for k in keys)
        with self._errors(), self._conn.cursor() as cursor:
            cursor.execute(f"DELETE FROM {quote_table(table)} AS t USING {DELETE_STAGE} AS s "
                           f"WHERE {match}")
            return cursor.rowcount

    def close(self) -> None:
        """Close the connection (a dry run's transaction rolled back first)."""
        if self._outer is not None and not self._conn.closed:
            self._outer.__exit__(None, None, None)
            self._outer = None
        self._conn.close()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
