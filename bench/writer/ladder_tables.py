"""Writes one table of the scale ladder (issue 25) with Apache Iceberg Java 1.10.2 on Spark 3.5.

Usage (inside the writer virtualenv): python ladder_tables.py --out DIR --jars JARS
--shape backlog|huge|history|big|dv --rows N [--commits N] [--keys N] [--seed N]. Writes
DIR/warehouse (Hadoop catalog layout), DIR/tables.json (the table, its snapshots in commit
order, the live row counts Iceberg Java reads at the rung snapshots) and, for the backlog,
DIR/keys.json (the keys each commit upserted).

Every table is format v2, unpartitioned, merge-on-read with file-scoped position deletes,
`id BIGINT NOT NULL` its identifier field, the scan benchmark's columns; the first snapshot
is one append of --rows rows in id order, 100,000 rows a data file (`spark.range` with one
contiguous id range per write task).

- `backlog`: then --commits commits each upserting --keys keys as Flink upsert and CDC
  jobs do: one key-only equality delete file (equality_ids = [id], the commit's keys) and
  one data file with the keys' new rows, committed together as one RowDelta through the
  Iceberg Java API (CorpusFiles' generic writers over py4j); no compaction. Keys are drawn
  without replacement per commit, seeded, uniformly from [0, rows + rows/50): some are
  upserted by several commits, and 2% of the space is new ids, inserted by an upsert.
- `huge` (bench/key_index.py, the issue 32 rung): a `backlog` in data files of 2,000,000
  rows (one row group of 100 pages of 20,000 rows, Iceberg Java's defaults), as `dv`'s.
- `history`: --commits mixed commits on the table. Of every ten: five equality-delete
  upserts of 200 random live-or-deleted ids (as above), three Java API appends of 500 new
  ids, one merge-on-read Spark SQL `DELETE` of a 100-id range and one merge-on-read
  `UPDATE` of every other id of a 200-id range (position deletes + new rows).
- `big`: then one merge-on-read `DELETE` of 1% of the rows (hashed, every data file) and
  one `UPDATE` of 0.1% (hashed; the commit whose changes the ladder reads).
- `dv` (bench/pages.py): 2,000,000 rows a data file (one row group of 100 pages of
  20,000 rows, Iceberg Java's defaults), upgraded to format v3, then one merge-on-read
  `DELETE` of about --keys rows (hashed, every data file): deletion vectors.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from make_tables import (
    CATEGORIES,
    COLUMNS,
    EPOCH_2024_MICROS,
    MOR_PROPERTIES,
    YEAR_MICROS,
    describe,
    scan_rows,
)
from spark import CATALOG, NAMESPACE, ident, spark_session

ROWS_PER_FILE = 100_000
NEW_ID_SHARE = 50  # the key space is rows + rows / NEW_ID_SHARE: 2% of it new ids
HISTORY_KINDS = ("append", "upsert", "upsert", "delete", "upsert", "append", "upsert",
                 "update", "upsert", "append")
HISTORY_UPSERT_KEYS = 200
HISTORY_APPEND_ROWS = 500
BIG_DELETE = "pmod(xxhash64(id, 'delete'), 100) = 0"  # 1% of the rows
BIG_UPDATE = "pmod(xxhash64(id, 'update'), 1000) = 0"  # 0.1% of the rows
RUNG_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)
DV_ROWS_PER_FILE = 2_000_000


def rung_commits(commits: int) -> list[int]:
    """The commits the ladder reads: 10%, 25%, 50%, 75% and all of the history."""
    return sorted({max(1, round(commits * f)) for f in RUNG_FRACTIONS})


# -- rows ----------------------------------------------------------------------------------
class _OrderedRange:
    """Hands make_tables.scan_rows a `spark.range` split into contiguous id ranges, one data
    file each, so the ladder's tables share the scan table's column definitions."""

    def __init__(self, spark: Any, files: int) -> None:
        self.spark, self.files = spark, files

    def range(self, start: int, end: int) -> Any:
        return self.spark.range(start, end, 1, self.files)


def upsert_keys(seed: int, commit: int, key_space: int, count: int) -> list[int]:
    """The keys commit `commit` upserts: distinct, seeded, uniform over the key space."""
    rng = random.Random(seed * 1_000_003 + commit)
    return sorted(rng.sample(range(key_space), min(count, key_space)))


def new_rows(keys: list[int], commit: int) -> list[dict[str, Any]]:
    """The rows a commit writes for `keys`: values differ from every earlier version of
    the row (the note names the commit), so no upsert rewrites a row unchanged."""
    rng = random.Random(f"rows-{commit}")
    rows = []
    for key in keys:
        micros = EPOCH_2024_MICROS + rng.randrange(YEAR_MICROS)
        ts = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
        rows.append({
            "id": key,
            "customer_id": rng.randrange(100_000),
            "amount": None if rng.randrange(50) == 0 else round(rng.uniform(0, 10_000), 2),
            "category": CATEGORIES[rng.randrange(len(CATEGORIES))],
            "note": f"order {key} v{commit} {rng.getrandbits(40):x}",
            "event_ts": ts.isoformat(),
            "event_date": ts.date().isoformat(),
        })
    return rows


# -- Iceberg Java over py4j ----------------------------------------------------------------
class JavaTable:
    """One Iceberg Java table (`table`, an org.apache.iceberg.Table), committed to with its
    API; also the service benchmark's writer (ladder_upserts.py)."""

    def __init__(self, spark: Any, table: Any) -> None:
        self.jvm = spark._jvm
        self.table = table
        self.files = self.jvm.meltwater.corpus.CorpusFiles
        self.mapper = self.jvm.com.fasterxml.jackson.databind.ObjectMapper()
        self.list_class = self.jvm.java.lang.Class.forName("java.util.List")

    @classmethod
    def in_catalog(cls, spark: Any, name: str) -> JavaTable:
        return cls(spark, spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, ident(name)))

    def refresh(self) -> None:
        """After a Spark SQL commit: the API's view of the table catches up."""
        self.table.refresh()

    def _rows(self, rows: list[dict[str, Any]]) -> Any:
        """A java.util.List of maps in one py4j call (JSON through Jackson), not one call a
        value: CorpusFiles converts each value to its column's type."""
        return self.mapper.readValue(json.dumps(rows), self.list_class)

    def upsert(self, keys: list[int], commit: int) -> None:
        """One RowDelta: a key-only equality delete file of `keys` and their new rows."""
        data = self.files.writeData(self.table, self._rows(new_rows(keys, commit)))
        deletes = self.files.writeEqualityDeletes(
            self.table, ["id"], False, self.table.spec().specId(),
            self._rows([{"id": key} for key in keys]))
        self.table.newRowDelta().addRows(data).addDeletes(deletes).commit()

    def append(self, first_id: int, count: int, commit: int) -> None:
        data = self.files.writeData(
            self.table, self._rows(new_rows(list(range(first_id, first_id + count)), commit)))
        self.table.newAppend().appendFile(data).commit()

    def snapshot(self) -> dict[str, Any]:
        current = self.table.currentSnapshot()
        return {"snapshot_id": current.snapshotId(), "parent_id": current.parentId(),
                "sequence_number": current.sequenceNumber(), "operation": current.operation()}


# -- shapes --------------------------------------------------------------------------------
def create(spark: Any, name: str) -> None:
    tblprops = ", ".join(f"'{k}'='{v}'" for k, v in MOR_PROPERTIES.items())
    columns = COLUMNS.replace("id BIGINT", "id BIGINT NOT NULL", 1)
    spark.sql(f"DROP TABLE IF EXISTS {ident(name)}")
    spark.sql(f"CREATE TABLE {ident(name)} ({columns}) USING iceberg "
              f"TBLPROPERTIES ({tblprops})")
    spark.sql(f"ALTER TABLE {ident(name)} SET IDENTIFIER FIELDS id")


def load(spark: Any, name: str, rows: int, rows_per_file: int = ROWS_PER_FILE) -> JavaTable:
    """The table with its first snapshot: `rows` rows in id order."""
    create(spark, name)
    files = max(1, rows // rows_per_file)
    scan_rows(_OrderedRange(spark, files), rows).writeTo(ident(name)).append()
    return JavaTable.in_catalog(spark, name)


def progress(done: int, total: int, started: float) -> None:
    if done % max(1, total // 10) == 0 or done == total:
        print(f"  {done}/{total} commits ({time.monotonic() - started:.0f}s)", flush=True)


def make_backlog(spark: Any, rows: int, commits: int, keys: int, seed: int, out: Path,
                 name: str = "backlog", rows_per_file: int = ROWS_PER_FILE
                 ) -> list[dict[str, Any]]:
    table = load(spark, name, rows, rows_per_file)
    snapshots = [table.snapshot()]
    key_space = rows + rows // NEW_ID_SHARE
    written: dict[int, list[int]] = {}
    started = time.monotonic()
    for commit in range(1, commits + 1):
        written[commit] = upsert_keys(seed, commit, key_space, keys)
        table.upsert(written[commit], commit)
        snapshots.append(table.snapshot())
        progress(commit, commits, started)
    (out / "keys.json").write_text(json.dumps({str(c): k for c, k in written.items()}))
    return snapshots


def make_history(spark: Any, rows: int, commits: int, seed: int) -> list[dict[str, Any]]:
    name = "history"
    table = load(spark, name, rows)
    snapshots = [table.snapshot()]
    next_id = rows
    rng = random.Random(seed)
    started = time.monotonic()
    for commit in range(1, commits + 1):
        kind = HISTORY_KINDS[commit % len(HISTORY_KINDS)]
        if kind == "upsert":
            table.upsert(upsert_keys(seed, commit, next_id, HISTORY_UPSERT_KEYS), commit)
        elif kind == "append":
            table.append(next_id, HISTORY_APPEND_ROWS, commit)
            next_id += HISTORY_APPEND_ROWS
        elif kind == "delete":
            first = rng.randrange(next_id)
            spark.sql(f"DELETE FROM {ident(name)} WHERE id BETWEEN {first} AND {first + 99}")
            table.refresh()
        else:
            first = rng.randrange(next_id)
            spark.sql(f"UPDATE {ident(name)} SET amount = coalesce(amount, 0) + 1, "
                      f"note = concat(note, ' u{commit}') "
                      f"WHERE id BETWEEN {first} AND {first + 199} AND pmod(id, 2) = 0")
            table.refresh()
        snapshot = table.snapshot()
        if snapshot["snapshot_id"] == snapshots[-1]["snapshot_id"]:
            raise SystemExit(f"history commit {commit} ({kind}) committed no snapshot")
        snapshots.append({**snapshot, "kind": kind})
        progress(commit, commits, started)
    return snapshots


def make_big(spark: Any, rows: int) -> list[dict[str, Any]]:
    name = "big"
    table = load(spark, name, rows)
    snapshots = [table.snapshot()]
    for statement in (f"DELETE FROM {ident(name)} WHERE {BIG_DELETE}",
                      f"UPDATE {ident(name)} SET customer_id = customer_id + 1, "
                      f"note = concat(note, ' u') WHERE {BIG_UPDATE}"):
        spark.sql(statement)
        table.refresh()
        snapshots.append(table.snapshot())
    return snapshots


def make_dv(spark: Any, rows: int, keys: int) -> list[dict[str, Any]]:
    name = "dv"
    table = load(spark, name, rows, DV_ROWS_PER_FILE)
    snapshots = [table.snapshot()]
    spark.sql(f"ALTER TABLE {ident(name)} SET TBLPROPERTIES ('format-version'='3')")
    spark.sql(f"DELETE FROM {ident(name)} WHERE pmod(xxhash64(id, 'dv'), "
              f"{max(1, rows // keys)}) = 0")
    table.refresh()
    snapshots.append(table.snapshot())
    return snapshots


def live_rows(spark: Any, location: str, snapshot_id: int) -> int:
    """The rows Iceberg Java reads at a snapshot (deletes applied)."""
    return (spark.read.format("iceberg").option("snapshot-id", str(snapshot_id))
            .load(location).count())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--shape", required=True,
                        choices=["backlog", "huge", "history", "big", "dv"])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--commits", type=int, default=0)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args()
    spark = spark_session(args.out / "warehouse", args.jars, f"meltwater-ladder-{args.shape}")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    started = time.monotonic()
    if args.shape == "backlog":
        snapshots = make_backlog(spark, args.rows, args.commits, args.keys, args.seed, args.out)
    elif args.shape == "huge":
        snapshots = make_backlog(spark, args.rows, args.commits, args.keys, args.seed, args.out,
                                 "huge", DV_ROWS_PER_FILE)
    elif args.shape == "history":
        snapshots = make_history(spark, args.rows, args.commits, args.seed)
    elif args.shape == "dv":
        snapshots = make_dv(spark, args.rows, args.keys)
    else:
        snapshots = make_big(spark, args.rows)
    written = time.monotonic() - started
    record = describe(spark, args.shape)
    rungs = rung_commits(args.commits) if args.commits else [len(snapshots) - 1]
    counted = {0, *rungs, len(snapshots) - 1}
    record.update({
        "shape": args.shape, "rows": args.rows, "commits": args.commits, "keys": args.keys,
        "seed": args.seed, "snapshots": snapshots, "rungs": rungs,
        "live_rows_at": {str(i): live_rows(spark, record["location"],
                                           snapshots[i]["snapshot_id"])
                         for i in sorted(counted)},
        "write_seconds": written,
    })
    if args.shape == "big":
        record["update_where"] = BIG_UPDATE
    print(f"{args.shape}: {len(snapshots)} snapshots, {record['live_rows']:,} live rows, "
          f"{record['data_files']} data files, {record['equality_delete_files']} equality "
          f"and {record['position_delete_files']} position delete files ({written:.0f}s)",
          flush=True)
    (args.out / "tables.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
