"""Session fixtures: the Iceberg Java corpus, built once and shared by every test.

The corpus is mandatory. If it cannot be built (no JDK, no jarjar, no network to PyPI) the
tests that need it fail with a message saying how to fix it; they never skip silently.

Each test is marked by the resources its fixtures need (`FIXTURE_MARKS`), so the lanes are
chosen with -m: `make test-fast` runs what needs none of them.
"""

from __future__ import annotations

import contextlib
import getpass
import itertools
import os
import tempfile
from pathlib import Path

import pytest
import setup_steps
from kafka_broker import KafkaBroker, KafkaUnavailableError
from metastore_server import HiveMetastore, HiveMetastoreError
from pg_server import PostgresServer, PostgresUnavailableError, create_database
from schema_registry import SchemaRegistry
from setup_steps import announce
from writer_env import WriterEnvError

from corpus.build import ensure_corpus
from corpus.loader import Corpus

# A test requesting one of these fixtures, directly or through another fixture, gets the mark.
# `serve` and `live_writer` are tests/service_tests/conftest.py's.
FIXTURE_MARKS = {
    "corpus": "corpus",  # the Iceberg Java corpus (built once into $MELTWATER_CACHE)
    "spark": "spark",  # the session's local SparkSession (a JVM in this process)
    "postgres_url": "postgres",  # the session's PostgreSQL server
    "serve": "service",  # `meltwater serve` or spark-submit in child processes (own JVMs)
    "live_writer": "service",  # the live Iceberg Java writer (a JVM committing as asked)
    "seaweed": "objectstore",  # SeaweedFS: S3 and an Iceberg REST catalog on loopback
    "seaweed_vending": "objectstore",  # the same, vending table-scoped credentials
    "seaweed_plain_lake": "objectstore",  # the same, its bucket `lake` a plain one
    "kafka_broker": "kafka",  # Tansu, a Kafka-protocol broker, on loopback (per test)
    "kafka_proxied": "kafka",  # the same behind a proxy a test can cut (broker unreachable)
    "kafka_authenticated": "kafka",  # the same refusing every login (--authentication)
    "s3_corpus": "corpus",  # the Iceberg Java corpus written at s3:// locations
    "gcs_corpus": "corpus",  # a few of its scenarios written at gs:// locations
    "azure_corpus": "corpus",  # and at abfs:// locations
    "fake_gcs": "objectstore",  # fake-gcs-server, a Google Cloud Storage emulator on loopback
    "azurite": "objectstore",  # Azurite, an Azure Blob Storage emulator on loopback
    "wheel_venv": "build",  # the wheel built and installed into a fresh virtualenv (~1 GB)
    "docker_engine": "build",  # `docker build` of deploy/docker (where an engine runs)
}

# The object-store and catalog fixtures (tests/object_store_fixtures.py), for every test.
pytest_plugins = ["object_store_fixtures"]


_key_indexes: tempfile.TemporaryDirectory[str] | None = None


def pytest_configure(config):
    """`announce` (the fixtures' lines about long set-up steps) writes to this run's terminal.
    The key indexes commands keep by default (under the user's cache) go to a directory of
    this run's instead, removed after it (and by each process the tests start: they
    inherit the variable)."""
    global _key_indexes
    setup_steps.use(config)
    _key_indexes = tempfile.TemporaryDirectory(prefix="meltwater-key-index-")
    os.environ["MELTWATER_KEY_INDEX_DIR"] = _key_indexes.name


def pytest_unconfigure():
    """Leave nothing in the system temp directory: pytest keeps the temp directories of
    failed tests only (`tmp_path_retention_policy`, pyproject.toml), so after a run that
    failed nothing, its per-user root is empty and is removed too. Under pytest-xdist each
    worker tries first and the controller, last to finish, succeeds."""
    if _key_indexes is not None:
        _key_indexes.cleanup()
    with contextlib.suppress(OSError, KeyError):
        (Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}").rmdir()


def pytest_collection_modifyitems(items):
    """Mark each test by `FIXTURE_MARKS`: its `fixturenames` are the closure of the fixtures
    it requests, so a fixture built on `corpus` marks its users too. A fixture that reaches
    one only at run time (`request.getfixturevalue`) marks its params instead, as
    sink_tests/conftest.py's `database` does; `_fixtures_match_marks` catches one that
    does not."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for mark in sorted({m for name, m in FIXTURE_MARKS.items() if name in names}):
            item.add_marker(mark)


@pytest.fixture(autouse=True)
def _fixtures_match_marks(request):
    """After each test, fail if it used a marked fixture without carrying its mark (one got
    at run time), which would slip it into the wrong lane. `request.fixturenames` is every
    fixture the test activated, including those requested dynamically."""
    yield
    used = {m for name, m in FIXTURE_MARKS.items() if name in request.fixturenames}
    missing = used - {m.name for m in request.node.iter_markers()}
    if missing:
        pytest.fail(f"{request.node.nodeid} uses {', '.join(sorted(missing))} without the "
                    "mark: request the fixture as an argument, or mark the param",
                    pytrace=False)


_corpus: Corpus | None = None
_error: str | None = None


def _load() -> Corpus:
    global _corpus, _error
    if _corpus is None and _error is None:
        try:
            _corpus = Corpus(ensure_corpus(log=announce))
        except WriterEnvError as error:
            _error = str(error)
    if _error is not None:
        pytest.fail(f"the Iceberg Java corpus is unavailable: {_error}", pytrace=False)
    return _corpus


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    return _load()


def pytest_terminal_summary(terminalreporter):
    """Report what the corpus covers: snapshots and delete files by kind, per scenario."""
    if _corpus is None:
        return
    write = terminalreporter.write_line
    terminalreporter.section("Iceberg Java corpus")
    write(f"{_corpus.root}")
    write(f"{'scenario':<28} {'fmt':>3} {'snaps':>5} {'expired':>7} {'pos':>4} {'eq':>4} "
          f"{'dv':>4}  iceberg changelog scan")
    for scenario in _corpus.scenarios.values():
        snaps = scenario.snapshots
        kinds = scenario.delete_files
        write(f"{scenario.name:<28} {scenario.format_version:>3} {len(snaps):>5} "
              f"{sum(s.expired for s in snaps):>7} {kinds['position']:>4} "
              f"{kinds['equality']:>4} {kinds['dv']:>4}  "
              f"{scenario.record['iceberg_changelog'][:60]}")


@pytest.fixture(scope="session")
def spark():
    """One local Spark 4 session for the whole test run (2 cores: keep it small).

    Python workers must run this interpreter, or they would import another meltwater.
    """
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from meltwater.stream.spark.session import LOCAL_SESSION_CONF

    session = (SparkSession.builder.master("local[2]").appName("meltwater-tests")
               .config(map=LOCAL_SESSION_CONF)  # as local_session: Unix domain sockets
               .config("spark.pyspark.python", sys.executable)
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "2g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    import meltwater.stream

    meltwater.stream.register(session)
    yield session
    session.stop()


_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server started for this test session on loopback, stopped at its end.

    Mandatory like the corpus: without the server binaries the tests that need it fail,
    saying that `make sysdeps` installs them; they never skip.
    """
    server = PostgresServer()
    try:
        url = server.start()
    except PostgresUnavailableError as error:
        server.stop()
        pytest.fail(f"PostgreSQL is unavailable: {error}", pytrace=False)
    yield url
    server.stop()


@pytest.fixture
def pg_database(postgres_url) -> str:
    """A fresh, empty database on the session's server, for one test."""
    return create_database(postgres_url, f"t{next(_databases)}")


@pytest.fixture(scope="session")
def hive_metastore(tmp_path_factory):
    """A Hive Metastore (testbed/metastore_server.py: Hive 2.3 from the pyspark wheel,
    embedded Derby, its own network namespace) on a loopback port, for this test session;
    mandatory like the corpus: a metastore that does not start fails the tests that need
    it, with its log's tail."""
    metastore = HiveMetastore(tmp_path_factory.mktemp("metastore"))
    try:
        metastore.start()
    except HiveMetastoreError as error:
        metastore.stop()
        pytest.fail(str(error), pytrace=False)
    yield metastore
    metastore.stop()


@pytest.fixture
def schema_registry():
    """A schema registry speaking the Confluent REST API (testbed/schema_registry.py) on a
    loopback port, for one test; Avro messages `kafka_read` (testbed) reads are decoded
    with its schemas."""
    with SchemaRegistry() as registry:
        yield registry


def _kafka(**options):
    """A Tansu broker on loopback for one test; mandatory like the corpus: a missing binary
    fails the test, saying how to install it."""
    broker = KafkaBroker(**options)
    try:
        broker.start()
    except KafkaUnavailableError as error:
        broker.stop()
        pytest.fail(f"the Kafka broker is unavailable: {error}", pytrace=False)
    return broker


@pytest.fixture
def kafka_broker():
    """Tansu (testbed/kafka_broker.py) on a loopback port, memory storage, for one test."""
    broker = _kafka()
    yield broker
    broker.stop()


@pytest.fixture
def kafka_proxied():
    """Tansu behind a `LoopbackProxy` (`broker.proxy.cut()` / `.restore()`), for one test."""
    broker = _kafka(proxied=True)
    yield broker
    broker.stop()


@pytest.fixture
def kafka_authenticated():
    """Tansu with `--authentication`, which refuses every SASL login, for one test."""
    broker = _kafka(authentication=True)
    yield broker
    broker.stop()
