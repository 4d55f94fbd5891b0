"""Which mirror column holds which Iceberg field id: the `meltwater_columns` table.

Iceberg identifies columns by field id; a name is only a label that a rename changes and a
dropped-then-re-added column reuses under a new id. A mirror table's SQL columns have only
names, so the mirror keeps the mapping beside the ledger: one row per mirror table and field
id, with the SQL column's name and the SQL type it was given. It is rewritten in
the same transaction as the DDL that changes it (and the batch that carried the schema), so
after a crash the record and the table agree.

Columns: `mirror_table`, `field_id`, `column_name`, `sql_type` (the SQL type the mirror declared,
e.g. `bigint` or `numeric(10,2)`); primary key (mirror_table, field_id).
"""

from __future__ import annotations

from dataclasses import dataclass

from meltwater.sinks.database import Database

COLUMNS_TABLE = "meltwater_columns"
_TYPES = {"sqlite": ("TEXT", "INTEGER", "TEXT", "TEXT"),
          "postgresql": ("text", "bigint", "text", "text")}
_NAMES = ("mirror_table", "field_id", "column_name", "sql_type")


@dataclass(frozen=True)
class RecordedColumn:
    """A mirror column as recorded: the field id it holds, its SQL name and SQL type."""

    field_id: int
    name: str
    sql_type: str


class ColumnRecord:
    """The recorded columns of one mirror table in one database."""

    def __init__(self, db: Database, table: str) -> None:
        self.db = db
        self.table = table

    def ensure(self) -> None:
        """Create the record table if the database has none."""
        columns = ", ".join(f"{name} {type_} NOT NULL"
                            for name, type_ in zip(_NAMES, _TYPES[self.db.dialect], strict=True))
        self.db.execute(f"CREATE TABLE IF NOT EXISTS {COLUMNS_TABLE} ({columns}, "
                        "PRIMARY KEY (mirror_table, field_id))")

    def read(self) -> dict[int, RecordedColumn]:
        """Field id -> recorded column; empty for a table never recorded (made by older
        code, or not made yet)."""
        rows = self.db.execute(f"SELECT field_id, column_name, sql_type FROM "
                               f"{COLUMNS_TABLE} WHERE mirror_table = {self.db.param}",
                               [self.table])
        return {int(fid): RecordedColumn(int(fid), name, type_) for fid, name, type_ in rows}

    def write(self, columns: list[RecordedColumn]) -> None:
        """Replace the table's record with `columns` (inside the caller's transaction)."""
        p = self.db.param
        self.db.execute(f"DELETE FROM {COLUMNS_TABLE} WHERE mirror_table = {p}", [self.table])
        for column in columns:
            self.db.execute(f"INSERT INTO {COLUMNS_TABLE} ({', '.join(_NAMES)}) "
                            f"VALUES ({p}, {p}, {p}, {p})",
                            [self.table, column.field_id, column.name, column.sql_type])
