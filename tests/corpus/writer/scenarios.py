"""The corpus scenarios: each a table with a history of commits made by Apache Iceberg Java.

Spark SQL drives everything Spark can write (appends, merge-on-read and copy-on-write
DELETE/UPDATE/MERGE, overwrites, maintenance procedures, schema and partition evolution).
Equality deletes and position deletes carrying the deleted row go through Iceberg's generic
Java writers (`CorpusFiles`) and `RowDelta` commits.

Each scenario lists its features; the test report prints them with the snapshot and delete
file counts, so anyone can see the corpus covers what it claims.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from recorder import Recorder

V2_MOR = ("'format-version'='2', 'write.delete.mode'='merge-on-read', "
          "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'")
V2_COW = ("'format-version'='2', 'write.delete.mode'='copy-on-write', "
          "'write.update.mode'='copy-on-write', 'write.merge.mode'='copy-on-write'")

SCENARIOS: dict[str, tuple[list[str], Callable[[Recorder], None]]] = {}


def scenario(*features: str):
    def register(function: Callable[[Recorder], None]):
        SCENARIOS[function.__name__] = (list(features), function)
        return function
    return register


@scenario("v2", "merge-on-read DELETE/UPDATE/MERGE", "position deletes (file-scoped)",
          "identity + hour partitions", "tag", "branch with its own commits")
def mor_partitioned(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint, category string, amount double, ts timestamp)
              USING iceberg PARTITIONED BY (category, hours(ts)) TBLPROPERTIES ({V2_MOR})""")
    rows = """SELECT id, element_at(array('a', 'b', 'c'), cast(id % 3 + 1 AS int)), id * 1.5,
              timestamp'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, cast(id % 4 AS int))
              FROM range({lo}, {hi})"""
    w.sql("INSERT INTO {t} " + rows.format(lo=1, hi=61), "append ids 1..60")
    w.sql("INSERT INTO {t} " + rows.format(lo=61, hi=121), "append ids 61..120")
    w.sql("DELETE FROM {t} WHERE id % 7 = 0", "MOR delete ids divisible by 7")
    w.sql("UPDATE {t} SET amount = amount + 100 WHERE id % 10 = 3", "MOR update")
    w.spark.sql("""SELECT * FROM VALUES (5L, 'u', 55.5D), (6L, 'd', 0D), (8L, 'u', 88.0D),
                   (200L, 'i', 1.0D), (201L, 'i', 2.0D) AS s(id, op, amount)""") \
        .createOrReplaceTempView("mor_src")
    w.sql("""MERGE INTO {t} t USING mor_src s ON t.id = s.id
             WHEN MATCHED AND s.op = 'd' THEN DELETE
             WHEN MATCHED THEN UPDATE SET t.amount = s.amount
             WHEN NOT MATCHED THEN INSERT (id, category, amount, ts)
                  VALUES (s.id, 'a', s.amount, timestamp'2024-01-02 05:00:00')""",
          "MOR merge: update, delete, insert")
    w.sql("DELETE FROM {t} WHERE category = 'c' AND id < 40",
          "second MOR delete on files that already have deletes")
    w.sql("ALTER TABLE {t} CREATE TAG before_branch", "tag")
    w.sql("ALTER TABLE {t} CREATE BRANCH audit", "branch")
    w.sql("INSERT INTO {t}.branch_audit VALUES (900, 'z', 9.0, timestamp'2024-03-01 01:00:00')",
          "append on branch audit")
    w.sql("DELETE FROM {t}.branch_audit WHERE id = 1", "MOR delete on branch audit")
    w.sql("DELETE FROM {t} WHERE id IN (2, 4, 10)", "MOR delete on main after branching")
    w.sql("UPDATE {t} SET category = 'b' WHERE id = 11",
          "MOR update moving a row to another partition")


@scenario("v2", "copy-on-write DELETE/UPDATE/MERGE", "INSERT OVERWRITE of a partition",
          "dynamic overwrite", "metadata-only delete of whole partitions",
          "identity + month partitions")
def cow_partitioned(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint, region string, qty int, d date) USING iceberg
              PARTITIONED BY (region, months(d)) TBLPROPERTIES ({V2_COW})""")
    rows = """SELECT id, element_at(array('east', 'west', 'north'), cast(id % 3 + 1 AS int)),
              cast(id * 2 AS int), date_add(date'2024-01-15', cast(id % 3 * 31 AS int))
              FROM range({lo}, {hi})"""
    w.sql("INSERT INTO {t} " + rows.format(lo=1, hi=46), "append ids 1..45")
    w.sql("INSERT INTO {t} " + rows.format(lo=46, hi=91), "append ids 46..90")
    w.sql("DELETE FROM {t} WHERE id % 5 = 0", "COW delete")
    w.sql("UPDATE {t} SET qty = qty * 10 WHERE region = 'east' AND id < 30", "COW update")
    w.spark.sql("""SELECT * FROM VALUES (1L, 'u', 1000), (2L, 'd', 0), (300L, 'i', 3)
                   AS s(id, op, qty)""").createOrReplaceTempView("cow_src")
    w.sql("""MERGE INTO {t} t USING cow_src s ON t.id = s.id
             WHEN MATCHED AND s.op = 'd' THEN DELETE
             WHEN MATCHED THEN UPDATE SET t.qty = s.qty
             WHEN NOT MATCHED THEN INSERT (id, region, qty, d)
                  VALUES (s.id, 'east', s.qty, date'2024-02-20')""", "COW merge")
    w.sql("""INSERT OVERWRITE {t} PARTITION (region = 'west')
             SELECT id, cast(id AS int), date'2024-03-03' FROM range(500, 505)""",
          "static INSERT OVERWRITE of partition region=west")
    w.spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    w.sql("""INSERT OVERWRITE {t} SELECT id, 'east', 7, date'2024-02-10' FROM range(600, 603)""",
          "dynamic INSERT OVERWRITE of partition (east, 2024-02)")
    w.spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    w.sql("DELETE FROM {t} WHERE region = 'north'", "metadata-only delete of region=north")
    w.sql("INSERT INTO {t} VALUES (700, 'north', 1, date'2024-05-05')", "append")


@scenario("v2", "equality deletes (Iceberg Java RowDelta)", "key-only equality deletes",
          "full-row equality payload", "upsert: deletes of absent keys with new rows",
          "equality delete in the same commit as data with that key", "null keys",
          "multi-column equality key", "identifier fields", "mixed with Spark position deletes")
def equality_deletes(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id int NOT NULL, name string, val double, part string)
              USING iceberg PARTITIONED BY (part) TBLPROPERTIES ({V2_MOR})""")
    w.sql("ALTER TABLE {t} SET IDENTIFIER FIELDS id", "identifier fields")

    def row(i: int, part: str, name: str | None = "n", val: float | None = None):
        return {"id": i, "name": None if name is None else f"{name}{i}",
                "val": float(i) if val is None else val, "part": part}

    a = [row(i, "a") for i in range(1, 13)]
    b = [row(i, "b") for i in range(13, 25)]
    w.append("append ids 1..24 in two partitions", [w.data_file(a), w.data_file(b)])
    w.row_delta("key-only equality delete of ids 2, 3 in part a", deletes=[
        w.equality_deletes(["id"], [{"id": 2, "part": "a"}, {"id": 3, "part": "a"}])])
    w.row_delta("full-row equality delete of ids 14, 15 in part b", deletes=[
        w.equality_deletes(["id"], [row(14, "b"), row(15, "b")], full_row=True)])
    w.row_delta("upsert: new id 4 and 30, deletes of 4 (present) and 99 (absent)",
                data=[w.data_file([row(4, "a", "new", 40.0), row(30, "a")])],
                deletes=[w.equality_deletes(["id"], [{"id": 4, "part": "a"},
                                                     {"id": 99, "part": "a"}])])
    w.row_delta("data id 40 and an equality delete of 40 in one commit (must not apply)",
                data=[w.data_file([row(40, "b")])],
                deletes=[w.equality_deletes(["id"], [{"id": 40, "part": "b"}])])
    w.row_delta("rows with null names",
                data=[w.data_file([row(50, "a", None), row(51, "a", "x"), row(52, "a", None)])])
    w.row_delta("equality delete on name IS NULL in part a", deletes=[
        w.equality_deletes(["name"], [{"name": None, "part": "a"}])])
    w.row_delta("multi-column equality delete (id, name)", deletes=[
        w.equality_deletes(["id", "name"], [{"id": 51, "name": "x51", "part": "a"},
                                            {"id": 6, "name": "wrong", "part": "a"},
                                            {"id": 7, "name": "n7", "part": "a"}])])
    w.sql("DELETE FROM {t} WHERE id = 1", "Spark MOR position delete")
    w.sql("UPDATE {t} SET val = -1 WHERE id = 20", "Spark MOR update")
    w.row_delta("equality delete of an already deleted key (no-op)", deletes=[
        w.equality_deletes(["id"], [{"id": 2, "part": "a"}])])
    w.row_delta("full-row equality delete for a key that does not exist", deletes=[
        w.equality_deletes(["id"], [row(77, "b")], full_row=True)])


@scenario("v2", "global equality deletes (unpartitioned spec after partitioning)",
          "partition spec evolution", "partition-scoped equality delete", "null keys")
def equality_global(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id int, name string, part string) USING iceberg
              TBLPROPERTIES ({V2_MOR})""")
    w.sql("""INSERT INTO {t} SELECT cast(id AS int), concat('n', id),
             if(id % 2 = 0, 'a', 'b') FROM range(1, 21)""", "unpartitioned append ids 1..20")
    w.sql("ALTER TABLE {t} ADD PARTITION FIELD part", "partition by part")
    w.sql("""INSERT INTO {t} SELECT cast(id AS int), if(id = 27, NULL, concat('n', id)),
             if(id % 2 = 0, 'a', 'b') FROM range(21, 41)""", "partitioned append ids 21..40")
    w.row_delta("global equality delete (spec 0) of ids 3, 25, 33", deletes=[
        w.equality_deletes(["id"], [{"id": 3}, {"id": 25}, {"id": 33}], spec_id=0)])
    w.row_delta("partition-scoped equality delete of ids 22, 23 in part a", deletes=[
        w.equality_deletes(["id"], [{"id": 22, "part": "a"}, {"id": 23, "part": "a"}])])
    w.sql("DELETE FROM {t} WHERE id = 4", "Spark MOR delete")
    w.row_delta("global equality delete on name IS NULL", deletes=[
        w.equality_deletes(["name"], [{"name": None}], spec_id=0)])
    w.sql("INSERT INTO {t} VALUES (3, 'back', 'b')", "re-insert id 3 after its global delete")


@scenario("v2", "position deletes carrying the deleted row", "delete of a row added in the "
          "same commit", "row deleted twice by two delete files", "delete file for several "
          "data files")
def position_deletes_with_rows(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id int, name string, part string) USING iceberg
              PARTITIONED BY (part) TBLPROPERTIES ({V2_MOR})""")

    def rows(lo: int, hi: int, part: str):
        return [{"id": i, "name": f"n{i}", "part": part} for i in range(lo, hi)]

    file_a = w.data_file(rows(1, 11, "a"))
    file_b = w.data_file(rows(11, 21, "b"))
    w.append("append ids 1..20 (files A, B)", [file_a, file_b])
    path_a, path_b = file_a.location(), file_b.location()

    def pos(path: str, p: int, source: list[dict]):
        return {"file_path": path, "pos": p, "row": source[p]}

    a, b = rows(1, 11, "a"), rows(11, 21, "b")
    w.row_delta("position deletes with rows: A pos 1, 2", deletes=[
        w.position_deletes([pos(path_a, 1, a), pos(path_a, 2, a)], {"part": "a"})])
    c = rows(21, 26, "a")
    file_c = w.data_file(c)
    w.row_delta("new file C and one delete file for C pos 0 (same commit) and A pos 4",
                data=[file_c],
                deletes=[w.position_deletes([pos(file_c.location(), 0, c), pos(path_a, 4, a)],
                                            {"part": "a"})])
    w.row_delta("delete B pos 3", deletes=[w.position_deletes([pos(path_b, 3, b)],
                                                                {"part": "b"})])
    w.row_delta("delete B pos 3 again and pos 4", deletes=[
        w.position_deletes([pos(path_b, 3, b), pos(path_b, 4, b)], {"part": "b"})])
    w.row_delta("two delete files in one commit both deleting B pos 6", deletes=[
        w.position_deletes([pos(path_b, 6, b)], {"part": "b"}),
        w.position_deletes([pos(path_b, 6, b), pos(path_b, 7, b)], {"part": "b"})])
    w.sql("DELETE FROM {t} WHERE id IN (9, 19)", "Spark MOR delete (no row payload)")
    w.sql("INSERT INTO {t} VALUES (30, 'n30', 'b')", "append")
    live = w.positions("id = 30")
    w.row_delta("position delete with row of the Spark-written row 30", deletes=[
        w.position_deletes(live, {"part": "b"})])


@scenario("v2", "partition-scoped position deletes", "rewrite_position_delete_files",
          "rewrite_data_files", "rewrite_manifests", "expire_snapshots")
def maintenance(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint, grp string, v int) USING iceberg
              PARTITIONED BY (grp) TBLPROPERTIES ({V2_MOR},
              'write.delete.granularity'='partition')""")
    for lo in (1, 31, 61):
        w.sql(f"""INSERT INTO {{t}} SELECT id, if(id % 2 = 0, 'even', 'odd'), cast(id AS int)
                  FROM range({lo}, {lo + 30})""", f"append ids {lo}..{lo + 29}")
    w.sql("DELETE FROM {t} WHERE id % 9 = 0", "MOR delete (partition-scoped)")
    w.sql("UPDATE {t} SET v = -v WHERE id % 11 = 0", "MOR update (partition-scoped)")
    w.sql("DELETE FROM {t} WHERE id BETWEEN 40 AND 45", "second MOR delete")
    w.sql("CALL local.system.rewrite_position_delete_files(table => '{name}', "
          "options => map('rewrite-all', 'true'))", "rewrite_position_delete_files")
    w.sql("DELETE FROM {t} WHERE id = 1", "MOR delete after delete rewrite")
    w.sql("CALL local.system.rewrite_data_files(table => '{name}', "
          "options => map('rewrite-all', 'true'))", "rewrite_data_files")
    w.sql("INSERT INTO {t} VALUES (1000, 'odd', 1), (1001, 'even', 2)", "append")
    w.sql("CALL local.system.rewrite_manifests('{name}')", "rewrite_manifests")
    w.sql("DELETE FROM {t} WHERE id = 1000", "MOR delete after manifest rewrite")
    newest = w.table().currentSnapshot().timestampMillis()
    cutoff = dt.datetime.fromtimestamp(newest / 1000, dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S.%f")  # the session time zone is UTC
    w.sql(f"CALL local.system.expire_snapshots(table => '{{name}}', "
          f"older_than => TIMESTAMP '{cutoff}', retain_last => 3)", "expire_snapshots")
    w.sql("INSERT INTO {t} VALUES (2000, 'even', 5)", "append after expiry")


@scenario("v2", "add/rename/widen columns", "nested column added", "partition spec evolution",
          "truncate + bucket partitions", "dropped partition field")
def evolution(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id int, name string, score int) USING iceberg
              TBLPROPERTIES ({V2_MOR})""")
    w.sql("""INSERT INTO {t} SELECT cast(id AS int), concat('name', id), cast(id * 3 AS int)
             FROM range(1, 11)""", "append ids 1..10")
    w.sql("ALTER TABLE {t} ADD COLUMN note string", "add column note")
    w.sql("INSERT INTO {t} VALUES (11, 'name11', 33, 'hello'), (12, 'name12', 36, NULL)",
          "append with note")
    w.sql("DELETE FROM {t} WHERE id = 2", "MOR delete in an old-schema file")
    w.sql("ALTER TABLE {t} RENAME COLUMN name TO full_name", "rename name -> full_name")
    w.sql("ALTER TABLE {t} ALTER COLUMN score TYPE bigint", "widen score int -> bigint")
    w.sql("INSERT INTO {t} VALUES (13, 'name13', 5000000000, 'big')", "append a wide score")
    w.sql("ALTER TABLE {t} ADD PARTITION FIELD truncate(2, full_name)", "partition truncate")
    w.sql("INSERT INTO {t} VALUES (14, 'xy14', 1, 'p'), (15, 'zz15', 2, 'q')",
          "append in spec 1")
    w.sql("UPDATE {t} SET score = score + 1 WHERE id % 2 = 0", "MOR update across specs")
    w.sql("ALTER TABLE {t} ADD PARTITION FIELD bucket(4, id)", "partition bucket(4, id)")
    w.sql("ALTER TABLE {t} DROP PARTITION FIELD truncate(2, full_name)", "drop truncate")
    w.sql("INSERT INTO {t} SELECT cast(id AS int), concat('b', id), id, 'spec3' "
          "FROM range(16, 24)", "append in spec 3")
    w.sql("DELETE FROM {t} WHERE id BETWEEN 5 AND 17", "MOR delete across three specs")
    w.sql("ALTER TABLE {t} ADD COLUMN extra struct<a: int, b: string>", "add struct column")
    w.sql("INSERT INTO {t} VALUES (30, 'n30', 30, 'x', named_struct('a', 1, 'b', 'one'))",
          "append with struct")


@scenario("v2", "merge-on-read DML between schema changes", "identifier fields",
          "rename data -> payload", "widen n int -> bigint",
          "drop extra (string), re-add extra (int) under a new field id")
def column_evolution(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint NOT NULL, n int, data string, extra string)
              USING iceberg TBLPROPERTIES ({V2_MOR})""")
    w.sql("ALTER TABLE {t} SET IDENTIFIER FIELDS id", "identifier fields")
    w.sql("""INSERT INTO {t} SELECT id, cast(id AS int), concat('d', id), concat('e', id)
             FROM range(1, 2001)""", "append ids 1..2000")
    w.sql("UPDATE {t} SET data = concat(data, '+') WHERE id % 7 = 0", "MOR update of data")
    w.sql("ALTER TABLE {t} ADD COLUMN note string", "add column note")
    w.sql("""INSERT INTO {t} SELECT id, cast(id AS int), concat('d', id), NULL,
             concat('note', id) FROM range(2001, 2201)""", "append ids 2001..2200 with note")
    w.sql("UPDATE {t} SET note = 'touched' WHERE id % 11 = 0", "MOR update of note")
    w.sql("ALTER TABLE {t} RENAME COLUMN data TO payload", "rename data -> payload")
    w.sql("DELETE FROM {t} WHERE id % 13 = 0", "MOR delete after the rename")
    w.sql("UPDATE {t} SET payload = concat(payload, '!') WHERE id % 17 = 0",
          "MOR update of payload")
    w.sql("ALTER TABLE {t} ALTER COLUMN n TYPE bigint", "widen n int -> bigint")
    w.sql("""INSERT INTO {t} SELECT id, id + 5000000000, concat('w', id), 'x', NULL
             FROM range(2201, 2301)""", "append ids 2201..2300 with wide n")
    w.sql("UPDATE {t} SET n = n + 4000000000 WHERE id % 19 = 0", "MOR update of n beyond int")
    w.spark.sql("""SELECT * FROM VALUES (5L, 'u'), (14L, 'd'), (2250L, 'u'), (3000L, 'i'),
                   (3001L, 'i') AS s(id, op)""").createOrReplaceTempView("evo_src")
    w.sql("""MERGE INTO {t} t USING evo_src s ON t.id = s.id
             WHEN MATCHED AND s.op = 'd' THEN DELETE
             WHEN MATCHED THEN UPDATE SET t.payload = 'merged', t.extra = 'm'
             WHEN NOT MATCHED THEN INSERT (id, n, payload, extra, note)
                  VALUES (s.id, 1, 'new', 'e-new', 'n-new')""",
          "MOR merge: update, delete, insert")
    w.sql("ALTER TABLE {t} DROP COLUMN extra", "drop column extra (string)")
    w.sql("DELETE FROM {t} WHERE id % 23 = 0", "MOR delete after the drop")
    w.sql("ALTER TABLE {t} ADD COLUMN extra int", "re-add column extra (int, new field id)")
    w.sql("""INSERT INTO {t} SELECT id, id, concat('r', id), concat('note', id),
             cast(id AS int) FROM range(3100, 3200)""", "append ids 3100..3199 with extra")
    w.sql("UPDATE {t} SET extra = cast(id % 1000 AS int) WHERE id % 29 = 0",
          "MOR update of the new extra")
    w.spark.sql("""SELECT * FROM VALUES (29L, 'd'), (58L, 'u'), (3100L, 'u'), (4000L, 'i')
                   AS s(id, op)""").createOrReplaceTempView("evo_src2")
    w.sql("""MERGE INTO {t} t USING evo_src2 s ON t.id = s.id
             WHEN MATCHED AND s.op = 'd' THEN DELETE
             WHEN MATCHED THEN UPDATE SET t.extra = -1, t.payload = 'merged2'
             WHEN NOT MATCHED THEN INSERT (id, n, payload, note, extra)
                  VALUES (s.id, 2, 'new2', NULL, 4)""", "MOR merge with the new extra")
    w.sql("DELETE FROM {t} WHERE id BETWEEN 100 AND 150", "MOR delete of a range")
    w.sql("""INSERT INTO {t} SELECT id, id, concat('z', id), NULL, NULL
             FROM range(5000, 5050)""", "append ids 5000..5049")
    w.sql("UPDATE {t} SET note = concat(coalesce(note, ''), '*') WHERE id % 31 = 0",
          "MOR update of note across every schema's files")


@scenario("v1", "format v1 appends", "overwrites", "copy-on-write delete and update",
          "metadata-only delete", "year partitions")
def format_v1(w: Recorder) -> None:
    w.sql("""CREATE TABLE {t} (id bigint, d date, s string) USING iceberg
             PARTITIONED BY (years(d)) TBLPROPERTIES ('format-version'='1')""")
    w.sql("""INSERT INTO {t} SELECT id, date_add(date'2021-06-01', cast(id * 50 AS int)),
             concat('s', id) FROM range(1, 31)""", "append ids 1..30")
    w.sql("INSERT INTO {t} VALUES (101, date'2020-01-01', 'old')", "append a row in 2020")
    w.spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    w.sql("INSERT OVERWRITE {t} VALUES (200, date'2022-03-03', 'over')",
          "dynamic overwrite of year 2022")
    w.spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    w.sql("DELETE FROM {t} WHERE id % 4 = 0", "copy-on-write delete")
    w.sql("UPDATE {t} SET s = upper(s) WHERE id < 10", "copy-on-write update")
    w.sql("DELETE FROM {t} WHERE d < date'2021-01-01'", "metadata-only delete of year 2020")
    w.sql("INSERT INTO {t} VALUES (300, date'2025-01-01', 'late')", "append")


@scenario("v2 -> v3", "deletion vectors", "DVs superseding v2 position deletes",
          "DV replaced by a newer DV", "row lineage")
def v3_deletion_vectors(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint, grp string, payload string) USING iceberg
              PARTITIONED BY (grp) TBLPROPERTIES ({V2_MOR})""")
    w.sql("""INSERT INTO {t} SELECT id, if(id % 2 = 0, 'x', 'y'), concat('p', id)
             FROM range(1, 41)""", "append ids 1..40")
    w.sql("DELETE FROM {t} WHERE id IN (2, 3)", "v2 position delete")
    w.sql("ALTER TABLE {t} SET TBLPROPERTIES ('format-version'='3')", "upgrade to v3")
    w.sql("DELETE FROM {t} WHERE id IN (4, 5)", "DV written over v2 position deletes")
    w.sql("DELETE FROM {t} WHERE id IN (6, 7)", "DV replaced by a newer DV")
    w.sql("UPDATE {t} SET payload = 'updated' WHERE id % 5 = 0", "MOR update as DV")
    w.sql("""INSERT INTO {t} SELECT id, 'x', concat('q', id) FROM range(100, 110)""",
          "append after upgrade")
    w.spark.sql("""SELECT * FROM VALUES (100L, 'd'), (101L, 'u'), (500L, 'i') AS s(id, op)""") \
        .createOrReplaceTempView("dv_src")
    w.sql("""MERGE INTO {t} t USING dv_src s ON t.id = s.id
             WHEN MATCHED AND s.op = 'd' THEN DELETE
             WHEN MATCHED THEN UPDATE SET t.payload = 'merged'
             WHEN NOT MATCHED THEN INSERT (id, grp, payload) VALUES (s.id, 'y', 'new')""",
          "MOR merge as DVs")
    w.sql("DELETE FROM {t} WHERE id = 102", "DV on a file written in v3")


RICH_SCHEMA = """id bigint, i int, s string, dbl double, f float, dec decimal(10,2), d date,
    ts timestamp, ts_ntz timestamp_ntz, b boolean, bin binary,
    st struct<x: int, y: string>, l array<int>, m map<string, int>"""


def _rich_row(rng: random.Random, key: int) -> tuple[Any, ...]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.12 else value

    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    moment = base + dt.timedelta(seconds=rng.randrange(0, 5 * 86400),
                                 microseconds=rng.randrange(10**6))
    dbl = rng.choice([rng.uniform(-1e6, 1e6), float("nan"), 0.0, -0.0]) if rng.random() < 0.1 \
        else rng.uniform(-1e6, 1e6)
    return (
        key,
        maybe(rng.randrange(-2**31, 2**31)),
        maybe("".join(rng.choice("abcxyzé😀 ") for _ in range(rng.randrange(0, 12)))),
        maybe(dbl),
        maybe(rng.uniform(-100, 100)),
        maybe(Decimal(rng.randrange(-10**8, 10**8)) / 100),
        maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(0, 2000))),
        maybe(moment),
        maybe(moment.replace(tzinfo=None) + dt.timedelta(hours=3)),
        maybe(rng.random() < 0.5),
        maybe(bytearray(rng.randrange(256) for _ in range(rng.randrange(0, 6)))),
        maybe((maybe(rng.randrange(100)), maybe(f"y{rng.randrange(50)}"))),
        maybe([maybe(rng.randrange(10)) for _ in range(rng.randrange(0, 4))]),
        maybe({f"k{j}": maybe(rng.randrange(100)) for j in range(rng.randrange(0, 3))}),
    )


@scenario("v2", "seeded random mix", "rich schema: all primitive types, struct, list, map",
          "nulls and NaN", "bucket + day partitions", "merge-on-read then copy-on-write")
def random_mix(w: Recorder) -> None:
    rng = random.Random(20261122)
    w.sql(f"""CREATE TABLE {{t}} ({RICH_SCHEMA}) USING iceberg
              PARTITIONED BY (bucket(4, id), days(ts)) TBLPROPERTIES ({V2_MOR})""")
    next_key = 1

    def frame(keys: list[int]):
        return w.spark.createDataFrame([_rich_row(rng, k) for k in keys], RICH_SCHEMA)

    def live_ids() -> list[int]:
        return sorted(r.id for r in w.rows("SELECT id FROM {t}"))

    for step in range(16):
        if step == 10:
            w.sql(f"ALTER TABLE {{t}} SET TBLPROPERTIES ({V2_COW})", "switch to copy-on-write")
        ids = live_ids()
        op = "insert" if step < 2 or not ids else rng.choice(["insert", "delete", "update",
                                                               "merge", "delete"])
        if op == "insert":
            keys = list(range(next_key, next_key + rng.randrange(20, 60)))
            next_key += len(keys)
            frame(keys).writeTo(w.ident).append()
            w.capture(f"random insert of {len(keys)} rows")
        elif op == "delete":
            victims = rng.sample(ids, k=min(len(ids), rng.randrange(1, 8)))
            w.sql(f"DELETE FROM {{t}} WHERE id IN ({', '.join(map(str, victims))})",
                  f"random delete of {len(victims)} ids")
        elif op == "update":
            victims = rng.sample(ids, k=min(len(ids), rng.randrange(1, 8)))
            w.sql(f"""UPDATE {{t}} SET s = concat(coalesce(s, ''), '+'), dbl = dbl * 2,
                      l = array(1, 2) WHERE id IN ({', '.join(map(str, victims))})""",
                  f"random update of {len(victims)} ids")
        else:
            matched = rng.sample(ids, k=min(len(ids), rng.randrange(1, 6)))
            fresh = list(range(next_key, next_key + rng.randrange(1, 6)))
            next_key += len(fresh)
            frame(matched + fresh).createOrReplaceTempView("rich_src")
            w.sql("""MERGE INTO {t} t USING rich_src s ON t.id = s.id
                     WHEN MATCHED AND s.b THEN DELETE
                     WHEN MATCHED THEN UPDATE SET *
                     WHEN NOT MATCHED THEN INSERT *""",
                  f"random merge of {len(matched)} matched and {len(fresh)} new ids")


@scenario("v2", "ORC data and delete files", "Avro data and delete files",
          "Parquet, ORC and Avro files in one table")
def file_formats(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint, name string, amount decimal(9,2), d date)
              USING iceberg PARTITIONED BY (bucket(2, id))
              TBLPROPERTIES ({V2_MOR}, 'write.format.default'='orc')""")
    w.sql("""INSERT INTO {t} SELECT id, concat('orc', id), cast(id * 1.25 AS decimal(9,2)),
             date_add(date'2023-01-01', cast(id AS int)) FROM range(1, 31)""", "ORC append")
    w.sql("DELETE FROM {t} WHERE id % 6 = 0", "MOR delete with ORC delete files")
    w.sql("ALTER TABLE {t} SET TBLPROPERTIES ('write.format.default'='avro')", "switch to Avro")
    w.sql("""INSERT INTO {t} SELECT id, concat('avro', id), cast(id AS decimal(9,2)),
             date_add(date'2023-06-01', cast(id AS int)) FROM range(31, 51)""", "Avro append")
    w.sql("DELETE FROM {t} WHERE id % 7 = 0", "MOR delete with Avro delete files")
    w.sql("UPDATE {t} SET name = concat(name, '!') WHERE id % 5 = 0", "MOR update in Avro")
    w.sql("ALTER TABLE {t} SET TBLPROPERTIES ('write.format.default'='parquet')",
          "back to Parquet")
    w.sql("INSERT INTO {t} VALUES (100, 'pq', 1.00, date'2024-01-01')", "Parquet append")
    w.sql("DELETE FROM {t} WHERE id IN (1, 31, 100)", "MOR delete across three formats")


@scenario("v2 -> v3", "pages of 100 rows (write.parquet.page-row-limit)",
          "scattered position deletes, equality deletes and DVs: rows read by page",
          "flat and nested columns", "identifier fields")
def small_pages(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint NOT NULL, grp string, note string, amount double,
              dec decimal(10,2), ts timestamp, st struct<x: int, y: string>, l array<int>)
              USING iceberg TBLPROPERTIES ({V2_MOR}, 'write.parquet.page-row-limit'='100',
              'write.distribution-mode'='none')""")
    w.sql("ALTER TABLE {t} SET IDENTIFIER FIELDS id", "identifier fields")
    w.sql("""INSERT INTO {t} SELECT id, concat('g', id % 7), concat('note ', id),
             if(id % 17 = 0, NULL, id * 1.5), CAST(id AS decimal(10,2)) / 100,
             timestamp'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id),
             if(id % 13 = 0, NULL, named_struct('x', CAST(id % 100 AS int),
                                                'y', concat('y', id))),
             if(id % 11 = 0, NULL, array(CAST(id % 5 AS int)))
             FROM range(0, 3000)""", "append 3,000 rows in pages of 100")
    w.sql("DELETE FROM {t} WHERE id % 211 = 7", "position deletes of 14 scattered rows")
    w.sql("UPDATE {t} SET note = concat(note, ' u') WHERE id % 307 = 11",
          "update of 10 scattered rows")
    w.row_delta("equality deletes of 5 scattered keys", deletes=[
        w.equality_deletes(["id"], [{"id": k} for k in (5, 777, 1500, 2222, 2999)])])
    w.sql("ALTER TABLE {t} SET TBLPROPERTIES ('format-version'='3')", "upgrade to v3")
    w.sql("DELETE FROM {t} WHERE id IN (100, 1234, 2500)", "DVs of 3 rows")
    w.sql("UPDATE {t} SET amount = -amount WHERE id % 401 = 3", "update of 8 rows as DVs")


# -- what 2026's writers leave (issue 34) ---------------------------------------------------

def _format(version: int) -> str:
    """Merge-on-read table properties at format `version`."""
    return V2_MOR.replace("'format-version'='2'", f"'format-version'='{version}'")


def _keyed_table(w: Recorder, version: int) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint NOT NULL, v string, n int) USING iceberg
              TBLPROPERTIES ({_format(version)})""")
    w.sql("ALTER TABLE {t} SET IDENTIFIER FIELDS id", "identifier fields")


def _row(key: int, version: str) -> dict[str, Any]:
    return {"id": key, "v": f"{version}-{key}", "n": key * 10}


def _keys(*keys: int) -> list[dict[str, Any]]:
    return [{"id": k} for k in keys]


def _at(data_file: Any, *positions: int) -> list[dict[str, Any]]:
    """Positions of a data file the corpus wrote itself (its rows in the order given)."""
    return [{"file_path": str(data_file.location()), "pos": p} for p in positions]


def _by_position(w: Recorder, version: int, deletes: list[dict[str, Any]]) -> list[Any]:
    """Deletes by position as the table's format writes them: DVs in v3 (one per data file,
    which must have none yet), one position delete file in v2."""
    if version >= 3:
        return w.deletion_vectors(deletes)
    return [w.position_deletes(deletes, {}, with_row=False)]


def _staged_upserts(w: Recorder, version: int) -> None:
    """Flink's `ConvertEqualityDeletes` maintenance (apache/iceberg #16831-#17189): upserts
    go to a `staging` branch as equality deletes with their new rows; the job resolves the
    keys through a primary-key index and commits the staged data files to `main` with the
    deletes by position of the rows they replaced (DVs in v3, position deletes in v2); the
    same-branch variant replaces equality delete files by the equivalent DVs in one commit,
    which changes no row."""
    _keyed_table(w, version)
    base = [w.data_file([_row(k, "v0") for k in range(lo, lo + 5)]) for lo in (1, 6, 11, 16)]
    w.append("append ids 1..20 in four files of five", base)
    w.manage("branch staging at main", lambda m: m.createBranch("staging"))
    staged = [w.data_file([_row(3, "s1"), _row(4, "s1"), _row(21, "s1")]),
              w.data_file([_row(4, "s2"), _row(5, "s2"), _row(22, "s2")])]
    w.row_delta("staged upsert of ids 3, 4, 21 on staging", data=[staged[0]],
                deletes=[w.equality_deletes(["id"], _keys(3, 4, 21))], branch="staging")
    w.row_delta("staged upsert of ids 4 (again), 5, 22 on staging", data=[staged[1]],
                deletes=[w.equality_deletes(["id"], _keys(4, 5, 22))], branch="staging")
    w.row_delta("converted onto main: the staged files, the replaced rows deleted by position",
                data=staged, deletes=_by_position(
                    w, version, _at(base[0], 2, 3, 4) + _at(staged[0], 1)))
    w.manage("staging reset to main", lambda m: m.replaceBranch("staging", "main"))
    upsert = w.data_file([_row(6, "u1"), _row(7, "u1")])
    keys = w.equality_deletes(["id"], _keys(6, 7))
    w.row_delta("upsert of ids 6, 7 on main by equality deletes", data=[upsert], deletes=[keys])
    w.row_delta("same-branch conversion: the equality deletes replaced by equivalent "
                "deletes by position (no row changes)",
                deletes=_by_position(w, version, _at(base[1], 0, 1)), removed_deletes=[keys])
    again = w.data_file([_row(6, "s3"), _row(11, "s3"), _row(16, "s3"), _row(23, "s3")])
    w.row_delta("staged upsert of ids 6, 11, 16, 23 on staging", data=[again],
                deletes=[w.equality_deletes(["id"], _keys(6, 11, 16, 23))], branch="staging")
    w.row_delta("converted onto main again, over a row the last conversion left",
                data=[again], deletes=_by_position(
                    w, version, _at(upsert, 0) + _at(base[2], 0) + _at(base[3], 0)))
    w.row_delta("equality delete of ids 8, 23 on main, left unconverted",
                deletes=[w.equality_deletes(["id"], _keys(8, 23))])


@scenario("v3", "identifier fields", "staged upserts: equality deletes on a staging branch",
          "conversion onto main: staged data files with DVs", "same-branch conversion: "
          "equality deletes replaced by equivalent DVs in one commit (no row changes)",
          "mixture: converted DVs and unconverted equality deletes")
def staged_upserts(w: Recorder) -> None:
    _staged_upserts(w, 3)


@scenario("v2", "identifier fields", "staged upserts: equality deletes on a staging branch",
          "conversion onto main: staged data files with position deletes",
          "same-branch conversion: equality deletes replaced by equivalent position deletes "
          "in one commit (no row changes)")
def staged_upserts_v2(w: Recorder) -> None:
    _staged_upserts(w, 2)


def _mixed_row_deltas(w: Recorder, version: int) -> None:
    """Flink's upsert writer, iceberg-rust's delta writer: one RowDelta deletes rows of its
    own data file by position (a key written more than once in the commit) and older rows
    by key (equality deletes, which never apply to the commit's own rows)."""
    _keyed_table(w, version)
    base = [w.data_file([_row(k, "v0") for k in range(lo, lo + 5)]) for lo in (1, 6)]
    w.append("append ids 1..10 in two files", base)
    first = w.data_file([_row(3, "a"), _row(3, "b"), _row(11, "a"), _row(3, "c"),
                         _row(11, "b"), _row(7, "a")])
    w.row_delta("one commit: id 3 written three times, 11 twice, 7 once; its own older "
                "versions deleted by position, the table's by key",
                data=[first], deletes=[*_by_position(w, version, _at(first, 0, 1, 2)),
                                       w.equality_deletes(["id"], _keys(3, 7, 11))])
    second = w.data_file([_row(3, "d"), _row(12, "a"), _row(12, "b"), _row(1, "a"),
                          _row(1, "b")])
    w.row_delta("again over id 3, a new key 12 twice and id 1 twice",
                data=[second], deletes=[*_by_position(w, version, _at(second, 1, 3)),
                                        w.equality_deletes(["id"], _keys(1, 3, 12))])
    w.row_delta("a delete by position of an older row and by key in one commit",
                deletes=[*_by_position(w, version, _at(base[1], 2)),
                         w.equality_deletes(["id"], _keys(11))])
    third = w.data_file([_row(5, "a"), _row(5, "b"), _row(13, "a")])
    w.row_delta("an upsert of id 5 twice and a new key 13, as the first",
                data=[third], deletes=[*_by_position(w, version, _at(third, 0)),
                                       w.equality_deletes(["id"], _keys(5, 13))])


@scenario("v2", "identifier fields", "mixed RowDelta: position deletes of the commit's own "
          "rows with equality deletes of older rows", "a key written more than once a commit")
def mixed_row_deltas(w: Recorder) -> None:
    _mixed_row_deltas(w, 2)


@scenario("v3", "identifier fields", "mixed RowDelta: DVs of the commit's own rows with "
          "equality deletes of older rows", "a key written more than once a commit")
def mixed_row_deltas_v3(w: Recorder) -> None:
    _mixed_row_deltas(w, 3)


@scenario("v2", "merge-on-read", "write-audit-publish: commits on a branch",
          "fast-forward of main to the branch", "cherry-pick onto main",
          "rollback of main")
def write_audit_publish(w: Recorder) -> None:
    w.sql(f"""CREATE TABLE {{t}} (id bigint, v string) USING iceberg
              TBLPROPERTIES ({V2_MOR})""")
    w.sql("INSERT INTO {t} SELECT id, concat('v', id) FROM range(1, 11)", "append ids 1..10")
    w.sql("ALTER TABLE {t} CREATE BRANCH audit", "branch audit")
    w.sql("INSERT INTO {t}.branch_audit SELECT id, concat('a', id) FROM range(11, 16)",
          "append ids 11..15 on audit")
    w.sql("DELETE FROM {t}.branch_audit WHERE id = 2", "MOR delete of id 2 on audit")
    w.manage("main fast-forwarded to audit", lambda m: m.fastForwardBranch("main", "audit"))
    w.sql("INSERT INTO {t}.branch_audit SELECT id, concat('a', id) FROM range(16, 19)",
          "append ids 16..18 on audit")
    picked = w.head("audit")
    w.sql("INSERT INTO {t} SELECT id, concat('m', id) FROM range(19, 21)",
          "append ids 19, 20 on main (main and audit diverge)")
    w.manage("audit's append cherry-picked onto main", lambda m: m.cherrypick(picked))
    w.sql("UPDATE {t} SET v = 'x' WHERE id = 3", "MOR update on main")
    rolled_back_to = w.head()
    w.sql("DELETE FROM {t} WHERE id = 4", "MOR delete on main, then rolled back")
    w.manage("main rolled back over the delete", lambda m: m.rollbackTo(rolled_back_to))
    w.sql("INSERT INTO {t} SELECT id, concat('m', id) FROM range(21, 23)",
          "append ids 21, 22 on main after the rollback")
