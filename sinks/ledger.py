"""The ledger: which batches of which pipeline a database has applied, and how far they got.

One row per applied batch in `meltwater_ledger`, primary key (pipeline, batch_id), written
in the same transaction as the batch's rows. That is the whole exactly-once argument: the
rows and the ledger entry commit together or not at all, so after a crash a batch is either
in the ledger (and its replay is skipped) or absent with none of its rows applied.

Columns: `pipeline`, `batch_id`, `snapshot_id` and `sequence_number` of the newest commit
applied so far (an empty batch carries the previous entry's forward), `row_count` (change
rows in the batch), `upserted`, `deleted`, `applied_at` (UTC; ISO-8601 text in SQLite).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from meltwater.sinks.database import Database

LEDGER_TABLE = "meltwater_ledger"
_COLUMNS = ("pipeline", "batch_id", "snapshot_id", "sequence_number", "row_count", "upserted",
            "deleted", "applied_at")
_TYPES = {
    "sqlite": ("TEXT", "INTEGER", "INTEGER", "INTEGER", "INTEGER", "INTEGER", "INTEGER",
               "TEXT"),
    "postgresql": ("text", "bigint", "bigint", "bigint", "bigint", "bigint", "bigint",
                   "timestamptz"),
}
_NULLABLE = ("snapshot_id", "sequence_number")


@dataclass(frozen=True)
class LedgerEntry:
    """One applied batch, as the ledger records it in the destination's own transaction."""

    pipeline: str
    batch_id: int
    snapshot_id: int | None
    sequence_number: int | None
    row_count: int
    upserted: int
    deleted: int
    applied_at: dt.datetime


class Ledger:
    """The ledger rows of one pipeline in one database."""

    def __init__(self, db: Database, pipeline: str) -> None:
        self.db = db
        self.pipeline = pipeline

    def ensure(self) -> None:
        """Create the ledger table if the database has none."""
        columns = ", ".join(
            f"{name} {type_}{'' if name in _NULLABLE else ' NOT NULL'}"
            for name, type_ in zip(_COLUMNS, _TYPES[self.db.dialect], strict=True))
        self.db.execute(f"CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} ({columns}, "
                        "PRIMARY KEY (pipeline, batch_id))")

    def find(self, batch_id: int) -> LedgerEntry | None:
        """The entry of a batch id, if the pipeline applied it."""
        return self._one(f"batch_id = {self.db.param}", [batch_id])

    def last(self) -> LedgerEntry | None:
        """The entry of the pipeline's highest batch id."""
        return self._one(f"batch_id = (SELECT max(batch_id) FROM {LEDGER_TABLE} "
                         f"WHERE pipeline = {self.db.param})", [self.pipeline])

    def _one(self, condition: str, params: list) -> LedgerEntry | None:
        rows = self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM {LEDGER_TABLE} "
                               f"WHERE pipeline = {self.db.param} AND {condition}",
                               [self.pipeline, *params])
        if not rows:
            return None
        values = list(rows[0])
        if isinstance(values[-1], str):
            values[-1] = dt.datetime.fromisoformat(values[-1])
        return LedgerEntry(*values)

    def record(self, entry: LedgerEntry) -> None:
        """Record an applied batch, inside the transaction that applied it."""
        values = [getattr(entry, name) for name in _COLUMNS]
        if self.db.dialect == "sqlite":
            values[-1] = entry.applied_at.isoformat(timespec="microseconds")
        marks = ", ".join(self.db.param for _ in _COLUMNS)
        self.db.execute(f"INSERT INTO {LEDGER_TABLE} ({', '.join(_COLUMNS)}) VALUES ({marks})",
                        values)
