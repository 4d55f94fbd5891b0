"""Smoke tests of the object-store test servers and of the tables real writers put there.

SeaweedFS serves S3 and an Iceberg REST catalog on loopback; pyiceberg writes through the
REST catalog (and through SQL and Glue catalogs onto the same S3); Iceberg Java's corpus
tables are relocated onto it with `rewrite_table_path` and registered. Each table is checked
snapshot by snapshot against a truth its writer's reader did not produce (a plain-Python
model for pyiceberg's histories, Iceberg Java's own read for the corpus), through pyiceberg
and through meltwater reading s3:// directly.
"""

from __future__ import annotations

from typing import Any

import pytest
from seaweed_server import listening_addresses

import meltwater.stream
from corpus.compare import assert_same_rows
from corpus.pyiceberg_writer import History, write_history
from corpus.relocate import relocate
from meltwater.planner.metadata import load_table


def test_server_listens_on_loopback_only(seaweed):
    listening = listening_addresses(seaweed.pid)
    assert len(listening) == 9, listening  # HTTP + gRPC of master, volume, filer, S3; catalog
    assert {address for address, _ in listening} == {"127.0.0.1"}
    assert {port for _, port in listening} == set(seaweed.ports.values())


def _check_history(catalog: Any, history: History) -> None:
    """Every step of a pyiceberg history reads as the model says, via pyiceberg and meltwater."""
    table = catalog.load_table(history.identifier)
    ours = load_table(table.metadata_location)
    for step in history.steps:
        assert_same_rows(table.scan(snapshot_id=step.snapshot_id).to_arrow(), step.rows,
                         f"pyiceberg at {step.label}")
        rows = meltwater.stream.scan(ours, snapshot_id=step.snapshot_id).read_all()
        assert_same_rows(rows, step.rows, f"meltwater at {step.label}")


def test_pyiceberg_round_trip_through_the_rest_catalog(rest_catalog, namespace, s3_env):
    history = write_history(rest_catalog, (namespace, "orders"))
    assert [s.operation for s in history.steps] == [
        "append", "append", "overwrite", "overwrite", "delete", "upsert"]
    table = rest_catalog.load_table((namespace, "orders"))
    assert table.location() == f"s3://lake/{namespace}/orders"
    assert len(table.snapshots()) == sum(len(s.snapshot_ids) for s in history.steps)
    _check_history(rest_catalog, history)


def test_pyiceberg_through_sql_catalogs_on_sqlite_and_postgres(
        sqlite_catalog, postgres_catalog, namespace, s3_env):
    for catalog in (sqlite_catalog, postgres_catalog):
        _check_history(catalog, write_history(catalog, (namespace, "orders")))


def test_pyiceberg_through_glue_on_moto(glue_catalog, namespace, s3_env):
    history = write_history(glue_catalog, (namespace, "orders"))
    _check_history(glue_catalog, history)
    location = glue_catalog.load_table(history.identifier).metadata_location
    glue_catalog.register_table((namespace, "again"), location)
    assert len(glue_catalog.load_table((namespace, "again")).snapshots()) == 10


@pytest.mark.corpus
@pytest.mark.parametrize("name", ["mor_partitioned", "position_deletes_with_rows"])
def test_relocated_iceberg_java_table_reads_as_iceberg_java_did(
        corpus, seaweed, rest_catalog, sqlite_catalog, namespace, s3_env, name):
    """mor_partitioned: merge-on-read position deletes, a branch and a tag; both scenarios
    need relocate.py's repair of position delete files Iceberg 1.10.2 fails to stage."""
    from pyiceberg.table import StaticTable

    scenario = corpus.scenarios[name]
    relocated = relocate(scenario, rest_catalog, seaweed.s3_filesystem(),
                         bucket=seaweed.bucket, namespace=namespace)
    assert relocated.location == f"s3://lake/{namespace}/{name}"
    assert relocated.repaired > 0
    # SeaweedFS stores only the metadata location of a registered table: its loadTable
    # then answers that location right but an empty `metadata` (no snapshots), so the
    # table is read from the location it names.
    assert rest_catalog.load_table((namespace, name)).metadata_location == \
        relocated.metadata_location
    by_location = StaticTable.from_metadata(relocated.metadata_location,
                                            properties=seaweed.file_io_properties())
    sqlite_catalog.create_namespace(namespace)
    by_sql = sqlite_catalog.register_table((namespace, name), relocated.metadata_location)
    ours = load_table(relocated.location)
    assert ours.metadata_location == relocated.metadata_location
    checked = 0
    for snap in scenario.snapshots:
        if snap.expired:
            continue
        truth = snap.rows()
        what = f"{name} at {snap.snapshot_id} ({snap.label})"
        for table in (by_location, by_sql):
            assert_same_rows(table.scan(snapshot_id=snap.snapshot_id).to_arrow(), truth,
                             f"pyiceberg: {what}")
        rows = meltwater.stream.scan(ours, snapshot_id=snap.snapshot_id).read_all()
        assert_same_rows(rows, truth, f"meltwater: {what}")
        checked += 1
    assert checked == len(scenario.snapshots)


def test_vended_credentials_are_table_scoped_and_say_when_they_expire(seaweed_vending, namespace):
    """A client with catalog credentials only reads through the keys loadTable vends.

    Expiry itself is not waited for here: 900 s is the shortest session the STS grants.
    """
    import time

    import pyarrow as pa
    import pyarrow.fs as pafs
    from pyiceberg.catalog import load_catalog

    writer = load_catalog("writer", **seaweed_vending.catalog_properties())
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    for name in ("mine", "other"):
        writer.create_namespace_if_not_exists(namespace)
        table = writer.create_table((namespace, name), schema=schema)
        table.append(pa.table({"id": [1, 2, 3]}, schema=schema))

    reader = load_catalog("reader", **seaweed_vending.catalog_properties(with_s3=False))
    mine = reader.load_table((namespace, "mine"))  # pyiceberg asks for vended credentials
    assert mine.scan().to_arrow().num_rows == 3
    vended = mine.io.properties
    assert vended["s3.endpoint"] == seaweed_vending.s3_endpoint
    assert vended["s3.access-key-id"] != seaweed_vending.access_key
    lifetime = int(vended["s3.session-token-expires-at-ms"]) / 1000 - time.time()
    assert 850 < lifetime <= 900
    fs = pafs.S3FileSystem(access_key=vended["s3.access-key-id"],
                           secret_key=vended["s3.secret-access-key"],
                           session_token=vended["s3.session-token"],
                           endpoint_override=vended["s3.endpoint"], scheme="http",
                           region="us-east-1")
    assert fs.get_file_info(pafs.FileSelector(f"lake/{namespace}/mine", recursive=True))
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        fs.get_file_info(pafs.FileSelector(f"lake/{namespace}/other", recursive=True))
