"""`meltwater serve` mirroring a table named `lake.svc.orders` (SeaweedFS's REST catalog, its
files on S3) into PostgreSQL while pyiceberg commits to it through the catalog, through
kill -9s of the service.

The catalog is configured only in the service's `[catalogs.lake]` (no `AWS_*`, no
`PYICEBERG_*` in its environment). After every commit the mirror is read in one transaction
with its ledger and must equal the writer's model at exactly the snapshot the ledger names;
the model is a plain-Python dict updated by the same operation, never read back from the
table. A counting proxy in front of the catalog measures what the idle service costs it.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from http_counter import CountingProxy
from loopback_ports import free_port
from service_process import Pipeline, write_config

from corpus.compare import row_multiset
from corpus.pyiceberg_writer import SCHEMA
from meltwater.sinks.mirror_stream import ledger_name

TABLE = "orders_svc"
KILLS = 5


@dataclass(frozen=True)
class Commit:
    snapshot_id: int
    sequence_number: int
    rows: pa.Table
    committed_at: float


class CatalogWriter:
    """pyiceberg committing through the REST catalog; a dict model says what each commit's
    snapshot holds. Operations cycle: append, delete, overwrite of a partition, upsert."""

    def __init__(self, catalog: Any, identifier: tuple[str, ...], seed: int) -> None:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import DoubleType, LongType, NestedField, StringType

        catalog.create_namespace_if_not_exists(identifier[:-1])
        schema = Schema(NestedField(1, "id", LongType(), required=True),
                        NestedField(2, "category", StringType(), required=True),
                        NestedField(3, "name", StringType(), required=False),
                        NestedField(4, "amount", DoubleType(), required=False),
                        identifier_field_ids=[1])
        spec = PartitionSpec(PartitionField(source_id=2, field_id=1000,
                                            transform=IdentityTransform(), name="category"))
        self.table = catalog.create_table(identifier, schema=schema, partition_spec=spec)
        self.model: dict[int, dict[str, Any]] = {}
        self.commits: list[Commit] = []
        self.rng = random.Random(seed)
        self.next_id = 1

    def _arrow(self, rows: list[dict[str, Any]]) -> pa.Table:
        return pa.Table.from_pylist(sorted(rows, key=lambda r: r["id"]), schema=SCHEMA)

    def _row(self, key: int, tag: str) -> dict[str, Any]:
        return {"id": key, "category": "abc"[key % 3], "name": f"{tag}{key}",
                "amount": round(self.rng.uniform(0, 100), 2)}

    def commit(self) -> Commit:
        from pyiceberg.expressions import EqualTo, In

        kind = len(self.commits) % 4
        if kind == 0 or len(self.model) < 6:
            rows = [self._row(self.next_id + i, "n") for i in range(8)]
            self.next_id += 8
            self.model.update({r["id"]: r for r in rows})
            self.table.append(self._arrow(rows))
        elif kind == 1:
            gone = self.rng.sample(sorted(self.model), 3)
            for key in gone:
                del self.model[key]
            self.table.delete(In("id", gone))
        elif kind == 2:
            category = "abc"[self.rng.randrange(3)]
            keep = [r for r in self.model.values() if r["category"] == category][:2]
            rows = [{**r, "name": f"o{r['id']}"} for r in keep]
            for key in [k for k, r in self.model.items() if r["category"] == category]:
                del self.model[key]
            self.model.update({r["id"]: r for r in rows})
            self.table.overwrite(self._arrow(rows), overwrite_filter=EqualTo("category",
                                                                            category))
        else:
            changed = [{**self.model[k], "name": f"u{k}", "amount": -1.0}
                       for k in self.rng.sample(sorted(self.model), 2)]
            new = [self._row(self.next_id, "up")]
            self.next_id += 1
            rows = changed + new
            self.model.update({r["id"]: r for r in rows})
            self.table.upsert(self._arrow(rows), join_cols=["id"])
        self.table.refresh()
        current = self.table.current_snapshot()
        commit = Commit(current.snapshot_id, current.sequence_number,
                        self._arrow(list(self.model.values())), time.time())
        self.commits.append(commit)
        return commit

    def at_sequence(self, sequence_number: int) -> Commit:
        return next(c for c in self.commits if c.sequence_number == sequence_number)


@dataclass(frozen=True)
class Mirrored:
    snapshot_id: int | None
    sequence_number: int | None
    rows: pa.Table
    seen_at: float


def read_mirror(url: str, ledger: str) -> Mirrored:
    """The mirror's rows and its ledger position, in one REPEATABLE READ transaction."""
    with psycopg.connect(url) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        try:
            position = conn.execute(
                "SELECT snapshot_id, sequence_number FROM meltwater_ledger WHERE pipeline = %s"
                " ORDER BY batch_id DESC LIMIT 1", (ledger,)).fetchone()
            rows = conn.execute(f'SELECT id, category, name, amount FROM "{TABLE}"').fetchall()
        except psycopg.errors.UndefinedTable:
            position, rows = None, []
        conn.execute("COMMIT")
    table = pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, (int(r[0]), r[1], r[2], None if r[3] is None else float(r[3])),
                  strict=True)) for r in rows], schema=SCHEMA)
    snapshot_id, sequence = position or (None, None)
    return Mirrored(snapshot_id, sequence, table, time.time())


def wait_for(url: str, ledger: str, sequence_number: int, timeout: float = 120) -> Mirrored:
    deadline = time.monotonic() + timeout
    while True:
        state = read_mirror(url, ledger)
        if state.sequence_number is not None and state.sequence_number >= sequence_number:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"mirror did not reach sequence number {sequence_number} in "
                                 f"{timeout:.0f} s (it holds {state.sequence_number})")
        time.sleep(0.02)


def assert_exact(state: Mirrored, writer: CatalogWriter, what: str) -> None:
    assert state.sequence_number is not None, what
    commit = writer.at_sequence(state.sequence_number)
    assert state.snapshot_id == commit.snapshot_id, what
    got, want = row_multiset(state.rows), row_multiset(commit.rows)
    assert got == want, (f"{what}: extra {list((got - want).elements())[:3]}, missing "
                         f"{list((want - got).elements())[:3]}")


def test_serve_mirrors_a_rest_catalog_table_through_kill_9s(tmp_path, seaweed, pg_database,
                                                             serve):
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("writer", **seaweed.catalog_properties())
    writer = CatalogWriter(catalog, ("svc", "orders"), seed=7)
    first = writer.commit()
    rng = random.Random(11)
    with CountingProxy(seaweed.catalog_uri) as proxy:
        catalog_config = {**seaweed.catalog_properties(), "uri": proxy.url,
                          "oauth2-server-uri": f"{proxy.url}/v1/oauth/tokens"}
        pipeline = Pipeline("svc", "lake.svc.orders", tmp_path / "checkpoint",
                            {"type": "postgres", "url": pg_database, "table": TABLE,
                             "key": ["id"]})
        port = free_port()
        config = write_config(tmp_path / "service.toml", [pipeline], port=port)
        config.write_text(config.read_text() + "\n[catalogs.lake]\n" + "".join(
            f'"{k}" = "{v}"\n' for k, v in catalog_config.items()))
        ledger = ledger_name(pipeline.name, str(pipeline.checkpoint))
        latencies: list[float] = []
        checked = 0
        for round_ in range(KILLS + 1):
            service = serve.start(config, port, tmp_path / f"service-{round_}.log")
            try:
                service.wait_running(timeout=180)
                state = wait_for(pg_database, ledger, writer.commits[-1].sequence_number)
                assert_exact(state, writer, f"round {round_}, caught up")
                for _ in range(4):  # commits landing while the service runs: each exact
                    commit = writer.commit()
                    state = wait_for(pg_database, ledger, commit.sequence_number)
                    latencies.append(state.seen_at - commit.committed_at)
                    assert_exact(state, writer, f"round {round_}, commit {commit.snapshot_id}")
                    checked += 1
                if round_ == KILLS:
                    idle_from = proxy.count("GET", "/orders")
                    time.sleep(30)
                    idle = proxy.count("GET", "/orders") - idle_from
                    assert service.stop() == 0, service.tail()
                    break
                writer.commit()  # then kill -9 mid-batch or between batches
                time.sleep(rng.uniform(0, 1.5))
                service.kill()
                state = read_mirror(pg_database, ledger)
                assert_exact(state, writer, f"after kill {round_ + 1}")
            finally:
                if service.process.poll() is None:
                    service.kill()
    assert first.sequence_number == 1 and checked == 4 * (KILLS + 1)
    # one loadTable a second from the stream's watcher, none from the service's own head
    assert idle <= 32, f"{idle} catalog requests in 30 s idle"
    print(f"\n{KILLS} kills, {len(writer.commits)} commits; commit-to-mirror latency "
          f"median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s; idle "
          f"catalog requests {idle} in 30 s ({idle * 2} a minute)")
