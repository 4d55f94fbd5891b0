"""A live Iceberg writer: commits a stream of merge-on-read changes through Apache Iceberg Java.

Runs inside the Iceberg Java writer virtualenv (pyspark 3.5 + Iceberg 1.10.2, testbed's
`writer_env`), never in meltwater's environment: the service tests and `make demo` drive it
over stdin and stdout (see `client.py`). Every commit goes through Iceberg Java's own API and
writers, as a CDC writer would commit:

- `append`: new rows, one data file per partition;
- `delete`: position deletes of live rows (some files carry the deleted rows);
- `update`: merge-on-read update, position deletes of the old rows and the new rows in one
  row delta;
- `equality`: equality deletes by `id`, key only;
- `upsert`: equality deletes by `id` and the new versions of those rows in one row delta
  (the deletes do not apply to rows of their own commit).

Maintenance, asked for by name only (never drawn at random), through Iceberg's Spark
procedures:
- `compact`: `rewrite_data_files` of every file (deletes applied, new data files);
- `rewrite-deletes`: `rewrite_position_delete_files` of every position delete file;
- `expire`: `expire_snapshots` keeping the newest two;
- `rollback`: `rollback_to_snapshot` to the current snapshot's parent (the rolled-back
  commit leaves the table's history; the next commit's parent is that parent).

After a commit the writer can dump what Iceberg Java's generic reader reads at that snapshot
(`LiveTable.dump`), the ground truth the mirror is judged against.

Protocol: one JSON object per line on stdin, one JSON object per line on stdout.
  {"op": "commit", "kind": "update"?, "truth": true?}   -> one commit record
  {"op": "burst", "n": 100}                             -> n commit records, truth of the last
  {"op": "quit"}
A commit record: {"snapshot_id", "sequence_number", "timestamp_ms" (the snapshot's own commit
time), "kind", "committed_at" (epoch s, after the
commit returned), "truth" (path or null), "rows" (live rows after the commit)}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

CATALOG = "local"  # a Hadoop catalog: the table is a plain directory under the warehouse
NAMESPACE = "db"
REGIONS = ("north", "south", "east", "west")
KINDS = ("append", "delete", "update", "equality", "upsert")
MAINTENANCE = ("compact", "rewrite-deletes", "expire", "rollback")
KIND_WEIGHTS = (4, 2, 3, 2, 2)


class LiveTable:
    """The table, a model of where each live row sits (file, position), and the commits."""

    def __init__(self, spark: Any, name: str, truth_dir: Path, seed: int) -> None:
        self.spark = spark
        self.jvm = spark._jvm
        self.ident = f"{CATALOG}.{NAMESPACE}.{name}"
        self.truth_dir = truth_dir
        self.random = random.Random(seed)
        self.files = self.jvm.meltwater.corpus.CorpusFiles
        self.dumper = self.jvm.meltwater.live.LiveTable
        self.live: dict[int, dict[str, Any]] = {}  # id -> {"file", "pos", "row"}
        self.models: dict[int, dict[int, dict[str, Any]]] = {}  # snapshot id -> `live` then
        self.next_id = 1
        self.clock = datetime(2026, 1, 1, tzinfo=timezone.utc)
        self._table: Any = None

    def create(self) -> None:
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
        self.spark.sql(f"""CREATE TABLE {self.ident} (
              id bigint NOT NULL, customer string, region string, quantity int,
              price decimal(10, 2), updated_at timestamp, note string)
            USING iceberg PARTITIONED BY (region)
            TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read',
                           'write.update.mode'='merge-on-read',
                           'write.merge.mode'='merge-on-read',
                           'commit.retry.num-retries'='10')""")
        self.spark.sql(f"ALTER TABLE {self.ident} SET IDENTIFIER FIELDS id")

    def table(self) -> Any:
        """The Iceberg Java table; loaded once, kept current by its own commits."""
        if self._table is None:
            self._table = self.jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                self.spark._jsparkSession, self.ident)
        return self._table

    # -- rows ----------------------------------------------------------------------------
    def _row(self, row_id: int, region: str | None = None) -> dict[str, Any]:
        self.clock += timedelta(seconds=self.random.randint(1, 600), microseconds=self.random
                                .randint(0, 999_999))
        pick = self.random
        return {
            "id": row_id,
            "customer": f"customer-{pick.randint(1, 500)}",
            "region": region or pick.choice(REGIONS),
            "quantity": pick.randint(1, 100),
            "price": f"{pick.randint(100, 99_999) / 100:.2f}",
            "updated_at": self.clock.isoformat().replace("+00:00", "Z"),
            "note": None if pick.random() < 0.2 else pick.choice(["gift", "rush", "retry", "é✓"]),
        }

    def _write_rows(self, table: Any, rows: list[dict[str, Any]]) -> list[Any]:
        """Data files for `rows` (one per region); records where each row now lives."""
        files = []
        for region in REGIONS:
            part = [r for r in rows if r["region"] == region]
            if not part:
                continue
            data_file = self.files.writeData(table, part)
            path = str(data_file.location())
            for pos, row in enumerate(part):
                self.live[row["id"]] = {"file": path, "pos": pos, "row": row}
            files.append(data_file)
        return files

    def _position_deletes(self, table: Any, ids: list[int]) -> list[Any]:
        with_row = self.random.random() < 0.5
        files = []
        for region in REGIONS:
            deletes = [{"file_path": self.live[i]["file"], "pos": self.live[i]["pos"],
                        "row": self.live[i]["row"]}
                       for i in ids if self.live[i]["row"]["region"] == region]
            if not deletes:
                continue
            deletes.sort(key=lambda d: (d["file_path"], d["pos"]))
            files.append(self.files.writePositionDeletes(
                table, with_row, table.spec().specId(), {"region": region}, deletes))
        return files

    def _equality_deletes(self, table: Any, ids: list[int]) -> list[Any]:
        files = []
        for region in REGIONS:
            keys = [{"id": i, "region": region} for i in ids
                    if self.live[i]["row"]["region"] == region]
            if keys:
                files.append(self.files.writeEqualityDeletes(
                    table, ["id"], False, table.spec().specId(), keys))
        return files

    def _pick(self, most: int, region: str | None) -> list[int]:
        ids = sorted(i for i, v in self.live.items() if region in (None, v["row"]["region"]))
        return self.random.sample(ids, min(len(ids), self.random.randint(1, most)))

    # -- commits -------------------------------------------------------------------------
    def commit(self, kind: str | None = None, small: bool = False) -> str:
        """One commit; `small` keeps it to one partition and a few rows (for bursts)."""
        if kind in MAINTENANCE:
            self._maintain(kind)
            return kind
        if kind is None:
            kind = "append" if len(self.live) < 20 else self.random.choices(
                KINDS, KIND_WEIGHTS)[0]
        region = self.random.choice(REGIONS) if small else None
        ids = [] if kind == "append" else self._pick(8, region)
        if not ids:
            kind = "append"
        table = self.table()
        if kind == "append":
            rows = [self._row(self._new_id(), region)
                    for _ in range(self.random.randint(1, 5 if small else 40))]
            append = table.newFastAppend()
            for data_file in self._write_rows(table, rows):
                append = append.appendFile(data_file)
            append.commit()
        elif kind in ("delete", "equality"):
            deletes = (self._position_deletes(table, ids) if kind == "delete"
                       else self._equality_deletes(table, ids))
            delta = table.newRowDelta()
            for delete_file in deletes:
                delta = delta.addDeletes(delete_file)
            delta.commit()
            for i in ids:
                del self.live[i]
        elif kind in ("update", "upsert"):
            deletes = (self._position_deletes(table, ids) if kind == "update"
                       else self._equality_deletes(table, ids))
            rows = []
            for i in ids:
                row = self._row(i, self.live[i]["row"]["region"])
                row["customer"] = self.live[i]["row"]["customer"]
                rows.append(row)
            data = self._write_rows(table, rows)
            delta = table.newRowDelta()
            for delete_file in deletes:
                delta = delta.addDeletes(delete_file)
            for data_file in data:
                delta = delta.addRows(data_file)
            delta.commit()
        else:
            raise ValueError(f"unknown commit kind {kind!r}")
        return kind

    def _maintain(self, kind: str) -> None:
        name = f"{NAMESPACE}.{self.ident.rsplit('.', 1)[1]}"
        if kind == "compact":
            self.spark.sql(f"CALL {CATALOG}.system.rewrite_data_files(table => '{name}', "
                           "options => map('rewrite-all', 'true'))").collect()
            self._relocate()
        elif kind == "rewrite-deletes":
            self.spark.sql(f"CALL {CATALOG}.system.rewrite_position_delete_files("
                           f"table => '{name}', options => map('rewrite-all', 'true'))").collect()
        elif kind == "expire":
            self.spark.sql(f"CALL {CATALOG}.system.expire_snapshots(table => '{name}', "
                           "older_than => TIMESTAMP '2999-01-01 00:00:00', "
                           "retain_last => 2)").collect()
        else:  # rollback
            parent = self.table().currentSnapshot().parentId()
            self.spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('{name}', {parent})")
            self.live = {i: dict(v) for i, v in self.models[int(parent)].items()}
        self.table().refresh()

    def _relocate(self) -> None:
        """Where each live row sits after a rewrite (its content is the same)."""
        self.table().refresh()
        found = self.spark.sql(f"SELECT id, _file, _pos FROM {self.ident}").collect()
        for row in found:
            self.live[row["id"]]["file"] = row["_file"]
            self.live[row["id"]]["pos"] = row["_pos"]

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def record(self, kind: str, committed_at: float, truth: bool) -> dict[str, Any]:
        table = self.table()
        snapshot = table.currentSnapshot()
        snapshot_id = int(snapshot.snapshotId())
        self.models[snapshot_id] = {i: dict(v) for i, v in self.live.items()}
        path = None
        if truth:
            path = str(self.truth_dir / f"{snapshot_id}.jsonl")
            self.dumper.dump(table, snapshot_id, path)
        return {"snapshot_id": snapshot_id, "sequence_number": int(snapshot.sequenceNumber()),
                "timestamp_ms": int(snapshot.timestampMillis()),
                "kind": kind, "committed_at": committed_at, "truth": path,
                "rows": len(self.live)}


def spark_session(warehouse: Path, jars: str) -> Any:
    """Iceberg Java 1.10.2 on a local[2] Spark 3.5 with a Hadoop catalog at `warehouse`; as
    the corpus writer's session, so a live table is written as the corpus tables are."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("meltwater-live-writer")
        .config("spark.jars", jars)
        .config("spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", str(warehouse))
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", required=True, type=Path)
    parser.add_argument("--name", default="orders")
    parser.add_argument("--truth", required=True, type=Path)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    args.truth.mkdir(parents=True, exist_ok=True)
    spark = spark_session(args.warehouse, args.jars)
    spark.sparkContext.setLogLevel("ERROR")
    live = LiveTable(spark, args.name, args.truth, args.seed)
    live.create()
    location = str(live.table().location())
    print(json.dumps({"ready": True, "location": location}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        op = command.get("op")
        if op == "quit":
            break
        if op == "commit":
            kind = live.commit(command.get("kind"))
            print(json.dumps(live.record(kind, time.time(), command.get("truth", True))),
                  flush=True)
        elif op == "burst":
            n = int(command["n"])
            for i in range(n):
                kind = live.commit(command.get("kind"), small=True)
                print(json.dumps(live.record(kind, time.time(), i == n - 1)), flush=True)
        else:
            print(json.dumps({"error": f"unknown op {op!r}"}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
