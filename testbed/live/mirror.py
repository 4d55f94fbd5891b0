"""The SQLite mirror of a live table, read back and compared with Iceberg Java's read.

`read_mirror` reads a mirror's ledger position and rows in one transaction (so they agree
while the service keeps committing); `truth_rows` is what Iceberg Java read at a commit, in
the same form; `differences` names a few rows only one side has. For `make demo` and the
soak (bench/soak.py), which judge a mirror against Iceberg Java after every commit.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from live.client import SCHEMA, Commit, truth_table
from meltwater.sinks.ledger import LEDGER_TABLE


@dataclass(frozen=True)
class MirrorState:
    """The mirror as one read transaction saw it: the sequence number of the newest commit
    its ledger says it applied, its rows, and when (epoch seconds, the service's clock) the
    first batch holding a given commit was applied, if one was."""

    sequence_number: int | None
    rows: Counter[tuple[Any, ...]]
    applied_at: float | None


def _value(stored: Any, type_: pa.DataType) -> Any:
    """A value as the SQLite mirror stores it (meltwater.sinks.sql_schema's table) back to
    the Python value Iceberg Java's read gives: decimals and timestamps are stored as text."""
    if stored is None:
        return None
    if pa.types.is_decimal(type_):
        return Decimal(stored)
    if pa.types.is_timestamp(type_):
        return datetime.fromisoformat(stored)
    return stored


def read_mirror(database: Path, table: str, sequence_number: int) -> MirrorState:
    """The ledger's position and the mirror's rows, read in one transaction, so they agree
    while the service keeps committing; and when the batch that applied the commit of
    `sequence_number` was applied. `table` is the mirror table the ledger's pipeline
    writes (the database holds one pipeline's mirror)."""
    names = ", ".join(f'"{name}"' for name in SCHEMA.names)
    connection = sqlite3.connect(database, timeout=30, isolation_level=None)
    try:
        connection.execute("BEGIN")
        try:
            newest = connection.execute(
                f"SELECT sequence_number FROM {LEDGER_TABLE} ORDER BY batch_id DESC LIMIT 1"
            ).fetchone()
            applied = connection.execute(
                f"SELECT applied_at FROM {LEDGER_TABLE} WHERE sequence_number >= ? "
                "ORDER BY batch_id LIMIT 1", (sequence_number,)).fetchone()
            stored = connection.execute(f'SELECT {names} FROM "{table}"').fetchall()
        except sqlite3.OperationalError:  # the service has not created its tables yet
            newest, applied, stored = None, None, []
        connection.execute("COMMIT")
    finally:
        connection.close()
    rows = Counter(tuple(_value(v, f.type) for v, f in zip(row, SCHEMA, strict=True))
                   for row in stored)
    applied_at = None if applied is None else ledger_time(applied[0])
    return MirrorState(newest[0] if newest else None, rows, applied_at)


def ledger_time(text: str) -> float:
    """The ledger's `applied_at` (ISO-8601 text in SQLite, UTC) as epoch seconds."""
    stamp = datetime.fromisoformat(text)
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()



def truth_rows(commit: Commit) -> Counter[tuple[Any, ...]]:
    """What Iceberg Java read at `commit`'s snapshot, as rows."""
    table = truth_table(commit)
    return Counter(tuple(row[name] for name in SCHEMA.names) for row in table.to_pylist())


def differences(mirror: Counter[tuple[Any, ...]], truth: Counter[tuple[Any, ...]]) -> str:
    """A few rows only one side has."""
    extra = list((mirror - truth).elements())[:3]
    missing = list((truth - mirror).elements())[:3]
    return (f"{sum(mirror.values())} rows in the mirror, {sum(truth.values())} in Iceberg "
            f"Java's read; only in the mirror: {extra}; only in Iceberg Java's read: {missing}")
