"""Opening a mirror: URLs, the registry, key columns, the table's shape, tolerant input."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from mirror_read import fetch, read_mirror

import meltwater.stream
from corpus.compare import row_multiset
from meltwater.planner.spec.types import INT, LONG, STRING, NestedField, PrimitiveType, Schema
from meltwater.planner.table.table_loading import load_table
from meltwater.sinks import Mirror, Sink, open_sink, sink_schemes
from meltwater.sinks.database import sqlite_path
from meltwater.sinks.errors import (
    InvalidChangesError,
    InvalidKeyColumnError,
    InvalidSinkUrlError,
    MirrorTableMismatchError,
    MissingKeyColumnsError,
    SinkUnavailableError,
)

V1 = Schema((NestedField(1, "id", LONG, required=True), NestedField(2, "name", STRING)),
            identifier_field_ids=(1,))
V2 = Schema((*V1.fields, NestedField(3, "note", STRING)), 1, (1,))


def inserts(rows: list[dict], ordinal: int = 0) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    return (table.append_column("_change_type", pa.array(["INSERT"] * len(rows)))
            .append_column("_change_ordinal", pa.array([ordinal] * len(rows), pa.int32())))


def test_sqlite_urls():
    assert sqlite_path("sqlite:///var/lib/m.db") == "/var/lib/m.db"
    assert sqlite_path("sqlite:////var/lib/m.db") == "/var/lib/m.db"  # SQLAlchemy's form
    assert sqlite_path("sqlite:///:memory:") == ":memory:"
    for bad, why in [("sqlite://host/m.db", "has no host"), ("sqlite:///", "absolute path"),
                     ("sqlite:///m.db?mode=ro", "no query")]:
        with pytest.raises(InvalidSinkUrlError, match=why):
            sqlite_path(bad)


def test_bad_urls_are_one_line_errors(tmp_path):
    with pytest.raises(InvalidSinkUrlError,
                       match=r"no sink for URL scheme 'mysql'.*known: postgres"):
        open_sink("mysql://u:secret@h/db", table="t", source=V1)
    with pytest.raises(InvalidSinkUrlError, match=r"postgresql://u:\*\*\*@h:x/db: Port"):
        Mirror("postgresql://u:secret@h:x/db", table="t", source=V1)
    with pytest.raises(SinkUnavailableError, match=r"cannot connect to postgresql://u:\*\*\*@"
                                              r"127\.0\.0\.1:1/db"):
        Mirror("postgresql://u:secret@127.0.0.1:1/db", table="t", source=V1)
    with pytest.raises(SinkUnavailableError, match="cannot open SQLite database"):
        Mirror(f"sqlite://{tmp_path}/missing/dir/m.db", table="t", source=V1)


def test_the_registry_opens_mirrors_by_scheme(tmp_path, pg_database):
    assert {"sqlite", "postgres", "postgresql"} <= set(sink_schemes())
    sink = open_sink(f"sqlite://{tmp_path}/m.db", table="t", source=V1)
    assert isinstance(sink, Sink) and isinstance(sink, Mirror) and sink.name == "sqlite"
    sink.close()
    sink = open_sink(pg_database.replace("postgresql://", "postgres://"), table="t", source=V1)
    assert sink.name == "postgresql"
    sink.close()
    with open_sink("sqlite:///:memory:", table="t", source=V1) as memory:
        memory.apply(0, inserts([{"id": 1, "name": "a"}]))
        assert memory.reached().batch_id == 0


def test_key_columns_are_needed_and_must_exist(corpus, sqlite_database):
    location = corpus.scenarios["evolution"].location  # no identifier fields
    with pytest.raises(MissingKeyColumnsError, match=f"table {location} has no identifier fields "
                                                "and no key columns were given: pass "
                                                r"key_columns=\[...\]"):
        Mirror(sqlite_database, table="t", source=location)
    with pytest.raises(InvalidKeyColumnError, match="key column 'nope' is not a top-level column "
                                               f"of table {location}.*full_name"):
        Mirror(sqlite_database, table="t", source=location, key_columns=["nope"])
    with pytest.raises(InvalidKeyColumnError, match=r"'extra' .* has type struct"):
        Mirror(sqlite_database, table="t", source=location, key_columns=["extra"])


def test_an_existing_table_with_another_primary_key_is_refused(database):
    with Mirror(database, table="t", source=V1):
        pass
    with pytest.raises(MirrorTableMismatchError, match=r"mirror table t has primary key \(id\), "
                                                  r"not the key columns \(name\)"):
        Mirror(database, table="t", source=V1, key_columns=["name"])


def test_reopening_with_a_newer_schema_adds_its_columns(database):
    with Mirror(database, table="t", source=V1) as mirror:
        mirror.apply(0, inserts([{"id": 1, "name": "a"}]))
    with Mirror(database, table="t", source=V2) as mirror:
        mirror.apply(1, inserts([{"id": 2, "name": "b", "note": "new"}]))
        mirror.apply(2, inserts([{"id": 3, "name": "c"}]))  # an older schema's rows: null
    assert row_multiset(read_mirror(database, "t", V2)) == row_multiset(pa.table({
        "id": [1, 2, 3], "name": ["a", "b", "c"], "note": [None, "new", None]}))


def test_unknown_columns_without_field_ids_are_refused(sqlite_database):
    with Mirror(sqlite_database, table="t", source=V1) as mirror, \
            pytest.raises(InvalidChangesError, match=r"has column\(s\) surprise that the given "
                                                r"schema \(id 0\) does not have"):
        mirror.apply(0, inserts([{"id": 1, "name": "a", "surprise": 1}]))


def test_a_spark_shaped_batch_mirrors_the_same(corpus, database):
    """No field ids, timestamps in another zone and unit, wider ints: cast on the way in."""
    scenario = corpus.scenarios["random_mix"]
    metadata = load_table(scenario.location).metadata
    changes = meltwater.stream.changes(scenario.location).read_all()
    columns = {}
    for name in changes.column_names:
        column = changes.column(name)
        if name == "ts":
            column = pc.cast(column, pa.timestamp("ns", tz="America/New_York"))
        elif name == "i":
            column = pc.cast(column, pa.int64())
        columns[name] = column
    spark_like = pa.table(columns)  # pa.table(dict) drops the field-id metadata
    assert all(f.metadata is None for f in spark_like.schema)
    with Mirror(database, table="rich", source=scenario.location, key_columns=["id"]) as mirror:
        mirror.apply(0, spark_like)
    truth = scenario.snapshot(metadata.current_snapshot_id).rows()
    assert row_multiset(read_mirror(database, "rich", metadata.schema)) == row_multiset(truth)


def test_the_ledger_table_holds_one_row_per_batch(database):
    with Mirror(database, table="t", source=V1, pipeline="orders") as mirror:
        mirror.apply(7, inserts([{"id": 1, "name": "a"}]))
    rows = fetch(database, "SELECT pipeline, batch_id, snapshot_id, row_count, upserted, "
                           "deleted FROM meltwater_ledger")
    assert rows == [("orders", 7, None, 1, 1, 0)]


def test_reopening_after_iceberg_widened_columns_widens_them(database):
    narrow = Schema((NestedField(1, "id", INT, required=True),
                     NestedField(2, "f", PrimitiveType("float")),
                     NestedField(3, "d", PrimitiveType("decimal(5,2)"))),
                    identifier_field_ids=(1,))
    wide = Schema((NestedField(1, "id", LONG, required=True),
                   NestedField(2, "f", PrimitiveType("double")),
                   NestedField(3, "d", PrimitiveType("decimal(12,2)"))), 1, (1,))
    with Mirror(database, table="w", source=narrow) as mirror:
        mirror.apply(0, inserts([{"id": 1, "f": 1.5, "d": Decimal("1.25")}]))
    with Mirror(database, table="w", source=wide) as mirror:
        mirror.apply(1, pa.table({"id": [5_000_000_000], "f": [0.1],
                                  "d": pa.array([Decimal("1234567890.12")], pa.decimal128(12, 2)),
                                  "_change_type": ["INSERT"], "_change_ordinal": [1]}))
    assert row_multiset(read_mirror(database, "w", wide)) == row_multiset(pa.table({
        "id": [1, 5_000_000_000], "f": [1.5, 0.1],
        "d": [Decimal("1.25"), Decimal("1234567890.12")]}))


def test_a_table_of_key_columns_only(database):
    keys_only = Schema((NestedField(1, "a", LONG, required=True),
                        NestedField(2, "b", STRING, required=True)), identifier_field_ids=(1, 2))
    with Mirror(database, table="k", source=keys_only) as mirror:
        mirror.apply(0, inserts([{"a": 1, "b": "x"}, {"a": 1, "b": "y"}]))
        batch = inserts([{"a": 1, "b": "x"}, {"a": 2, "b": "z"}], ordinal=1)
        kinds = pa.array(["DELETE", "INSERT"])
        mirror.apply(1, batch.set_column(batch.column_names.index("_change_type"),
                                         "_change_type", kinds))
    assert sorted(fetch(database, 'SELECT a, b FROM "k"')) == [(1, "y"), (2, "z")]


def _tables(url: str) -> set[str]:
    """The tables a database holds (SQLite file or PostgreSQL database)."""
    if url.startswith("sqlite:"):
        import sqlite3

        with sqlite3.connect(sqlite_path(url)) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master "
                                                "WHERE type = 'table'")}
    import psycopg

    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables "
                                           "WHERE schemaname = 'public'")}


def test_a_dry_run_checks_what_opening_checks_and_changes_nothing(tmp_path, pg_database):
    """`dry_run=True` (serve --check): a bad key is refused as when opening for real, a good
    one passes, and afterwards the database is as it was: no file, no table, no ledger."""
    missing = tmp_path / "new.db"
    for url in (f"sqlite://{missing}", pg_database):
        before = set() if url.startswith("sqlite:") else _tables(url)
        with pytest.raises(InvalidKeyColumnError):
            Mirror(url, table="t", source=V1, key_columns=["nope"], dry_run=True)
        Mirror(url, table="t", source=V1, dry_run=True).close()
        if url.startswith("sqlite:"):
            assert not missing.exists()
        else:
            assert _tables(url) == before
    existing = tmp_path / "old.db"
    with Mirror(f"sqlite://{existing}", table="t", source=V1) as real:
        real.apply(0, inserts([{"id": 1, "name": "a"}]))
    content = existing.read_bytes()
    with pytest.raises(MirrorTableMismatchError):  # checked against the table that exists
        Mirror(f"sqlite://{existing}", table="t", source=V2, key_columns=["name"],
               dry_run=True)
    Mirror(f"sqlite://{existing}", table="t", source=V2, dry_run=True).close()
    assert existing.read_bytes() == content
    with pytest.raises(SinkUnavailableError, match="no/dir does not exist"):
        Mirror(f"sqlite://{tmp_path}/no/dir/m.db", table="t", source=V1, dry_run=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(SinkUnavailableError, match="file is not a directory"):
        Mirror(f"sqlite://{tmp_path}/file/m.db", table="t", source=V1, dry_run=True)


def test_mirrors_opening_at_once_in_one_postgres_database_both_open(pg_database):
    """Two pipelines' mirrors opening together both create `meltwater_ledger` and
    `meltwater_columns` if missing; PostgreSQL's CREATE TABLE IF NOT EXISTS fails one of two
    concurrent creations ("duplicate key value violates unique constraint
    pg_type_typname_nsp_index"), seen in a service test. Each round starts without the
    shared tables and opens two mirrors from two threads released together; every open
    must succeed."""
    import threading

    import psycopg

    failures: list[BaseException] = []
    for round_ in range(8):
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS meltwater_ledger, meltwater_columns")
        start = threading.Barrier(2)

        def open_one(name: str, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                Mirror(pg_database, table=name, source=V1).close()
            except BaseException as error:  # noqa: BLE001 - collected, asserted below
                failures.append(error)

        threads = [threading.Thread(target=open_one, args=(f"t{round_}_{side}",))
                   for side in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


def test_a_mirrors_stream_pairs_by_its_key_and_reads_key_images(corpus):
    """The stream options a mirror decides as its query starts: its key (given, else the
    table's identifier fields) as the identifier columns, departing rows as key images;
    none for a table it cannot key (the mirror refuses that itself, naming `key`)."""
    from meltwater.sinks.kinds import SinkPlacement
    from meltwater.sinks.mirror_stream import mirror_source_options

    def options(name: str, key: list[str] | None = None) -> dict[str, str]:
        placement = SinkPlacement("p", corpus.scenarios[name].location, "/chk")
        return mirror_source_options({"key": key} if key else {}, placement)

    assert options("equality_deletes") == {"identifier-columns": "id",
                                           "before-images": "key"}
    assert options("mor_partitioned", ["id", "part"]) == {"identifier-columns": "id,part",
                                                          "before-images": "key"}
    assert options("mor_partitioned") == {}
