"""Reads a service's mirror as one consistent state: the ledger's position and the rows.

The service keeps committing while a test looks, so the ledger row (which snapshot the
mirror holds) and the mirror's rows are read in one transaction (SQLite: a read
transaction; PostgreSQL: REPEATABLE READ), and the rows are then compared with what Iceberg
Java read at exactly that snapshot.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

import psycopg
import pyarrow as pa

from corpus.compare import row_multiset
from live.client import SCHEMA
from meltwater.sinks.database import sqlite_path
from sink_tests.mirror_read import decode_value

LEDGER = "meltwater_ledger"


@dataclass(frozen=True)
class MirrorState:
    snapshot_id: int | None
    sequence_number: int | None
    batch_id: int | None
    rows: pa.Table
    seen_at: float  # time.time() when this state was read


def read_state(url: str, table: str, pipeline: str | None = None) -> MirrorState:
    """The mirror's rows and the position of `pipeline` (or the newest pipeline)."""
    names = ", ".join(f'"{n}"' for n in SCHEMA.names)
    where = "" if pipeline is None else "WHERE pipeline = ?"
    ledger_sql = (f"SELECT snapshot_id, sequence_number, batch_id FROM {LEDGER} {where} "
                  "ORDER BY sequence_number DESC NULLS LAST, batch_id DESC LIMIT 1")
    params = () if pipeline is None else (pipeline,)
    sqlite = url.startswith("sqlite:")
    if sqlite:
        conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN")
            position, rows = _read(conn, ledger_sql, params, names, table)
            conn.execute("COMMIT")
        finally:
            conn.close()
    else:
        with psycopg.connect(url) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            position, rows = _read(conn, ledger_sql.replace("?", "%s"), params, names, table)
            conn.execute("COMMIT")
    seen_at = time.time()
    columns = {}
    for index, field in enumerate(SCHEMA):
        values = [decode_value(row[index], _iceberg_kind(field.type), sqlite) for row in rows]
        columns[field.name] = pa.array(values, field.type)
    snapshot_id, sequence_number, batch_id = position or (None, None, None)
    return MirrorState(snapshot_id, sequence_number, batch_id, pa.table(columns, schema=SCHEMA),
                       seen_at)


def _read(conn, ledger_sql: str, params: tuple, names: str, table: str):
    try:
        position = conn.execute(ledger_sql, params).fetchone()
        rows = conn.execute(f'SELECT {names} FROM "{table}"').fetchall()
    except (sqlite3.OperationalError, psycopg.errors.UndefinedTable):
        return None, []  # the service has not created its tables yet
    return position, rows


def _iceberg_kind(type_: pa.DataType):
    from meltwater.planner.spec.types import primitive

    if pa.types.is_decimal(type_):
        return primitive(f"decimal({type_.precision}, {type_.scale})")
    if pa.types.is_timestamp(type_):
        return primitive("timestamptz" if type_.tz else "timestamp")
    if pa.types.is_int64(type_):
        return primitive("long")
    if pa.types.is_int32(type_):
        return primitive("int")
    return primitive("string")


def mirror_state(url: str, table: str, *, until_sequence: int, pipeline: str | None = None,
                 timeout: float = 60, interval: float = 0.02) -> MirrorState:
    """Poll until the mirror holds the commit with `until_sequence` (or a later one)."""
    deadline = time.monotonic() + timeout
    while True:
        state = read_state(url, table, pipeline)
        if state.sequence_number is not None and state.sequence_number >= until_sequence:
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"mirror {table} did not reach sequence number {until_sequence}"
                               f" in {timeout:.0f}s (it holds {state.sequence_number})")
        time.sleep(interval)


def same_rows(mirror: pa.Table, truth: pa.Table) -> bool:
    return row_multiset(mirror) == row_multiset(truth.select(mirror.column_names))


def differences(mirror: pa.Table, truth: pa.Table) -> str:
    got, want = row_multiset(mirror), row_multiset(truth.select(mirror.column_names))
    extra = list((got - want).elements())[:3]
    missing = list((want - got).elements())[:3]
    return f"{mirror.num_rows} rows vs {truth.num_rows}: extra {extra}; missing {missing}"
