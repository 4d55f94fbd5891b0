"""Kafka sink benchmark (issue 26): events per second into Kafka, against a plain producer of
the same messages, and commit -> topic latency in the service.

Usage: .venv/bin/python bench/kafka.py [--rows 30000000] [--repeats 3] [--commits 30]
       [--formats json,json-with-schema,avro]

1. Throughput. The scale ladder's `big` table (bench/ladder_tables.py: 30M rows written by
   Iceberg Java 1.10.2, then a merge-on-read DELETE of 1% of the rows and an UPDATE of
   0.1%, hashed over every data file; cached) has two change commits. Each commit's change
   rows are read once with `meltwater.stream.changes` (not timed: the read is the change
   benchmark's), then written to a fresh topic of Tansu on loopback (testbed/
   kafka_broker.py, memory storage, 4 partitions) by:
   - meltwater: `KafkaSink.apply` of the commit as one batch: Debezium events built from
     the Arrow rows (`kafka_events`), produced in one transaction, flushed, the marker,
     the commit. Timed whole, and the event building apart;
   - the floor: a plain confluent-kafka producer (librdkafka's defaults, no transaction)
     producing the very messages meltwater built (keys, values, headers), then `flush()`.
   Each --repeats times, median reported; events are messages (a DELETE's tombstone is
   one). Each of --formats: `json`, `json-with-schema`, `avro` (schemas registered in
   testbed/schema_registry.py on loopback, once per process, as the sink does).
2. Latency. The live Iceberg Java writer (testbed/live) commits merge-on-read changes of
   random kinds to a table under a scratch directory while `meltwater serve` (local[2],
   `trigger = "event"`, a kafka sink keyed on `id`) writes them to Tansu; a
   `read_committed` consumer of the batches topic notes when each batch's marker arrives.
   A commit's latency is from Iceberg Java's commit returning to the marker naming its
   snapshot reaching the consumer: what a consumer of the topic waits. --commits commits,
   one every 0.2-1.2 s (random, seeded).

Prints the figures; writes bench/results/kafka.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))

from kafka_broker import KafkaBroker
from ladder_tables import Shape, ensure_ladder_table
from loopback_ports import free_port
from service_process import Pipeline, ServiceProcess, write_config

RESULTS = Path(__file__).resolve().parent / "results" / "kafka.json"
PARTITIONS = 4


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=30_000_000,
                        help="rows of the big ladder table (default 30,000,000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--commits", type=int, default=30,
                        help="commits timed for the latency (default 30; 0 skips it)")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--formats", default="json",
                        help="message formats to time, comma-separated: json, "
                             "json-with-schema, avro (default json)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def _topic(broker: KafkaBroker, name: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result()
    return name


def time_commit(broker: KafkaBroker, location: str, parent: int, snapshot: int, label: str,
                repeats: int, message_format: str = "json",
                registry_url: str | None = None) -> dict[str, Any]:
    from confluent_kafka import Producer

    import meltwater.stream
    from meltwater.sinks.kafka_avro import AvroMessages, RegistryConfig
    from meltwater.sinks.kafka_client import Connection
    from meltwater.sinks.kafka_events import EventOptions, kafka_events
    from meltwater.sinks.kafka_sink import KafkaSink, KafkaSinkOptions
    from meltwater.sinks.message_formats import MessageFormat

    batch = meltwater.stream.changes(location, from_snapshot_id=parent,
                                     to_snapshot_id=snapshot).read_all()
    fmt = MessageFormat(message_format)
    registry = None if registry_url is None else RegistryConfig(registry_url, {})
    avro = None if fmt != MessageFormat.AVRO or registry is None else AvroMessages(
        registry, f"{label}-built")
    options = EventOptions(location, ("id",), message_format=fmt, avro=avro)
    label = f"{label}-{message_format}"
    built = kafka_events(batch, options)
    print(f"  {label}: {batch.num_rows:,} change rows -> {len(built):,} messages", flush=True)
    sink_s, build_s, floor_s = [], [], []
    for round_ in range(repeats + 1):  # the first round warms up
        started = time.perf_counter()
        kafka_events(batch, options)
        build = time.perf_counter() - started
        topic = _topic(broker, f"{label}-sink-{round_}")
        sink = KafkaSink(KafkaSinkOptions(Connection(broker.bootstrap, topic, {}, 120.0),
                                          location, f"bench-{topic}", key=("id",),
                                          message_format=fmt, schema_registry=registry))
        sink.apply(0, batch.slice(0, 0))  # opens: topics, producer, marker read
        started = time.perf_counter()
        result = sink.apply(1, batch)
        seconds = time.perf_counter() - started
        sink.close()
        assert not result.skipped
        floor_topic = _topic(broker, f"{label}-floor-{round_}")
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        started = time.perf_counter()
        for event in built:
            while True:
                try:
                    producer.produce(floor_topic, key=event.key, value=event.value,
                                     headers=list(event.headers))
                    break
                except BufferError:
                    producer.poll(0.1)
        left = producer.flush(120)
        floor = time.perf_counter() - started
        assert left == 0
        if round_:
            sink_s.append(seconds)
            build_s.append(build)
            floor_s.append(floor)
        print(f"    round {round_}{' (warm-up)' if not round_ else ''}: meltwater "
              f"{seconds:.2f} s (events built in {build:.2f} s), plain producer {floor:.2f} s",
              flush=True)
    events = len(built)
    median = {"meltwater": statistics.median(sink_s), "build": statistics.median(build_s),
              "floor": statistics.median(floor_s)}
    sizes = [len(e.key) + len(e.value or b"") for e in built]
    return {"commit": label, "format": message_format, "change_rows": batch.num_rows,
            "messages": events, "mean_message_bytes": statistics.mean(sizes),
            "seconds": {"meltwater": sink_s, "build": build_s, "floor": floor_s},
            "median_seconds": median,
            "events_per_second": {"meltwater": events / median["meltwater"],
                                  "floor": events / median["floor"],
                                  "meltwater_without_building": events / max(
                                      1e-9, median["meltwater"] - median["build"])},
            "ratio_to_floor": median["meltwater"] / median["floor"]}


class MarkerClock:
    """A read_committed consumer of the batches topic noting when each snapshot's marker
    arrives (time.time())."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.bootstrap = bootstrap
        self.key = transactional_id.encode()
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-clock",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "topic.metadata.refresh.interval.ms": 500})
        consumer.assign([TopicPartition("meltwater.batches", 0, 0)])
        while not self.stop.is_set():
            message = consumer.poll(0.005)
            if message is None or message.error() is not None or message.key() != self.key:
                continue
            snapshot = json.loads(message.value())["snapshot_id"]
            self.seen.setdefault(snapshot, time.time())
        consumer.close()

    def wait(self, snapshot: int, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while snapshot not in self.seen:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no marker for snapshot {snapshot} within {timeout:.0f} s")
            time.sleep(0.005)
        return self.seen[snapshot]


def latency(broker: KafkaBroker, commits: int, seed: int, work: Path) -> dict[str, Any]:
    from live.client import LiveWriter
    from meltwater.sinks.mirror_stream import ledger_name

    rng = random.Random(seed)
    with LiveWriter(work / "warehouse", work / "truth", seed=seed) as writer:
        first = writer.commit("append", truth=False)
        pipeline = Pipeline("orders", str(writer.location), work / "checkpoint",
                            {"type": "kafka", "bootstrap-servers": broker.bootstrap,
                             "topic": "lake.orders"})
        port = free_port()
        config = write_config(work / "service.toml", [pipeline], port=port)
        clock = MarkerClock(broker.bootstrap,
                            f"meltwater-{ledger_name(pipeline.name, str(pipeline.checkpoint))}")
        service = ServiceProcess(config, port, work / "service.log")
        try:
            started = time.monotonic()
            service.wait_running(timeout=240)
            clock.wait(first.snapshot_id, timeout=240)
            startup = time.monotonic() - started
            print(f"  service running and caught up in {startup:.1f} s; {commits} commits ...",
                  flush=True)
            latencies, kinds = [], []
            for _ in range(commits):
                time.sleep(rng.uniform(0.2, 1.2))
                commit = writer.commit(truth=False)
                latencies.append(clock.wait(commit.snapshot_id) - commit.committed_at)
                kinds.append(commit.kind)
            exit_code = service.stop()
        finally:
            clock.stop.set()
            if service.process.poll() is None:
                service.kill()
    ordered = sorted(latencies)
    return {"commits": commits, "kinds": kinds, "latency_seconds": latencies,
            "service_start_seconds": startup,
            "median": statistics.median(latencies),
            "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
            "min": ordered[0], "max": ordered[-1], "service_exit": exit_code}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    table = ensure_ladder_table(Shape("big", args.rows))
    snapshots = table.record["snapshots"]
    result: dict[str, Any] = {"rows": args.rows, "repeats": args.repeats,
                              "python": platform.python_version()}
    from schema_registry import SchemaRegistry

    with KafkaBroker() as broker, SchemaRegistry() as registry:
        print(f"throughput into Tansu at {broker.bootstrap} ({PARTITIONS} partitions)")
        result["throughput"] = [
            time_commit(broker, table.location, snapshots[index]["snapshot_id"],
                        snapshots[index + 1]["snapshot_id"], label, args.repeats,
                        message_format, registry.url)
            for message_format in args.formats.split(",")
            for index, label in ((0, "delete"), (1, "update"))]
    if args.commits:
        with KafkaBroker() as broker, tempfile.TemporaryDirectory(
                prefix="meltwater-bench-kafka-") as work:
            print("commit -> topic latency in the service")
            result["latency"] = latency(broker, args.commits, args.seed, Path(work))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print()
    for entry in result["throughput"]:
        rate = entry["events_per_second"]
        print(f"{entry['commit']:>6} commit: {entry['messages']:,} messages; meltwater "
              f"{rate['meltwater']:,.0f}/s ({entry['median_seconds']['meltwater']:.2f} s, "
              f"of which building the events {entry['median_seconds']['build']:.2f} s), "
              f"plain producer {rate['floor']:,.0f}/s: {entry['ratio_to_floor']:.2f}x "
              "the floor's time")
    if "latency" in result:
        lat = result["latency"]
        print(f"commit -> topic latency ({lat['commits']} commits): median "
              f"{lat['median']:.2f} s, p95 {lat['p95']:.2f} s, min {lat['min']:.2f} s, "
              f"max {lat['max']:.2f} s")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
