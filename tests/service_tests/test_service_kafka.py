"""`meltwater serve` with a kafka sink, against Tansu on loopback: the corpus histories
replayed one commit at a time into a served table, the topic folded by key after every
commit equals Iceberg Java's read of it, across kill -9 of the service, with no event lost
or doubled; an unreachable broker is retried (/health 503 saying why) and then nothing is
lost or doubled; a topic the sink may not create stops the pipeline in one line.

What a consumer holds is what `kafka_read` (testbed) reads: `read_committed`, keeping the
attempts a committed marker names (Tansu 0.6 shows aborted transactions to read_committed
consumers; Apache Kafka does not; see README.md, "Kafka").
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka_read import (
    check_order,
    confirmed,
    fold,
    markers,
    read_topic,
    truth_rows,
)
from loopback_ports import free_port
from service_process import Pipeline, ServiceProcess, write_config

from meltwater.planner.table.table_loading import load_table
from meltwater.sinks.mirror_stream import ledger_name
from watch_tests.replay import Replay

WAIT_S = 180


def _replayed(corpus, name: str, tmp_path: Path) -> Replay:
    """The scenario replayed up to its first snapshot."""
    replay = Replay(corpus.scenarios[name].location, tmp_path / "table")
    while replay.current_snapshot(replay.version + 1) is None:
        replay.commit()  # CREATE TABLE, SET IDENTIFIER FIELDS: no snapshot yet
    replay.commit()
    return replay


def _pipeline(replay: Replay, tmp_path: Path, bootstrap: str, **sink) -> Pipeline:
    return Pipeline("orders", replay.location, tmp_path / "chk",
                    {"type": "kafka", "bootstrap-servers": bootstrap, "topic": "lake.orders",
                     "timeout": 5, **sink})


def _transactional_id(pipeline: Pipeline) -> str:
    return f"meltwater-{ledger_name(pipeline.name, str(pipeline.checkpoint))}"


def _wait_for(service: ServiceProcess, what: str, condition, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if service.process.poll() is not None:
            raise AssertionError(f"service exited waiting for {what}:\n{service.tail(60)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f}s:\n{service.tail(60)}")
        time.sleep(0.2)


def _reached(broker, pipeline: Pipeline) -> int | None:
    """The snapshot the pipeline's last committed marker says the topic holds whole."""
    found = markers(broker.bootstrap, _transactional_id(pipeline))
    return found[-1]["snapshot_id"] if found else None


def _check(broker, pipeline: Pipeline, scenario, snapshots: list[int]) -> list:
    """The confirmed messages: no event twice, each key in commit order, and folded at each
    of `snapshots` equal to Iceberg Java's table there."""
    messages = confirmed(read_topic(broker.bootstrap, "lake.orders"),
                         markers(broker.bootstrap, _transactional_id(pipeline)))
    check_order(messages)
    metadata = load_table(scenario.location).metadata
    for snapshot_id in snapshots:
        assert fold(messages, metadata, snapshot_id) == truth_rows(
            scenario.snapshot(snapshot_id)), f"the topic at snapshot {snapshot_id}"
    return messages


@pytest.mark.parametrize(("name", "kills", "message_format"), [
    ("equality_deletes", (2, 5, 8), "json"), ("column_evolution", (4, 9), "json"),
    ("column_evolution", (6,), "json-with-schema"), ("column_evolution", (3,), "avro"),
    ("staged_upserts", (4, 7), "json")])
def test_the_topic_folds_to_iceberg_java_after_every_commit_across_kill_9(
        corpus, tmp_path, serve, kafka_broker, schema_registry, name, kills, message_format):
    """Each commit is waited for in the topic and checked; at `kills` the service is killed
    with SIGKILL right after the commit (its batch not started, running or committed) and
    started again. column_evolution adds, renames, widens, drops and re-adds columns: the
    query restarts in each new schema, and each event carries its commit's columns (with
    `json-with-schema`, each message its commit's Connect schema, by which the topic is
    read, as Kafka Connect reads it: `kafka_read.connect_value`; with `avro`, each commit's
    schemas registered in a BACKWARD registry, and the topic read by confluent-kafka's
    AvroDeserializer)."""
    scenario = corpus.scenarios[name]
    replay = _replayed(corpus, name, tmp_path)
    sink = {"format": message_format}
    if message_format == "avro":
        sink["schema-registry-url"] = schema_registry.url
    messages = _replay_through_kills(tmp_path, serve, kafka_broker, name, kills,
                                     message_format, scenario, replay, _pipeline(
                                         replay, tmp_path, kafka_broker.bootstrap, **sink))
    if name == "staged_upserts":  # main's conversions: the same-branch one sends nothing
        same = next(s for s in scenario.snapshots if s.label.startswith("same-branch"))
        onto = [s for s in scenario.snapshots if s.label.startswith("converted onto main")]
        sent = Counter(m.sequence_number for m in messages if m.value is not None)
        assert sent[same.sequence_number] == 0 and all(sent[s.sequence_number] for s in onto)
    if message_format == "avro":  # versions registered as the schema evolved
        assert len(schema_registry.state.subjects["lake.orders-value"]) >= 3


def _replay_through_kills(tmp_path, serve, kafka_broker, name, kills, message_format,
                          scenario, replay, pipeline) -> list:
    """Each commit replayed, waited for in the topic and checked; kill -9 at `kills`."""
    port = free_port()
    config = write_config(tmp_path / "service.toml", [pipeline], port=port)
    starts = 1
    service = serve.start(config, port, tmp_path / "service-1.log")
    checked: list[int] = []
    commits = 0
    while True:
        head = replay.current_snapshot()
        _wait_for(service, f"the topic at {head}", lambda head=head: _reached(
            kafka_broker, pipeline) == head)
        if head not in checked:  # a schema change commits metadata without a snapshot
            checked.append(head)
            _check(kafka_broker, pipeline, scenario, [head])
        if not replay.remaining:
            break
        replay.commit()
        commits += 1
        if commits in kills:
            service.kill()
            starts += 1
            service = serve.start(config, port, tmp_path / f"service-{starts}.log")
    assert service.stop() == 0, service.tail()
    messages = _check(kafka_broker, pipeline, scenario, checked)
    assert len(checked) >= 6 and starts == len(kills) + 1
    framed = [m for m in messages if m.value is not None and (
        m.value[:1] == b"\x00" or set(json.loads(m.value)) == {"schema", "payload"})]
    assert len(framed) == (0 if message_format == "json" else
                           sum(m.value is not None for m in messages))
    aborted = len(read_topic(kafka_broker.bootstrap, "lake.orders")) - len(messages)
    print(f"\n{name}: {len(checked)} snapshots checked, {len(messages)} messages, "
          f"{starts - 1} kills, {aborted} messages of aborted transactions shown by Tansu")
    return messages


def test_an_unreachable_broker_is_retried_with_health_saying_why(corpus, tmp_path, serve,
                                                                kafka_proxied):
    """The broker goes away while commits land: /health answers 503 naming the broker, the
    pipeline retrying; once it is back every commit reaches the topic once."""
    scenario = corpus.scenarios["equality_deletes"]
    replay = _replayed(corpus, "equality_deletes", tmp_path)
    pipeline = _pipeline(replay, tmp_path, kafka_proxied.bootstrap)
    port = free_port()
    config = write_config(tmp_path / "service.toml", [pipeline], port=port)
    service = serve.start(config, port, tmp_path / "service.log")
    head = replay.current_snapshot()
    _wait_for(service, f"the topic at {head}", lambda: _reached(kafka_proxied, pipeline) == head)
    kafka_proxied.proxy.cut()
    replay.commit_until(replay.version + 3)

    def failing():
        answer = service.health()
        orders = (answer[1].get("pipelines") or {}).get("orders", {}) if answer else {}
        return answer is not None and answer[0] == 503 and orders.get("state") == "failing" \
            and answer
    _, health = _wait_for(service, "/health 503", failing)
    reason = health["pipelines"]["orders"]["last_error"]
    assert reason.startswith(f"SinkUnavailableError: Kafka broker {kafka_proxied.bootstrap} "
                             "unavailable while "), reason
    assert "\n" not in reason
    kafka_proxied.proxy.restore()
    replay.commit_until(len(replay.sources))
    head = replay.current_snapshot()
    _wait_for(service, f"the topic at {head}", lambda: _reached(kafka_proxied, pipeline) == head)
    _wait_for(service, "/health 200", lambda: (service.health() or (0,))[0] == 200)
    assert service.stop() == 0, service.tail()
    main = [s.snapshot_id for s in scenario.snapshots if not s.expired]
    _check(kafka_proxied, pipeline, scenario, main)


def test_a_topic_the_sink_may_not_create_stops_the_pipeline_in_one_line(
        corpus, tmp_path, serve, kafka_broker):
    replay = _replayed(corpus, "equality_deletes", tmp_path)
    pipeline = _pipeline(replay, tmp_path, kafka_broker.bootstrap, **{"create-topics": False})
    port = free_port()
    config = write_config(tmp_path / "service.toml", [pipeline], port=port)
    service = serve.start(config, port, tmp_path / "service.log")

    def failed():
        answer = service.health()
        orders = (answer[1].get("pipelines") or {}).get("orders", {}) if answer else {}
        return orders.get("state") == "failed" and answer
    status, health = _wait_for(service, "the pipeline failed", failed)
    assert status == 503
    assert health["pipelines"]["orders"]["last_error"] == (
        f"TopicUnavailableError: topic lake.orders does not exist on {kafka_broker.bootstrap}: "
        "create it, or let the sink create it (create-topics = true)")
    assert service.stop() == 0, service.tail()
