"""The mirror follows Iceberg schema changes by field id, on SQLite and PostgreSQL.

Each test opens the mirror on one schema, applies rows, then reopens it on the next schema
(a `Schema` source is the schema of every batch) and applies a batch, which carries the
DDL. Values are checked through `read_mirror`, the columns through the database's catalog.
The corpus tests at the end use `column_evolution`, a table Iceberg Java evolved.
"""

from __future__ import annotations

import logging
import sqlite3

import psycopg
import pyarrow as pa
import pytest
from mirror_read import fetch, mirror_columns, read_mirror

import meltwater.stream
from corpus.compare import row_multiset
from meltwater.planner.spec.types import INT, LONG, STRING, NestedField, Schema
from meltwater.planner.table.table_loading import load_table
from meltwater.sinks import Mirror
from meltwater.sinks.database import sqlite_path
from meltwater.sinks.errors import NullKeyError, SchemaChangeNotMirroredError

ID = NestedField(1, "id", LONG, required=True)


def schema(*fields: NestedField, schema_id: int = 0) -> Schema:
    return Schema((ID, *fields), schema_id, (1,))


def inserts(rows: list[dict], ordinal: int = 0) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    return (table.append_column("_change_type", pa.array(["INSERT"] * len(rows)))
            .append_column("_change_ordinal", pa.array([ordinal] * len(rows), pa.int32())))


def _execute(url: str, sql: str) -> None:
    if url.startswith("sqlite:"):
        with sqlite3.connect(sqlite_path(url)) as conn:
            conn.execute(sql)
    else:
        with psycopg.connect(url) as conn:
            conn.execute(sql)


def names(url: str, table: str = "t") -> list[str]:
    return [name for name, _ in mirror_columns(url, table)]


def declared(url: str, column: str, table: str = "t") -> str:
    return dict(mirror_columns(url, table))[column]


def rows(url: str, s: Schema, table: str = "t"):
    return row_multiset(read_mirror(url, table, s))


def test_a_rename_renames_the_column_and_keeps_its_values(database):
    v1 = schema(NestedField(2, "data", STRING))
    v2 = schema(NestedField(2, "payload", STRING), schema_id=1)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "data": "a"}, {"id": 2, "data": "b"}]))
    with Mirror(database, table="t", source=v2) as mirror:
        mirror.apply(1, inserts([{"id": 3, "payload": "c"}], 1))
    assert names(database) == ["id", "payload"]
    assert rows(database, v2) == row_multiset(pa.table({"id": [1, 2, 3],
                                                        "payload": ["a", "b", "c"]}))


def test_names_swapped_between_two_columns_follow_their_ids(database):
    v1 = schema(NestedField(2, "a", STRING), NestedField(3, "b", STRING))
    v2 = schema(NestedField(2, "b", STRING), NestedField(3, "a", STRING), schema_id=1)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "a": "two", "b": "three"}]))
    with Mirror(database, table="t", source=v2) as mirror:
        mirror.apply(1, inserts([{"id": 2, "b": "2", "a": "3"}], 1))
    assert sorted(names(database)) == ["a", "b", "id"]
    assert rows(database, v2) == row_multiset(pa.table({
        "id": [1, 2], "b": ["two", "2"], "a": ["three", "3"]}))


def test_a_dropped_then_re_added_name_is_a_new_empty_column_of_the_new_type(database):
    v1 = schema(NestedField(2, "extra", STRING))
    v2 = schema(NestedField(3, "extra", INT), schema_id=1)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "extra": "old text"}]))
    with Mirror(database, table="t", source=v2) as mirror:
        mirror.apply(1, inserts([{"id": 2, "extra": 7}], 1))
    assert names(database) == ["id", "extra"]
    assert declared(database, "extra") in ("INTEGER", "integer")
    assert rows(database, v2) == row_multiset(pa.table({"id": [1, 2], "extra": [None, 7]},
                                                       schema=pa.schema([("id", pa.int64()),
                                                                         ("extra", pa.int32())])))


def test_a_drop_drops_the_column(database):
    v1 = schema(NestedField(2, "extra", STRING), NestedField(3, "keep", STRING))
    v2 = schema(NestedField(3, "keep", STRING), schema_id=1)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "extra": "x", "keep": "k"}]))
    with Mirror(database, table="t", source=v2) as mirror:
        mirror.apply(1, inserts([{"id": 2, "keep": "k2"}], 1))
    assert names(database) == ["id", "keep"]


def test_keep_dropped_columns_keeps_it_warns_and_refuses_to_reuse_its_name(database, caplog):
    v1 = schema(NestedField(2, "extra", STRING))
    v2 = schema(schema_id=1)
    v3 = schema(NestedField(3, "extra", INT), schema_id=2)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "extra": "x"}]))
    with caplog.at_level(logging.WARNING), \
            Mirror(database, table="t", source=v2, keep_dropped_columns=True) as mirror:
        mirror.apply(1, inserts([{"id": 2}], 1))
    assert "column extra was dropped from the given schema (id 1) and is kept" in caplog.text
    assert sorted(fetch(database, 'SELECT id, extra FROM "t"')) == [(1, "x"), (2, None)]
    with Mirror(database, table="t", source=v3, keep_dropped_columns=True) as mirror, \
            pytest.raises(SchemaChangeNotMirroredError,
                          match=r"mirror table t: field id 3 is to be added as column 'extra', "
                                r"but a column the mirror does not own"):
        mirror.apply(2, inserts([{"id": 3, "extra": 1}], 2))


def test_widening_alters_the_type_in_postgresql_and_nothing_in_sqlite(database):
    v1 = schema(NestedField(2, "n", INT))
    v2 = schema(NestedField(2, "n", LONG), schema_id=1)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "n": 5}]))
    before = declared(database, "n")
    with Mirror(database, table="t", source=v2) as mirror:
        mirror.apply(1, inserts([{"id": 2, "n": 5_000_000_000}], 1))
    after = declared(database, "n")
    assert (before, after) in ((("integer", "bigint"), ("INTEGER", "INTEGER")))
    assert rows(database, v2) == row_multiset(pa.table({"id": [1, 2], "n": [5, 5_000_000_000]}))


def test_the_ddl_rolls_back_with_a_batch_that_fails(database):
    v1 = schema(NestedField(2, "data", STRING))
    v2 = schema(NestedField(2, "payload", STRING), NestedField(3, "note", STRING), schema_id=1)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "data": "a"}]))
    with Mirror(database, table="t", source=v2) as mirror:
        with pytest.raises(NullKeyError):
            mirror.apply(1, inserts([{"id": None, "payload": "b", "note": "n"}], 1))
        assert names(database) == ["id", "data"]
        assert fetch(database, "SELECT column_name FROM meltwater_columns "
                               "ORDER BY field_id") == [("id",), ("data",)]
        mirror.apply(1, inserts([{"id": 2, "payload": "b", "note": "n"}], 1))
    assert names(database) == ["id", "payload", "note"]


def test_the_record_survives_a_restart_and_a_table_without_one_is_bootstrapped(
        sqlite_database, caplog):
    url = sqlite_database
    with sqlite3.connect(sqlite_path(url)) as conn:  # as older code left it after a rename
        conn.execute('CREATE TABLE "t" ("id" INTEGER NOT NULL, "data" TEXT, "payload" TEXT, '
                     'PRIMARY KEY ("id"))')
        conn.execute("INSERT INTO t VALUES (1, 'stale', NULL)")
    v2 = schema(NestedField(2, "payload", STRING), schema_id=1)
    with caplog.at_level(logging.WARNING), Mirror(url, table="t", source=v2) as mirror:
        mirror.apply(0, inserts([{"id": 1, "payload": "p"}]))
    assert "recorded 2 column(s) by name" in caplog.text
    assert "left alone, not written: data" in caplog.text
    assert fetch(url, "SELECT field_id, column_name FROM meltwater_columns "
                      "ORDER BY field_id") == [(1, "id"), (2, "payload")]
    v3 = schema(NestedField(2, "body", STRING), schema_id=2)
    with Mirror(url, table="t", source=v3) as mirror:  # a restart: the record, not names
        mirror.apply(1, inserts([{"id": 2, "body": "q"}], 1))
    assert names(url) == ["id", "data", "body"]
    assert sorted(fetch(url, 'SELECT id, data, body FROM "t"')) == [(1, "stale", "p"),
                                                                    (2, None, "q")]


def test_ddl_the_database_refuses_fails_with_one_line_naming_the_column(database):
    v1 = schema(NestedField(2, "extra", STRING))
    v2 = schema(schema_id=1)
    with Mirror(database, table="t", source=v1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "extra": "x"}]))
    _execute(database, "CREATE VIEW v AS SELECT extra FROM t")  # unquoted: no SQLite fallback
    with Mirror(database, table="t", source=v2) as mirror:
        with pytest.raises(SchemaChangeNotMirroredError,
                           match=r"^mirror table t: (sqlite|postgresql) cannot drop column "
                                 r"'extra': [^\n]*$"):
            mirror.apply(1, inserts([{"id": 2}], 1))
        assert mirror.reached().batch_id == 0  # nothing of the batch applied
    assert names(database) == ["id", "extra"]


# -- on a table Iceberg Java evolved ----------------------------------------------------------


def _main(metadata) -> list[int]:
    return [s.snapshot_id for s in reversed(metadata.ancestors(metadata.current_snapshot_id))]


def _first_with(metadata, main: list[int], name: str) -> int:
    """The index in `main` of the first snapshot whose schema has column `name`."""
    return next(i for i, sid in enumerate(main)
                if any(f.name == name for f in metadata.schema_for(
                    metadata.snapshot(sid)).fields))


def test_a_batch_lacking_a_column_its_commit_has_is_refused(corpus, sqlite_database):
    """A stream started before ADD COLUMN note would carry no `note`: refused, not nulls."""
    scenario = corpus.scenarios["column_evolution"]
    metadata = load_table(scenario.location).metadata
    main = _main(metadata)
    at = _first_with(metadata, main, "note")
    batch = meltwater.stream.changes(scenario.location, to_snapshot_id=main[at]).read_all()
    with Mirror(sqlite_database, table="e", source=scenario.location) as mirror, \
            pytest.raises(SchemaChangeNotMirroredError, match=r"lacks column 'note' \(field id 5\)"
                                                         r".*restart the stream"):
        mirror.apply(0, batch.drop_columns(["note"]))


def test_a_name_without_field_id_that_two_ids_had_is_refused(corpus, sqlite_database):
    """Before the drop, `extra` was a string (field 4); now it is an int (field 6): a batch
    of those commits without field ids cannot say which it means."""
    scenario = corpus.scenarios["column_evolution"]
    metadata = load_table(scenario.location).metadata
    main = _main(metadata)
    batch = meltwater.stream.changes(scenario.location, to_snapshot_id=main[1]).read_all()
    spark_like = pa.table({n: batch.column(n) for n in batch.column_names})  # no field ids
    with Mirror(sqlite_database, table="e", source=scenario.location) as mirror, \
            pytest.raises(SchemaChangeNotMirroredError, match=r"batch column 'extra' has no field "
                                                         r"id, and the name is field 4 and 6"):
        mirror.apply(0, spark_like)
    with Mirror(sqlite_database, table="e", source=scenario.location) as mirror:
        mirror.apply(0, batch)  # with field ids: mirrored as the commit's schema says
    truth = scenario.snapshot(main[1]).rows()
    then = metadata.schema_for(metadata.snapshot(main[1]))
    assert row_multiset(read_mirror(sqlite_database, "e", then)) == row_multiset(truth)
