"""The kafka sink against a real Kafka-protocol broker (Tansu on loopback): what a consumer
folding the topic by key holds equals what Iceberg Java reads after every commit; replays,
crashes and an unreachable broker lose and duplicate nothing; what cannot heal is one line.

Batches are one commit each, read with `meltwater.stream.changes` (no Spark here; the
service's tests run the same sink under Spark, `tests/service_tests/test_service_kafka.py`).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_read import (
    check_order,
    confirmed,
    decoded,
    fold,
    markers,
    read_topic,
    truth_rows,
)

import meltwater.stream
from meltwater.planner.table.table_loading import load_table
from meltwater.sinks.errors import (
    BatchMismatchError,
    BrokerAuthenticationError,
    MessageTooLargeError,
    MissingKeyColumnsError,
    SinkUnavailableError,
    TopicUnavailableError,
)
from meltwater.sinks.kafka_avro import RegistryConfig
from meltwater.sinks.kafka_client import PRODUCER_DEFAULTS, Connection
from meltwater.sinks.kafka_sink import KafkaSink, KafkaSinkOptions

# Apache Kafka's UtilsTest.testMurmur2: key -> the Java client's murmur2 hash (signed)
JAVA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482,
                b"a-little-bit-long-string": -985981536,
                b"a-little-bit-longer-string": -1486304829,
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
                b"abc": 479470107}


def commits(corpus, name: str) -> tuple[object, list[int]]:
    scenario = corpus.scenarios[name]
    metadata = load_table(scenario.location).metadata
    main = [s.snapshot_id for s in reversed(metadata.ancestors(metadata.current_snapshot_id))]
    return scenario, main


def batch_of(scenario, main: list[int], index: int):
    start = main[index - 1] if index else None
    return meltwater.stream.changes(scenario.location, from_snapshot_id=start,
                                    to_snapshot_id=main[index]).read_all()


def sink_for(broker, scenario, topic: str, **options) -> KafkaSink:
    connection = Connection(broker.bootstrap, topic, options.pop("properties", {}),
                            options.pop("timeout_s", 20.0))
    return KafkaSink(KafkaSinkOptions(connection, scenario.location, f"test-{topic}",
                                      **options))


def assert_folds_to_truth(broker, scenario, main, topic: str, upto: int | None = None) -> list:
    """After the commits main[:upto], the confirmed messages fold to Iceberg Java's table
    at each of them, carry no event twice and keep each key's order."""
    upto = len(main) if upto is None else upto
    messages = confirmed(read_topic(broker.bootstrap, topic),
                         markers(broker.bootstrap, f"test-{topic}"))
    check_order(messages)
    metadata = load_table(scenario.location).metadata
    for snapshot_id in main[:upto]:
        truth = scenario.snapshot(snapshot_id)
        assert fold(messages, metadata, snapshot_id) == truth_rows(truth), (
            f"{scenario.name}: the topic folded at snapshot {snapshot_id} differs from "
            "Iceberg Java's table")
    return messages


def test_messages_are_partitioned_as_the_java_producer_does(kafka_broker):
    """The sink's producer defaults put keyed messages where Apache Kafka's Java producer
    does, by Kafka's own murmur2 test vectors; librdkafka's default would not."""
    topic = "murmur2"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result()

    def partitions(config):
        found = {}
        producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, **config})
        for key in JAVA_MURMUR2:
            producer.produce(topic, key=key, value=b"x", on_delivery=lambda _e, m: found.
                             __setitem__(m.key(), m.partition()))
        assert producer.flush(30) == 0
        return found

    java = {key: (hash_ & 0x7FFFFFFF) % 12 for key, hash_ in JAVA_MURMUR2.items()}
    assert partitions(PRODUCER_DEFAULTS) == java
    assert partitions({}) != java  # librdkafka's own default (CRC32) disagrees


@pytest.mark.parametrize("message_format", ["json", "json-with-schema", "avro"])
def test_transaction_metadata_brackets_each_commit_split_over_batches_and_a_restart(
        corpus, kafka_broker, schema_registry, message_format):
    """`transaction_topic`: a BEGIN and an END per commit (Debezium's shapes), the END
    counting the commit's change events (not tombstones), and each event's `transaction`
    block numbering them 1..N, also for a commit whose rows span two batches with a
    restart between them (its order goes on from the batch marker; the topic's partitions
    each hold theirs in order); the topic still folds to Iceberg Java's table."""
    import pyarrow.compute as pc

    scenario, main = commits(corpus, "equality_deletes")
    topic, transactions = f"lake.txn-{message_format}", f"lake.txn-{message_format}.transaction"
    split = next(i for i in range(1, len(main))
                 if len(set(batch_of(scenario, main, i).column("id").to_pylist())) > 1)
    options = dict(transaction_topic=transactions, message_format=message_format,
                   schema_registry=RegistryConfig(schema_registry.url, {}))
    metadata = load_table(scenario.location).metadata
    with sink_for(kafka_broker, scenario, topic, **options) as sink:
        for index in range(split):
            sink.apply(index, batch_of(scenario, main, index))
        rows = batch_of(scenario, main, split)
        keys = sorted(set(rows.column("id").to_pylist()))
        first = pc.is_in(rows.column("id"), pa.array(keys[:len(keys) // 2], pa.int64()))
        before = metadata.snapshot(main[split - 1])
        sink.apply(split, rows.filter(first), snapshot_id=before.snapshot_id,
                   sequence_number=before.sequence_number)  # the commit goes on
    with sink_for(kafka_broker, scenario, topic, **options) as sink:  # a restart
        sink.apply(split + 1, rows.filter(pc.invert(first)))
        for index in range(split + 1, len(main)):
            sink.apply(index + 1, batch_of(scenario, main, index))
    messages = assert_folds_to_truth(kafka_broker, scenario, main, topic)
    boundaries = [decoded(m.value) for m in read_topic(kafka_broker.bootstrap, transactions)]
    events: dict[str, list[dict]] = {}
    for m in messages:
        if m.value is not None:
            events.setdefault(m.event["transaction"]["id"], []).append(m.event)
    assert [b["status"] for b in boundaries] == ["BEGIN", "END"] * len(events)
    for begin, end in zip(boundaries[::2], boundaries[1::2], strict=True):
        ident = begin["id"]
        assert end["id"] == ident and begin["event_count"] is None
        commit = events[ident]
        assert end["event_count"] == len(commit) and end["data_collections"] == [
            {"data_collection": scenario.location, "event_count": len(commit)}]
        orders = [e["transaction"]["total_order"] for e in commit]  # by partition, offset
        assert sorted(orders) == list(range(1, len(commit) + 1))
        assert all(e["transaction"]["data_collection_order"] == e["transaction"]["total_order"]
                   and e["source"]["snapshot_id"] == int(ident) for e in commit)
        assert begin["ts_ms"] == end["ts_ms"] == commit[0]["source"]["ts_ms"]
    assert str(main[split]) in events


@pytest.mark.parametrize("name", ["equality_deletes", "column_evolution"])
def test_the_topic_folds_to_iceberg_javas_table_after_every_commit(corpus, kafka_broker, name):
    """Every commit of a corpus history, one batch each, then all of them replayed as Spark
    replays after a crash: nothing written twice; the topic folded by key equals Iceberg
    Java's read at every snapshot. column_evolution renames, drops and re-adds columns:
    each event carries its commit's columns."""
    scenario, main = commits(corpus, name)
    topic = f"lake.{name}"
    with sink_for(kafka_broker, scenario, topic) as sink:
        for index in range(len(main)):
            result = sink.apply(index, batch_of(scenario, main, index))
            assert not result.skipped and result.position.batch_id == index
        written = read_topic(kafka_broker.bootstrap, topic)
        assert sink.apply(len(main) - 1, batch_of(scenario, main, len(main) - 1)).skipped
    with sink_for(kafka_broker, scenario, topic) as reopened:  # a restart, as after kill -9
        last = len(main) - 1
        assert reopened.reached().batch_id == last
        assert reopened.apply(last, batch_of(scenario, main, last)).skipped
        # an older batch id, or the last with other rows: a new checkpoint under an old
        # transactional id, refused rather than skipped
        with pytest.raises(BatchMismatchError, match=f"last committed batch {last}, and "
                                                     "Spark replays only its last batch"):
            reopened.apply(last - 1, batch_of(scenario, main, last - 1))
        with pytest.raises(BatchMismatchError, match=f"batch {last} of test-{topic} was "
                                                     "written with \\d+ events"):
            reopened.apply(last, batch_of(scenario, main, 0))
    assert read_topic(kafka_broker.bootstrap, topic) == written
    messages = assert_folds_to_truth(kafka_broker, scenario, main, topic)
    assert messages == written  # every message is of a committed attempt
    assert {m.value is None for m in messages} == {False, True}  # deletes have tombstones


def test_key_before_images_carry_the_key_and_fold_to_the_same_table(corpus, kafka_broker):
    """A sink whose stream reads key before-images (`before-images = "key"`): each update's
    and delete's `before` is the full one's key columns, every other column null, and the
    topic still folds to Iceberg Java's table at every commit."""
    name = "equality_deletes"
    scenario, main = commits(corpus, name)
    befores = {}
    for images in ("full", "key"):
        topic = f"lake.{name}.before-{images}"
        with sink_for(kafka_broker, scenario, topic) as sink:
            for index in range(len(main)):
                start = main[index - 1] if index else None
                batch = meltwater.stream.changes(
                    scenario.location, from_snapshot_id=start, to_snapshot_id=main[index],
                    before_images=images).read_all()
                sink.apply(index, batch)
        messages = assert_folds_to_truth(kafka_broker, scenario, main, topic)
        befores[images] = [m.event["before"] for m in messages
                           if m.value is not None and m.event["before"] is not None]
    full, key = befores["full"], befores["key"]
    assert len(full) == len(key) > 0
    assert any(set(b) - {"id"} and any(v is not None for c, v in b.items() if c != "id")
               for b in full)  # the full images carry more than the key
    assert key == [{c: (v if c == "id" else None) for c, v in b.items()} for b in full]


CRASH = """
import os, sys
from meltwater.sinks import kafka_sink
from kafka_sink_child import open_sink, batch
sink = open_sink()
for index in range({before}):
    sink.apply(index, batch(index))
def crash(self):
    os._exit(9)  # after the flush of every event, before the marker and the commit
kafka_sink.BatchMarker.to_json = crash
sink.apply({before}, batch({before}))
"""


def test_a_crash_before_the_commit_is_written_once_when_the_batch_runs_again(
        corpus, kafka_broker, tmp_path):
    """A process killed inside a batch's transaction, after every event reached the
    broker: the restarted sink finds no marker for the batch, writes it again, and a
    read_committed consumer holds each event once. Tansu 0.6 shows the aborted
    transaction's messages to read_committed consumers (Apache Kafka hides them): they
    are asserted here, identical to the committed copies, and left out by their attempt,
    which no marker names."""
    scenario, main = commits(corpus, "equality_deletes")
    topic = "lake.crash"
    (tmp_path / "kafka_sink_child.py").write_text(textwrap.dedent(f"""
        import meltwater.stream
        from meltwater.sinks.kafka_client import Connection
        from meltwater.sinks.kafka_sink import KafkaSink, KafkaSinkOptions
        MAIN = {main!r}
        def open_sink():
            return KafkaSink(KafkaSinkOptions(Connection({kafka_broker.bootstrap!r}, {topic!r},
                             {{}}, 20.0), {scenario.location!r}, "test-{topic}"))
        def batch(i):
            return meltwater.stream.changes({scenario.location!r},
                from_snapshot_id=MAIN[i - 1] if i else None, to_snapshot_id=MAIN[i]).read_all()
        """))
    child = subprocess.run([sys.executable, "-c", CRASH.format(before=3)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 9, child.stderr
    committed = markers(kafka_broker.bootstrap, f"test-{topic}")
    assert [m["batch_id"] for m in committed] == [0, 1, 2]
    # the open transaction is hidden from read_committed consumers (Tansu does this)
    before_restart = read_topic(kafka_broker.bootstrap, topic)
    assert before_restart == confirmed(before_restart, committed)
    with sink_for(kafka_broker, scenario, topic) as sink:
        assert sink.reached().batch_id == 2
        assert not sink.apply(3, batch_of(scenario, main, 3)).skipped
        for index in range(4, len(main)):
            sink.apply(index, batch_of(scenario, main, index))
    messages = assert_folds_to_truth(kafka_broker, scenario, main, topic)
    everything = read_topic(kafka_broker.bootstrap, topic)
    shown = [m for m in everything if m not in messages]  # Tansu's gap: the aborted attempt
    batch_3 = [m for m in messages if m.headers["meltwater.snapshot_id"] == str(main[3]).encode()]
    assert shown and len(shown) == len(batch_3)
    assert [(m.event_id, m.key) for m in shown] == [(m.event_id, m.key) for m in batch_3]


def test_an_unreachable_broker_is_retried_and_then_nothing_is_lost_or_doubled(
        corpus, kafka_proxied):
    """The broker goes away between batches: the batch fails with a retryable error naming
    the broker; once it is back the batch runs again (as the service retries it) and the
    topic holds every commit once."""
    scenario, main = commits(corpus, "equality_deletes")
    topic = "lake.unreachable"
    sink = sink_for(kafka_proxied, scenario, topic, timeout_s=3.0)
    for index in range(3):
        sink.apply(index, batch_of(scenario, main, index))
    kafka_proxied.proxy.cut()
    with pytest.raises(SinkUnavailableError, match=f"Kafka broker {kafka_proxied.bootstrap} "
                                                  "unavailable while writing batch 3") as failed:
        sink.apply(3, batch_of(scenario, main, 3))
    assert failed.value.retryable and "\n" not in str(failed.value)
    kafka_proxied.proxy.restore()
    for index in range(3, len(main)):
        assert not sink.apply(index, batch_of(scenario, main, index)).skipped
    sink.close()
    assert_folds_to_truth(kafka_proxied, scenario, main, topic)


def test_a_broker_that_never_answered_is_retryable(corpus):
    scenario, _ = commits(corpus, "equality_deletes")
    with pytest.raises(SinkUnavailableError, match=r"Kafka broker 127.0.0.1:9 unavailable "
                                                  r"while listing the topics .*refused"):
        KafkaSink(KafkaSinkOptions(Connection("127.0.0.1:9", "t", {}, 2.0),
                                   scenario.location, "x")).apply(
            0, batch_of(scenario, commits(corpus, "equality_deletes")[1], 0))


def test_what_cannot_heal_is_one_line_naming_it(corpus, kafka_broker):
    scenario, main = commits(corpus, "equality_deletes")
    small = sink_for(kafka_broker, scenario, "lake.small",
                     properties={"message.max.bytes": 1000})
    first = batch_of(scenario, main, 0).slice(0, 1)
    index = first.column_names.index("name")
    big = first.set_column(index, first.schema.field(index), [["x" * 2000]])
    with pytest.raises(MessageTooLargeError, match=r"^topic lake.small: the event for key "
                       r"\{\"id\": \d+\} of snapshot \d+ in batch 0 of test-lake.small is \d+ "
                       r"bytes, over the producer's message.max.bytes \(1000\)"):
        small.apply(0, big)
    assert small.reached() is None  # nothing of the batch committed
    missing = sink_for(kafka_broker, scenario, "lake.absent", create_topics=False)
    with pytest.raises(TopicUnavailableError, match=f"^topic lake.absent does not exist on "
                                                    f"{kafka_broker.bootstrap}: create it"):
        missing.apply(0, batch_of(scenario, main, 0))
    with pytest.raises(MissingKeyColumnsError, match=r"has no identifier fields .* key"):
        sink_for(kafka_broker, commits(corpus, "equality_global")[0], "lake.nokey")
    for error in (MessageTooLargeError, TopicUnavailableError, MissingKeyColumnsError):
        assert not error.retryable


def test_refused_credentials_are_one_line_naming_them(corpus, kafka_authenticated):
    scenario, main = commits(corpus, "equality_deletes")
    broker = kafka_authenticated
    sink = sink_for(broker, scenario, "lake.auth", timeout_s=5.0, properties={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "meltwater", "sasl.password": "wrong"})
    with pytest.raises(BrokerAuthenticationError, match=f"^Kafka broker {broker.bootstrap} "
                       "refused the connection while listing the topics .*_AUTHENTICATION"
                       ".*check security.protocol and the sasl") as refused:
        sink.apply(0, batch_of(scenario, main, 0))
    assert not refused.value.retryable and "\n" not in str(refused.value)


def test_a_topic_with_a_transaction_open_is_not_settled(kafka_broker):
    """`kafka_read.settled`, which the soak reads the topic under: Tansu answers a
    read_committed consumer's end of a partition with an open transaction as 0, so a read
    then is partial; settled says so until the transaction ends."""
    from confluent_kafka import Producer
    from kafka_read import settled

    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap,
                         "transactional.id": "settled-test"})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(40):
        producer.produce("lake.settled", key=f"k{i}".encode(), value=b"v")
    producer.commit_transaction()
    assert settled(kafka_broker.bootstrap, "lake.settled")
    assert len(read_topic(kafka_broker.bootstrap, "lake.settled")) == 40
    producer.begin_transaction()
    for i in range(40):
        producer.produce("lake.settled", key=f"o{i}".encode(), value=b"v")
    producer.flush()
    assert not settled(kafka_broker.bootstrap, "lake.settled")
    producer.commit_transaction()
    assert settled(kafka_broker.bootstrap, "lake.settled")
    assert len(read_topic(kafka_broker.bootstrap, "lake.settled")) == 80
