"""`kafka_foreach_batch` in a user's own streaming query: the README's example, run.

random_mix has every primitive type, structs, lists and maps, and no identifier fields: the
key is given (`key`), and the stream pairs its updates by it (`identifier-columns`). The
query runs in several micro-batches (read limits); the topic, folded by key, equals
Iceberg Java's read at every snapshot. Then Spark is made to replay the last batch (its
commit log entry removed, as after a crash between Kafka's commit and Spark's) and the
topic is unchanged.
"""

from __future__ import annotations

from kafka_read import check_order, confirmed, fold, markers, read_topic, truth_rows

from meltwater.planner.table.table_loading import load_table
from meltwater.sinks import kafka_foreach_batch


def test_a_users_streaming_query_writes_each_commit_once(spark, corpus, kafka_broker,
                                                         tmp_path):
    scenario = corpus.scenarios["random_mix"]
    metadata = load_table(scenario.location).metadata
    checkpoint = tmp_path / "checkpoint"
    writer = kafka_foreach_batch(scenario.location, bootstrap_servers=kafka_broker.bootstrap,
                                 transactional_id="test-rich", topic="lake.rich", key=["id"])
    results = []

    def run() -> None:
        def apply(df, batch_id):
            writer(df, batch_id)
            results.append(writer.last_result)

        query = (spark.readStream.format("meltwater").option("starting", "earliest")
                 .option("identifier-columns", "id")
                 .option("streaming-max-files-per-micro-batch", 40).load(scenario.location)
                 .writeStream.foreachBatch(apply).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run()
    assert len(results) > 1 and not any(r.skipped for r in results)
    written = read_topic(kafka_broker.bootstrap, "lake.rich")
    messages = confirmed(written, markers(kafka_broker.bootstrap, "test-rich"))
    assert messages == written
    check_order(messages)
    for snapshot in scenario.snapshots:
        if not snapshot.expired:
            assert fold(messages, metadata, snapshot.snapshot_id) == truth_rows(snapshot), (
                f"the topic at snapshot {snapshot.snapshot_id}")
    last = results[-1].batch_id
    for name in (str(last), f".{last}.crc"):  # Spark will run the last batch again
        (checkpoint / "commits" / name).unlink()
    results.clear()
    run()
    assert [(r.batch_id, r.skipped) for r in results] == [(last, True)]
    assert read_topic(kafka_broker.bootstrap, "lake.rich") == written
    writer.close()
