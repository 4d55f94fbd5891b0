"""Every configuration in deploy/examples passes `meltwater serve --check` and creates nothing.

Each example is run as shipped, through the installed console script, with only its
host-specific values rewritten to the test stand-ins (`STAND_INS`): /var/lib/meltwater to a
directory under tmp_path, its tables to corpus tables (local, or on SeaweedFS's S3 and REST
catalog), its PostgreSQL URL to a fresh database on the session's server, its status port to
a free one. Each rewrite asserts the text it replaces is there, so an example that changes
fails here rather than passing unrewritten; and whatever still names the host afterwards (a
path, an address, a table no stand-in replaced) fails the test naming it, which is what a new
example without stand-ins does.

Each family of examples is also refused once, cheaply, as an operator would see it: one line
on stderr naming the key, exit status 2.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from loopback_ports import free_port
from object_store_fixtures import catalog_env, clean_env

from service_tests.harness import tree

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
MELTWATER = str(Path(sys.executable).parent / "meltwater")
NAMESPACE = "deploy_examples"  # the REST catalog's namespace of this module's table
HOST_STATE = "/var/lib/meltwater"  # the examples' state directory (deploy/systemd's)
# The S3 corpus tables put on SeaweedFS for postgres-mirror.toml: `orders` has no key in the
# example, so its stand-in has an identifier field; `customers` is keyed by the example.
S3_ORDERS, S3_CUSTOMERS = "equality_deletes", "mor_partitioned"


def run_check(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([MELTWATER, "serve", "--config", str(config), "--check"], env=env,
                          capture_output=True, text=True, timeout=120)


@dataclass
class Host:
    """The stand-ins for one example's host: a state directory, a status port, and the test
    servers' fixtures, got only when the example asks for them."""

    request: pytest.FixtureRequest
    tmp_path: Path
    port: int = field(default_factory=free_port)

    @property
    def state(self) -> Path:
        """Stands in for /var/lib/meltwater: it exists, as systemd's StateDirectory does."""
        return self.tmp_path / "state"

    def fixture(self, name: str) -> Any:
        return self.request.getfixturevalue(name)


@dataclass
class StandIns:
    """How one example is rewritten and run here, and how it is refused."""

    substitutions: list[tuple[str, str]]
    tables: list[str]  # what each pipeline's table became, in order
    env: dict[str, str] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)  # the test servers' ports it may name
    warnings: list[str] = field(default_factory=list)  # how its stderr lines start
    postgres: str | None = None  # the database it checks, which must stay empty
    # the refusal: substitutions over the rewritten text, its environment, its one line
    refusal: tuple[list[tuple[str, str]], dict[str, str], str] | None = None


def local_state(host: Host) -> tuple[str, str]:
    return HOST_STATE, str(host.state)


def http(address: str, host: Host) -> tuple[str, str]:
    bind = address.rsplit(":", 1)[0]
    return f'http = "{address}"', f'http = "{bind}:{host.port}"'


def pg_stand_in(host: Host) -> tuple[str, int]:
    url = host.fixture("pg_database")
    port = re.search(r"@127\.0\.0\.1:(\d+)/", url)
    assert port is not None, url
    return url, int(port.group(1))


def no_such_role(url: str) -> tuple[tuple[str, str], str]:
    """The test server's database asked for by the examples' role, which it does not have:
    the substitution, and the start of the line refusing it."""
    role = url.replace("postgres@", "meltwater@", 1)
    return (url, role), f"pipelines[0].sink: cannot connect to {role}: "


def archive(host: Host) -> StandIns:
    table = host.fixture("corpus").scenarios["mor_partitioned"].location
    missing = f"{host.state}/warehouse/db/orders"
    return StandIns(
        [http("127.0.0.1:9465", host),
         ("/var/lib/meltwater/warehouse/db/orders", table), local_state(host)],
        tables=[table],
        refusal=([(table, missing)], {},
                 f"pipelines[0].table: {missing}: not an Iceberg table"))


def sqlite_mirror(host: Host) -> StandIns:
    # no key in the example: the stand-in table names its identifier field
    table = host.fixture("corpus").scenarios["equality_deletes"].location
    missing = host.tmp_path / "no-state"
    return StandIns(
        [http("127.0.0.1:9464", host),
         ("/var/lib/meltwater/warehouse/db/orders", table), local_state(host)],
        tables=[table],
        refusal=([(str(host.state), str(missing))], {},  # a host without the directory
                 f"pipelines[0].sink: cannot create SQLite database {missing}/mirror.db: "))


def cluster(host: Host) -> StandIns:
    # HDFS itself is not tested (no HDFS server here): the table and checkpoint become local
    # ones, which is all `--check` reads of them (it does not look at a remote checkpoint).
    table = host.fixture("corpus").scenarios["equality_deletes"].location
    url, pg_port = pg_stand_in(host)
    role, refused = no_such_role(url)
    return StandIns(
        [http("0.0.0.0:9464", host),
         ("hdfs://namenode:8020/warehouse/db/orders", table),
         ("hdfs://namenode:8020/meltwater/checkpoints/orders",
          f"{host.state}/checkpoints/orders"),
         ("postgresql://meltwater@db.internal:5432/mirror", url)],
        tables=[table], ports={pg_port}, postgres=url,
        warnings=[f"service.http: the status server listens on 0.0.0.0:{host.port}, which "
                  "other machines can reach"],
        refusal=([role], {}, refused))


def postgres_mirror(host: Host) -> StandIns:
    seaweed, (orders, customers) = host.fixture("seaweed"), host.fixture("s3_tables")
    url, pg_port = pg_stand_in(host)
    role, refused = no_such_role(url)
    return StandIns(
        [http("127.0.0.1:9464", host),
         ("s3://lake/warehouse/db/orders", orders),
         ("s3://lake/warehouse/db/customers", customers),
         ('key = ["customer_id"]', 'key = ["id"]'),  # the stand-in's column
         ("postgresql://meltwater@127.0.0.1:5432/mirror", url), local_state(host)],
        tables=[orders, customers], env=seaweed.s3_env(), postgres=url,
        ports={pg_port, int(seaweed.s3_endpoint.rsplit(":", 1)[1])},
        refusal=([role], seaweed.s3_env(), refused))


def rest_catalog(host: Host) -> StandIns:
    seaweed = host.fixture("seaweed")
    host.fixture("rest_table")
    table = f"lake.{NAMESPACE}.orders"
    properties = seaweed.catalog_properties()
    secrets = catalog_env("lake", {k: properties[k] for k in (
        "credential", "oauth2-server-uri", "s3.access-key-id", "s3.secret-access-key")})
    return StandIns(
        [http("127.0.0.1:9464", host),
         ("http://127.0.0.1:8181", seaweed.catalog_uri),
         ("http://127.0.0.1:8333", seaweed.s3_endpoint),
         ('"lake.db.orders"', f'"{table}"'), local_state(host)],
        tables=[table], env=secrets,
        ports={int(url.rsplit(":", 1)[1]) for url in (seaweed.catalog_uri,
                                                      seaweed.s3_endpoint)},
        refusal=([], catalog_env("lake", {"credential": "nobody:wrong"}),
                 f"pipelines[0].table: table {table}: catalog 'lake'"))


# example name -> (the marks of the test servers its stand-ins use, its stand-ins)
STAND_INS: dict[str, tuple[list[pytest.MarkDecorator], Callable[[Host], StandIns]]] = {
    "archive": ([pytest.mark.corpus], archive),
    "cluster": ([pytest.mark.corpus, pytest.mark.postgres], cluster),
    "postgres-mirror": ([pytest.mark.corpus, pytest.mark.objectstore, pytest.mark.postgres],
                        postgres_mirror),
    "rest-catalog": ([pytest.mark.objectstore], rest_catalog),
    "sqlite-mirror": ([pytest.mark.corpus], sqlite_mirror),
}


@pytest.fixture(scope="module")
def s3_tables(seaweed, s3_corpus) -> tuple[str, str]:
    """Two S3 corpus tables on the session's SeaweedFS, read by location through AWS_*."""
    from pyiceberg.catalog import load_catalog

    from corpus.s3_store import upload_corpus

    rest = load_catalog("seaweed-examples", **seaweed.catalog_properties())
    upload_corpus(s3_corpus, seaweed.s3_filesystem(), rest, names=[S3_ORDERS, S3_CUSTOMERS])
    return (s3_corpus.scenarios[S3_ORDERS].location,
            s3_corpus.scenarios[S3_CUSTOMERS].location)


@pytest.fixture(scope="module")
def rest_table(seaweed) -> None:
    """lake.deploy_examples.orders in the REST catalog, three rows keyed by `id`."""
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    from corpus.pyiceberg_writer import SCHEMA

    catalog = load_catalog("lake", **seaweed.catalog_properties())
    catalog.create_namespace_if_not_exists(NAMESPACE)
    table = catalog.create_table_if_not_exists((NAMESPACE, "orders"), schema=SCHEMA)
    if table.current_snapshot() is None:
        table.append(pa.Table.from_pylist(
            [{"id": i, "category": "c", "name": f"n{i}", "amount": 1.0} for i in range(3)],
            schema=SCHEMA))


def substitute(text: str, substitutions: list[tuple[str, str]], name: str) -> str:
    for old, new in substitutions:
        assert old in text, f"{name} no longer says {old!r}: update its stand-ins here"
        text = text.replace(old, new)
    return text


def strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a parsed TOML document, with its dotted key."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, f"{key}.{k}" if key else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings(v, f"{key}[{i}]")
    elif isinstance(value, str):
        yield key, value


ADDRESS = re.compile(r"(?:^|[/@])([A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(\d+)(?:$|/)")
PATH = re.compile(r"^(?:sqlite:///|file://)?(/.*)$")


def host_specific(config: dict[str, Any], stand: StandIns, host: Host) -> list[str]:
    """What the rewritten configuration still names of the example's host: an address off
    the stand-ins' ports, a path outside tmp_path and the stand-in tables, a pipeline's table
    no stand-in replaced."""
    ports = stand.ports | {host.port}
    allowed = (str(host.tmp_path), *stand.tables)
    found = []
    for key, value in strings(config):
        address = ADDRESS.search(value)
        path = PATH.match(value)
        if address is not None and int(address.group(2)) not in ports:
            found.append(f"{key} = {value!r} (an address)")
        elif path is not None and not path.group(1).startswith(allowed):
            found.append(f"{key} = {value!r} (a path)")
    for index, pipeline in enumerate(config.get("pipelines", [])):
        said = any(f.startswith(f"pipelines[{index}].table ") for f in found)
        if pipeline.get("table") not in stand.tables and not said:
            found.append(f"pipelines[{index}].table = {pipeline.get('table')!r} (a table)")
    return found


def postgres_tables(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as connection:
        return [row[0] for row in connection.execute(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')")]


EXAMPLE_PARAMS = [pytest.param(path, id=path.stem, marks=STAND_INS.get(path.stem, ([],))[0])
                  for path in sorted(EXAMPLES.glob("*.toml"))]


def test_every_example_is_covered():
    assert {p.values[0].stem for p in EXAMPLE_PARAMS} >= {
        "archive", "cluster", "postgres-mirror", "rest-catalog", "sqlite-mirror"}


@pytest.mark.parametrize("example", EXAMPLE_PARAMS)
def test_example_passes_serve_check_and_creates_nothing(example, request, tmp_path):
    host = Host(request, tmp_path)
    _, make = STAND_INS.get(example.stem, ([], lambda _: StandIns([], tables=[])))
    stand = make(host)
    text = substitute(example.read_text(), stand.substitutions, example.name)
    left = host_specific(tomllib.loads(text), stand, host)
    assert not left, (f"{example.name}: no stand-in for {'; '.join(left)}: add its "
                      f"substitutions to STAND_INS in {Path(__file__).name}")
    host.state.mkdir()
    config = tmp_path / example.name
    config.write_text(text)
    before = tree(tmp_path)
    env = clean_env(**stand.env)

    done = run_check(config, env)
    assert done.returncode == 0, done.stderr
    names = ", ".join(p["name"] for p in tomllib.loads(text)["pipelines"])
    assert done.stdout.strip().endswith(f": ok ({len(stand.tables)} pipeline"
                                        f"{'' if len(stand.tables) == 1 else 's'}: {names})")
    warned = done.stderr.strip().splitlines()
    assert len(warned) == len(stand.warnings), done.stderr
    for line, warning in zip(warned, stand.warnings, strict=True):
        assert line.startswith(f"meltwater: warning: {config}: {warning}"), line
    assert tree(tmp_path) == before  # no checkpoint, SQLite file or archive directory
    if stand.postgres is not None:
        assert postgres_tables(stand.postgres) == []

    assert stand.refusal is not None, f"{example.name}: give it a refusal"
    substitutions, refused_env, expected = stand.refusal
    config.write_text(substitute(text, substitutions, config.name))
    done = run_check(config, clean_env(**refused_env))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"meltwater: {config}: {expected}"), lines
    assert "Traceback" not in done.stderr
    if stand.postgres is not None:
        assert postgres_tables(stand.postgres) == []
