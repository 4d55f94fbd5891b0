"""The mirror table's shape: Iceberg types as SQL column types, SQL names, and the DDL.

| Iceberg              | PostgreSQL         | SQLite: declared type, what is stored           |
| -------------------- | ------------------ | ----------------------------------------------- |
| boolean              | boolean            | INTEGER: 0 / 1                                  |
| int / long           | integer / bigint   | INTEGER                                         |
| float / double       | real / double prec.| REAL; NaN as the text 'NaN'                     |
| decimal(P, S)        | numeric(P, S)      | TEXT: the exact value with S decimals, '-12.50' |
| date                 | date               | TEXT 'YYYY-MM-DD'                               |
| time                 | time               | TEXT 'HH:MM:SS.ffffff'                          |
| timestamp            | timestamp          | TEXT 'YYYY-MM-DDTHH:MM:SS.ffffff'               |
| timestamptz          | timestamptz        | TEXT 'YYYY-MM-DDTHH:MM:SS.ffffff+00:00' (UTC)   |
| timestamp[tz]_ns     | (refused)          | TEXT, as above with 9 decimals                  |
| string               | text               | TEXT                                            |
| uuid                 | uuid               | TEXT, canonical lower case '8-4-4-4-12'         |
| binary / fixed[L]    | bytea              | BLOB                                            |
| struct / list / map  | jsonb              | TEXT holding JSON (see `sql_values`)            |
| geometry / geography | bytea              | BLOB (WKB, as Iceberg stores them)              |
| unknown              | text (always null) | TEXT (always null)                              |

Why SQLite declares storage classes rather than `DECIMAL`, `DATE` or `BOOLEAN`: SQLite
gives such names NUMERIC affinity, which turns '1.50' into the double 1.5 and rounds a
decimal(38, 2); with TEXT affinity the value stays exactly as written. Dates and
timestamps are fixed-width ISO-8601 text, so sorting the text sorts by time and SQLite's
date functions read them. SQLite cannot store a NaN in a REAL (it becomes NULL, which would
claim the value is unknown), so NaN is the text 'NaN'; -0.0 is stored as 0.0 (equal in
SQL and IEEE arithmetic). PostgreSQL holds every type natively except nanosecond
timestamps (its timestamps have microseconds), which are refused rather than truncated.

PostgreSQL text cannot hold the NUL character; a string with one fails its batch, naming
the error. Names are always quoted, so any Iceberg column name works; PostgreSQL names
longer than 63 bytes would be silently truncated by the server, so they are refused here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from meltwater.planner.spec.types import IcebergType, PrimitiveType, Schema
from meltwater.sinks.errors import InvalidKeyColumnError, UnsupportedTypeError

Dialect = Literal["sqlite", "postgresql"]
PG_NAME_BYTES = 63

_SQLITE = {
    "boolean": "INTEGER", "int": "INTEGER", "long": "INTEGER", "float": "REAL",
    "double": "REAL", "decimal": "TEXT", "date": "TEXT", "time": "TEXT",
    "timestamp": "TEXT", "timestamptz": "TEXT", "timestamp_ns": "TEXT",
    "timestamptz_ns": "TEXT", "string": "TEXT", "uuid": "TEXT", "binary": "BLOB",
    "fixed": "BLOB", "geometry": "BLOB", "geography": "BLOB", "unknown": "TEXT",
}
_POSTGRES = {
    "boolean": "boolean", "int": "integer", "long": "bigint", "float": "real",
    "double": "double precision", "date": "date", "time": "time",
    "timestamp": "timestamp", "timestamptz": "timestamptz", "string": "text",
    "uuid": "uuid", "binary": "bytea", "fixed": "bytea", "geometry": "bytea",
    "geography": "bytea", "unknown": "text",
}
_NESTED = {"sqlite": "TEXT", "postgresql": "jsonb"}
_KEY_REFUSED = ("float", "double", "unknown", "geometry", "geography")


@dataclass(frozen=True)
class Column:
    """A mirror table column: its name, Iceberg field, and SQL type in one dialect."""

    name: str
    field_id: int
    type: IcebergType
    sql_type: str


def column_type(type_: IcebergType, dialect: Dialect, column: str = "?") -> str:
    """The SQL type a column of this Iceberg type has in the mirror table."""
    if not isinstance(type_, PrimitiveType):
        return _NESTED[dialect]
    kind = type_.kind
    if dialect == "sqlite":
        found = _SQLITE.get(kind)
    elif kind == "decimal":
        found = f"numeric({type_.precision},{type_.scale})"
    else:
        found = _POSTGRES.get(kind)
    if found is None:
        why = ("PostgreSQL timestamps have microseconds; mirror to SQLite or cast the column"
               if kind.endswith("_ns") else "no SQL mapping yet")
        raise UnsupportedTypeError(f"column {column!r} of type {type_} cannot be mirrored to "
                              f"{dialect}: {why}")
    return found


def mirror_columns(schema: Schema, dialect: Dialect) -> list[Column]:
    """The mirror table's columns: the schema's top-level fields, in order."""
    columns = []
    for field in schema.fields:
        check_name(field.name, dialect)
        columns.append(Column(field.name, field.field_id, field.type,
                              column_type(field.type, dialect, field.name)))
    return columns


def check_key_type(column: Column, table: str) -> None:
    """Refuse key columns that cannot identify a row by equality (as Iceberg does)."""
    type_ = column.type
    if not isinstance(type_, PrimitiveType) or type_.kind in _KEY_REFUSED:
        raise InvalidKeyColumnError(f"column {column.name!r} of {table} has type {type_}, which "
                               "cannot be a key column (nested, float, double and unknown "
                               "values do not compare by equality)")


def check_name(name: str, dialect: Dialect) -> None:
    """Refuse a name the database would change: PostgreSQL truncates names past 63 bytes."""
    if dialect == "postgresql" and len(name.encode()) > PG_NAME_BYTES:
        raise UnsupportedTypeError(f"name {name!r} is longer than PostgreSQL's {PG_NAME_BYTES} "
                              "bytes; the server would truncate it")


def quote(name: str) -> str:
    """A quoted SQL identifier (both dialects use double quotes, doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


def quote_table(table: str) -> str:
    """A quoted table name; `schema.table` quotes each part."""
    return ".".join(quote(part) for part in table.split("."))


def create_table_sql(table: str, columns: Sequence[Column], keys: Sequence[str]) -> str:
    """CREATE TABLE IF NOT EXISTS with the key columns NOT NULL and as the primary key."""
    lines = [f"{quote(c.name)} {c.sql_type}{' NOT NULL' if c.name in keys else ''}"
             for c in columns]
    lines.append(f"PRIMARY KEY ({', '.join(quote(k) for k in keys)})")
    return f"CREATE TABLE IF NOT EXISTS {quote_table(table)} (\n  " + ",\n  ".join(lines) + "\n)"


def add_column_sql(table: str, column: Column) -> str:
    """The DDL adding a column."""
    return f"ALTER TABLE {quote_table(table)} ADD COLUMN {quote(column.name)} {column.sql_type}"


def rename_column_sql(table: str, old: str, new: str) -> str:
    """The DDL renaming a column."""
    return f"ALTER TABLE {quote_table(table)} RENAME COLUMN {quote(old)} TO {quote(new)}"


def drop_column_sql(table: str, name: str) -> str:
    """The DDL dropping a column."""
    return f"ALTER TABLE {quote_table(table)} DROP COLUMN {quote(name)}"


_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")


def is_promotion(old_sql_type: str, new_sql_type: str) -> bool:
    """Whether SQL type `old` -> `new` is one of Iceberg's promotions as the mirror declares
    them: int -> long, float -> double, decimal(P, S) -> decimal(P', S) with P' > P; SQLite
    declares the same storage class before and after, so it never needs one."""
    old, new = old_sql_type.replace(" ", ""), new_sql_type.replace(" ", "")
    if (old, new) in {("integer", "bigint"), ("real", "doubleprecision")}:
        return True
    old_dec, new_dec = _NUMERIC.fullmatch(old), _NUMERIC.fullmatch(new)
    return bool(old_dec and new_dec and old_dec.group(2) == new_dec.group(2)
                and int(new_dec.group(1)) > int(old_dec.group(1)))


def retype_sql(table: str, column: Column) -> str:
    """The DDL changing a column's type to the column's (a promotion)."""
    return (f"ALTER TABLE {quote_table(table)} ALTER COLUMN {quote(column.name)} "
            f"TYPE {column.sql_type}")


def widen_sql(table: str, column: Column, existing: str) -> str | None:
    """ALTER the column to its type if Iceberg widened it since the table was created.

    For a table whose columns are not recorded yet (see `column_record`), compared with the
    type the database declares: only Iceberg's promotions (`is_promotion`); any other
    difference is left alone, as someone's deliberate choice.
    """
    return retype_sql(table, column) if is_promotion(existing, column.sql_type) else None
