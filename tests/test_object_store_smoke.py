"""Smoke tests of the object-store test servers and of the tables real writers put there.

SeaweedFS serves S3 and an Iceberg REST catalog on loopback; pyiceberg writes through the
REST catalog (and through SQL and Glue catalogs onto the same S3). Each history is checked
snapshot by snapshot against a plain-Python model its writer's reader did not produce,
through pyiceberg and through meltwater reading s3:// directly. Iceberg Java's tables on
S3 are test_s3_corpus.py's: the corpus written natively at s3:// locations.
"""

from __future__ import annotations

from typing import Any

import pytest
from seaweed_server import listening_addresses

import meltwater.stream
from corpus.compare import assert_same_rows
from corpus.pyiceberg_writer import History, write_history
from meltwater.planner.table.table_loading import load_table


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


@pytest.mark.usefixtures("s3_env")
def test_pyiceberg_round_trip_through_the_rest_catalog(rest_catalog, namespace):
    history = write_history(rest_catalog, (namespace, "orders"))
    assert [s.operation for s in history.steps] == [
        "append", "append", "overwrite", "overwrite", "delete", "upsert"]
    table = rest_catalog.load_table((namespace, "orders"))
    assert table.location() == f"s3://lake/{namespace}/orders"
    assert len(table.snapshots()) == sum(len(s.snapshot_ids) for s in history.steps)
    _check_history(rest_catalog, history)


@pytest.mark.usefixtures("s3_env")
def test_pyiceberg_through_sql_catalogs_on_sqlite_and_postgres(
        sqlite_catalog, postgres_catalog, namespace):
    for catalog in (sqlite_catalog, postgres_catalog):
        _check_history(catalog, write_history(catalog, (namespace, "orders")))


@pytest.mark.usefixtures("s3_env")
def test_pyiceberg_through_glue_on_moto(glue_catalog, namespace):
    history = write_history(glue_catalog, (namespace, "orders"))
    _check_history(glue_catalog, history)
    location = glue_catalog.load_table(history.identifier).metadata_location
    glue_catalog.register_table((namespace, "again"), location)
    assert len(glue_catalog.load_table((namespace, "again")).snapshots()) == 10


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
