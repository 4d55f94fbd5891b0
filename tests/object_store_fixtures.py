"""Fixtures for tests on an object store and in catalogs: SeaweedFS (S3 + Iceberg REST),
pyiceberg catalogs on it (REST, SQL on SQLite and PostgreSQL, Glue through moto), and the
AWS_* environment meltwater reads s3:// with.

conftest.py loads this module as a plugin (`pytest_plugins`), so every test can ask for
these fixtures by name.

Like the corpus and PostgreSQL, the servers are mandatory: when one cannot start, the tests
that need it fail saying why; they never skip.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from seaweed_server import SeaweedServer, SeaweedUnavailableError
from setup_steps import announce

from corpus.loader import Corpus

_names = itertools.count()


def catalog_env(name: str, properties: dict[str, str]) -> dict[str, str]:
    """pyiceberg's environment form of a catalog's properties (`s3.access-key-id` ->
    `PYICEBERG_CATALOG__<NAME>__S3__ACCESS_KEY_ID`)."""
    return {f"PYICEBERG_CATALOG__{name.upper()}__"
            + key.upper().replace(".", "__").replace("-", "_"): value
            for key, value in properties.items()}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any AWS or pyiceberg setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "PYICEBERG_"))}
    env.update(extra)
    return env


def _running(server: SeaweedServer) -> Iterator[SeaweedServer]:
    """`server` started for a fixture's life and stopped after; the test fails (never
    skips) when it cannot start."""
    try:
        server.start()
    except SeaweedUnavailableError as error:
        server.stop()
        pytest.fail(f"SeaweedFS is unavailable: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedServer]:
    """One SeaweedFS for the test session, on loopback, deleted at its end."""
    yield from _running(SeaweedServer())


@pytest.fixture(scope="session")
def seaweed_vending() -> Iterator[SeaweedServer]:
    """A second SeaweedFS whose catalog vends table-scoped keys lasting 900 s (the minimum)."""
    yield from _running(SeaweedServer(vended_credentials_seconds=900))


@pytest.fixture
def namespace() -> str:
    """A namespace name no other test of this session uses (tables share one server)."""
    return f"ns{next(_names)}"


@pytest.fixture
def rest_catalog(seaweed: SeaweedServer) -> Any:
    """A pyiceberg RestCatalog client on the session's SeaweedFS (OAuth2 client credentials)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("seaweed", **seaweed.catalog_properties())


@pytest.fixture
def sqlite_catalog(seaweed: SeaweedServer, tmp_path, namespace: str) -> Any:
    """pyiceberg's SqlCatalog on a SQLite file, its tables in SeaweedFS's plain bucket."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("sqlite", type="sql", uri=f"sqlite:///{tmp_path}/catalog.db",
                        warehouse=f"s3://warehouse/sqlite-{namespace}",
                        **seaweed.file_io_properties())


@pytest.fixture
def postgres_catalog(seaweed: SeaweedServer, pg_database: str, namespace: str) -> Iterator[Any]:
    """pyiceberg's SqlCatalog on the session's PostgreSQL (SQLAlchemy on psycopg 3); its
    connection pool is closed after the test (else its connections are garbage)."""
    from pyiceberg.catalog import load_catalog

    uri = pg_database.replace("postgresql://", "postgresql+psycopg://", 1)
    catalog = load_catalog("postgres", type="sql", uri=uri,
                           warehouse=f"s3://warehouse/pg-{namespace}",
                           **seaweed.file_io_properties())
    yield catalog
    catalog.engine.dispose()


@pytest.fixture(scope="session")
def moto_glue() -> Iterator[str]:
    """moto's server on a free loopback port, for its Glue API; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def glue_catalog(seaweed: SeaweedServer, moto_glue: str) -> Any:
    """pyiceberg's GlueCatalog on moto, its tables in SeaweedFS's plain bucket."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("glue", type="glue", warehouse="s3://warehouse/glue",
                        **{"glue.endpoint": moto_glue, "glue.region": "us-east-1",
                           "glue.access-key-id": "testing", "glue.secret-access-key": "testing"},
                        **seaweed.file_io_properties())


@pytest.fixture
def s3_env(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """AWS_* set for this test so pyarrow.fs, and so meltwater, reads s3:// from SeaweedFS."""
    env = seaweed.s3_env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture(scope="session")
def s3_corpus() -> Corpus:
    """The Iceberg Java corpus written at s3://lake (built once per generator version)."""
    from writer_env import WriterEnvError

    from corpus.build import ensure_s3_corpus

    try:
        return Corpus(ensure_s3_corpus(log=announce))
    except WriterEnvError as error:
        pytest.fail(f"the Iceberg Java S3 corpus is unavailable: {error}", pytrace=False)


@dataclass(frozen=True)
class JavaTablesOnS3:
    """S3 corpus tables uploaded to a SeaweedFS, byte for byte, and registered in a catalog."""

    server: SeaweedServer
    corpus: Corpus
    catalog: Any  # each table is db.<scenario> in it, at its current metadata file
    names: list[str]  # the scenarios uploaded and registered
    refused: dict[str, str]  # scenario -> the store's error for a file it would not take
    files: int
    bytes: int
    upload_seconds: float


@pytest.fixture(scope="session")
def seaweed_plain_lake() -> Iterator[SeaweedServer]:
    """A SeaweedFS whose bucket `lake` is a plain S3 bucket (its table bucket is `tables`).

    For the S3 corpus in catalogs other than the REST one: SeaweedFS's table bucket refuses
    Puffin files, so v3 deletion vectors can live only in a plain bucket.
    """
    yield from _running(SeaweedServer(bucket="tables", plain_buckets=("lake",)))


@pytest.fixture(scope="session")
def java_tables_in_rest(seaweed: SeaweedServer, s3_corpus: Corpus) -> JavaTablesOnS3:
    """The S3 corpus in SeaweedFS's table bucket `lake`, registered in its REST catalog as
    db.<scenario>: every scenario whose files the table bucket takes (see corpus.s3_store).
    Once per session: the keys are fixed (s3://lake/db/<scenario>), so no second copy fits."""
    from pyiceberg.catalog import load_catalog

    from corpus.s3_store import register_tables, upload_corpus

    rest = load_catalog("seaweed-java", **seaweed.catalog_properties())
    names, refused, files, size, seconds = [], {}, 0, 0, 0.0
    for name in s3_corpus.scenarios:
        try:
            uploaded = upload_corpus(s3_corpus, seaweed.s3_filesystem(), rest, names=[name])
        except OSError as error:
            refused[name] = str(error)
            continue
        names.append(name)
        files, size, seconds = (files + uploaded.files, size + uploaded.bytes,
                                seconds + uploaded.seconds)
    register_tables(s3_corpus, rest, "db", names)
    return JavaTablesOnS3(seaweed, s3_corpus, rest, names, refused, files, size, seconds)


@pytest.fixture(scope="session")
def java_tables_in_sql(seaweed_plain_lake: SeaweedServer, s3_corpus: Corpus,
                       tmp_path_factory: pytest.TempPathFactory) -> JavaTablesOnS3:
    """Every S3 corpus table in a plain bucket `lake`, registered as db.<scenario> in
    pyiceberg's SqlCatalog on SQLite."""
    from pyiceberg.catalog import load_catalog

    from corpus.s3_store import register_tables, upload_corpus

    uploaded = upload_corpus(s3_corpus, seaweed_plain_lake.s3_filesystem())
    database = tmp_path_factory.mktemp("java-sql") / "catalog.db"
    sql = load_catalog("sqlite-java", type="sql", uri=f"sqlite:///{database}",
                       warehouse="s3://lake/sqlite", **seaweed_plain_lake.file_io_properties())
    names = list(s3_corpus.scenarios)
    register_tables(s3_corpus, sql, "db", names)
    return JavaTablesOnS3(seaweed_plain_lake, s3_corpus, sql, names, {}, uploaded.files,
                          uploaded.bytes, uploaded.seconds)


# -- Google Cloud Storage and Azure: emulators, and corpus tables written there -----------------

# A far-off expiry for the stand-in token the GCS catalog hands pyiceberg (which cannot read
# without credentials; the emulator takes any token): 2100-01-01, in milliseconds.
_FAR_OFF_MS = "4102444800000"


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[Any]:
    """fake-gcs-server on loopback for the session (testbed/gcs_emulator.py)."""
    from gcs_emulator import FakeGcsServer, GcsEmulatorUnavailableError

    server = FakeGcsServer()
    try:
        server.start()
    except GcsEmulatorUnavailableError as error:
        server.stop()
        pytest.fail(f"the GCS emulator is unavailable: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite() -> Iterator[Any]:
    """Azurite's Blob service on loopback for the session, installed with npm on first use
    (testbed/azurite_server.py)."""
    from azurite_server import AzuriteServer, AzuriteUnavailableError

    server = AzuriteServer(log=announce)
    try:
        server.start()
    except AzuriteUnavailableError as error:
        server.stop()
        pytest.fail(f"Azurite is unavailable: {error}", pytrace=False)
    yield server
    server.stop()


def _store_corpus(scheme: str) -> Corpus:
    from writer_env import WriterEnvError

    from corpus.build import ensure_store_corpus

    try:
        return Corpus(ensure_store_corpus(scheme, log=announce))
    except WriterEnvError as error:
        pytest.fail(f"the Iceberg Java corpus at {scheme}:// is unavailable: {error}",
                    pytrace=False)


@pytest.fixture(scope="session")
def gcs_corpus() -> Corpus:
    """corpus.build.STORE_SCENARIOS written by Iceberg Java at gs://lake."""
    return _store_corpus("gs")


@pytest.fixture(scope="session")
def azure_corpus() -> Corpus:
    """corpus.build.STORE_SCENARIOS written by Iceberg Java at
    abfs://lake@meltwater.dfs.core.windows.net."""
    return _store_corpus("abfs")


@dataclass(frozen=True)
class JavaTablesOnStore:
    """Corpus tables uploaded byte for byte to an emulated GCS or Azure container `lake`
    and registered as db.<scenario> in a SQLite SqlCatalog.

    `catalog_properties` configure that catalog (its FileIO properties under pyiceberg's
    names, which pyiceberg itself must read the metadata with); `io_properties` reach the
    same store under Iceberg Java's names, for a reader given a location."""

    scheme: str
    corpus: Corpus
    catalog_properties: dict[str, str]
    io_properties: dict[str, str]
    files: int
    bytes: int
    upload_seconds: float


def _on_store(scheme: str, corpus: Corpus, fs: Any, catalog_io: dict[str, str],
              io: dict[str, str], database: Any) -> JavaTablesOnStore:
    from local_bucket import upload_objects
    from pyiceberg.catalog import load_catalog

    from corpus.s3_store import register_tables, store_path, stored_objects

    fs.create_dir("lake")
    uploaded = upload_objects({store_path(k): v for k, v in stored_objects(corpus).items()}, fs)
    properties = {"type": "sql", "uri": f"sqlite:///{database}",
                  "warehouse": f"{next(iter(corpus.scenarios.values())).location}/sqlite",
                  **catalog_io}
    register_tables(corpus, load_catalog("lake", **properties), "db")  # lake.db.<scenario>
    return JavaTablesOnStore(scheme, corpus, properties, io, uploaded.files, uploaded.bytes,
                             uploaded.seconds)


@pytest.fixture(scope="session")
def gcs_tables(fake_gcs, gcs_corpus: Corpus,
               tmp_path_factory: pytest.TempPathFactory) -> JavaTablesOnStore:
    """The GCS corpus on fake-gcs-server. Its catalog gives pyiceberg a token (pyiceberg's
    GCS client has no switch for no credentials); readers given the location get Iceberg
    Java's `gcs.no-auth`."""
    catalog_io = {"gcs.service.host": fake_gcs.endpoint, "gcs.oauth2.token": "emulator",
                  "gcs.oauth2.token-expires-at": _FAR_OFF_MS}
    return _on_store("gs", gcs_corpus, fake_gcs.filesystem(), catalog_io,
                     fake_gcs.file_io_properties(),
                     tmp_path_factory.mktemp("gcs-sql") / "catalog.db")


@pytest.fixture(scope="session")
def azure_tables(azurite, azure_corpus: Corpus,
                 tmp_path_factory: pytest.TempPathFactory) -> JavaTablesOnStore:
    """The Azure corpus on Azurite: its catalog with pyiceberg's `adls.connection-string`
    (pyiceberg reads abfs:// metadata with adlfs: its pyarrow reader takes the container's
    `@account host` for part of the path), readers given the location Iceberg Java's
    names (shared key, endpoint per account host)."""
    host = next(iter(azure_corpus.scenarios.values())).location.split("@")[1].split("/")[0]
    return _on_store("abfs", azure_corpus, azurite.filesystem(), azurite.file_io_properties(),
                     azurite.java_file_io_properties(host),
                     tmp_path_factory.mktemp("azure-sql") / "catalog.db")


_ON_STORE = [pytest.param(fixture, id=scheme, marks=[pytest.mark.objectstore, pytest.mark.corpus])
             for scheme, fixture in (("gs", "gcs_tables"), ("abfs", "azure_tables"))]


@pytest.fixture(params=_ON_STORE)
def java_tables_on_store(request) -> JavaTablesOnStore:
    """Once on GCS, once on Azure. Got at run time, so each param carries the marks."""
    return request.getfixturevalue(request.param)
