"""The `foreachBatch` adapter: one collect per batch, picklable, and a real streaming query.

The streaming test runs `spark.readStream.format("meltwater")` into a mirror in several
micro-batches, compares it with Iceberg Java's read, then makes Spark replay the last
batch (its commit log entry removed, as after a crash between the sink's commit and
Spark's) and checks the mirror skipped it.
"""

from __future__ import annotations

import functools
import pickle

import pyarrow as pa
from mirror_read import fetch, read_mirror

from corpus.compare import row_multiset
from meltwater.planner.spec.types import LONG, STRING, NestedField, Schema
from meltwater.planner.table.table_loading import load_table
from meltwater.sinks import ForeachBatchWriter, Mirror, foreach_batch, open_sink

SCHEMA = Schema((NestedField(1, "id", LONG, required=True), NestedField(2, "v", STRING)),
                identifier_field_ids=(1,))


class FakeFrame:
    """Stands in for a DataFrame: counts how often the batch is collected."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.collects = 0

    def toArrow(self) -> pa.Table:
        self.collects += 1
        return self.table


def _batch(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids],
                     "_change_type": ["INSERT"] * len(ids),
                     "_change_ordinal": pa.array([0] * len(ids), pa.int32())})


def test_the_writer_collects_each_batch_once_and_pickles_without_its_connection(tmp_path):
    url = f"sqlite://{tmp_path}/m.db"
    writer = foreach_batch(functools.partial(open_sink, url, table="t", source=SCHEMA))
    frame = FakeFrame(_batch([1, 2]))
    writer(frame, 0)
    assert frame.collects == 1 and writer.last_result.upserted == 2
    clone = pickle.loads(pickle.dumps(writer))  # what Spark Connect does with the function
    assert isinstance(clone, ForeachBatchWriter) and not clone.apply.opened
    clone(FakeFrame(_batch([1, 2])), 0)
    assert clone.last_result.skipped
    clone(FakeFrame(_batch([3])), 1)
    assert fetch(url, 'SELECT count(*) FROM "t"') == [(3,)]
    writer.close()
    clone.close()
    with Mirror(url, table="t", source=SCHEMA) as mirror:
        direct = foreach_batch(mirror)  # an open sink works in the driver's own process
        direct(FakeFrame(_batch([4])), 2)
        assert direct.last_result.position.batch_id == 2


def test_a_streaming_query_mirrors_the_table_and_a_replayed_batch_is_skipped(
        spark, corpus, tmp_path, sqlite_database):
    scenario = corpus.scenarios["random_mix"]  # every primitive type, struct, list, map
    metadata = load_table(scenario.location).metadata
    checkpoint = tmp_path / "checkpoint"
    writer = foreach_batch(functools.partial(open_sink, sqlite_database, table="rich",
                                             source=scenario.location, key_columns=["id"]))
    results = []

    def run() -> None:
        def apply(df, batch_id):
            writer(df, batch_id)
            results.append(writer.last_result)

        query = (spark.readStream.format("meltwater").option("starting", "earliest")
                 .option("streaming-max-files-per-micro-batch", 40).load(scenario.location)
                 .writeStream.foreachBatch(apply).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run()
    assert len(results) > 1 and not any(r.skipped for r in results)
    truth = scenario.snapshot(metadata.current_snapshot_id).rows()
    assert row_multiset(read_mirror(sqlite_database, "rich", metadata.schema)) == \
        row_multiset(truth)
    last = results[-1].batch_id
    for name in (str(last), f".{last}.crc"):  # Spark will run the last batch again
        (checkpoint / "commits" / name).unlink()
    results.clear()
    run()
    assert [(r.batch_id, r.skipped) for r in results] == [(last, True)]
    assert row_multiset(read_mirror(sqlite_database, "rich", metadata.schema)) == \
        row_multiset(truth)
    writer.close()
