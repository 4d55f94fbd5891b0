"""The service configuration: every problem is one line naming the key, before anything starts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from meltwater.service.config import ConfigError, load_config, parse_config, parse_duration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.toml"))


def minimal(**pipeline) -> dict:
    entry = {"name": "orders", "table": "/t", "checkpoint": "/tmp/chk",
             "sink": {"type": "sqlite", "url": "sqlite:////tmp/m.db"}}
    entry.update(pipeline)
    return {"pipelines": [entry]}


def test_minimal_config_has_service_defaults():
    config = parse_config(minimal())
    assert (config.http_host, config.http_port) == ("127.0.0.1", 9464)
    assert config.log_format == "text" and config.progress == "auto"
    pipeline = config.pipelines[0]
    assert pipeline.event_driven and pipeline.interval_s is None
    assert pipeline.sink.type == "sqlite" and pipeline.sink.options["table"] == "orders"


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10), ("500ms", 0.5), ("1min", 60),
                                           ("2 h", 7200), ("1.5s", 1.5), ("ten", None)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("document", "message"), [
    ({}, "pipelines: is required"),
    ({"pipelines": []}, "pipelines: needs at least one"),
    ({"servce": {}, **minimal()}, "servce: unknown key (did you mean 'service'?)"),
    ({"service": {"http": "9464"}, **minimal()}, "service.http: expected HOST:PORT"),
    ({"service": {"log": "xml"}, **minimal()}, "service.log: expected one of text, json"),
    ({"service": {"shutdown-timeout": "soon"}, **minimal()},
     "service.shutdown-timeout: expected a duration"),
    (minimal(trigger="often"), "pipelines[0].trigger: expected \"event\""),
    (minimal(name="a b"), "pipelines[0].name: 'a b': use letters"),
    (minimal(table=3), "pipelines[0].table: expected a string, got int 3"),
    (minimal(sink={"type": "kinesis"}), "pipelines[0].sink.type: unknown sink 'kinesis'"),
    (minimal(sink={"type": "kafka"}), "pipelines[0].sink.bootstrap-servers: is required"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092"},
             options={"identifier-columns": "id"}),
     "pipelines[0].options.identifier-columns: a kafka sink pairs updates by its message "
     "key and says what before carries: set key or before-images in the sink instead; "
     "remove the option"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092"},
             options={"before-images": "key"}),
     "pipelines[0].options.before-images: a kafka sink pairs updates by its message key "
     "and says what before carries: set key or before-images in the sink instead"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092", "before-images": "keys"}),
     "pipelines[0].sink.before-images: expected one of 'full', 'key', got 'keys'"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092"},
             options={"schema-change": "project"}),
     "pipelines[0].options.schema-change: a kafka sink's stream runs with schema-change=fail"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092",
                   "properties": {"sasl": {"jaas": ["x"]}}}),
     "pipelines[0].sink.properties.sasl.jaas: expected a string, number or boolean"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092", "timeout": 0}),
     "pipelines[0].sink.timeout: expected at least 1, got 0"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092", "format": "avro2"}),
     "pipelines[0].sink.format: expected one of 'json', 'json-with-schema', 'avro', got "
     "'avro2'"),
    ({"pipelines": [{"name": "sales", "tables": "/tmp/wh/db/*", "checkpoint": "/tmp/c",
                     "sink": {"type": "sqlite", "url": "sqlite:////tmp/m.db",
                              "table": "orders"}}]},
     "pipelines[0].sink.table: a pipeline over many tables writes one table each: put "
     "{table} in it"),
    ({"pipelines": [{"name": "sales", "tables": "nocatalog.db.*", "checkpoint": "/tmp/c",
                     "sink": {"type": "console"}}]},
     "pipelines[0].tables: 'nocatalog.db.*': expected catalog.namespace.pattern"),
    ({"pipelines": [{"name": "sales", "tables": "/tmp/wh/*", "table": "/tmp/wh/a",
                     "checkpoint": "/tmp/c", "sink": {"type": "console"}}]},
     "pipelines[0].table: give table (one table) or tables (a pattern), not both"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092", "heartbeat-interval": -1}),
     "pipelines[0].sink.heartbeat-interval: expected at least 0, got -1"),
    (minimal(sink={"type": "kafka", "bootstrap-servers": "b:9092",
                   "transaction-metadata": "yes"}),
     "pipelines[0].sink.transaction-metadata: expected"),
    (minimal(options={"before-images": "full"}),
     "pipelines[0].options.before-images: a sqlite sink applies rows by its key: set key "
     "in the sink instead; remove the option"),
    (minimal(options={"identifier-columns": "id"}),
     "pipelines[0].options.identifier-columns: a sqlite sink applies rows by its key"),
    (minimal(sink={"type": "sqlite"}), "pipelines[0].sink.url: is required"),
    (minimal(sink={"type": "sqlite", "url": "/tmp/x.db"}),
     "pipelines[0].sink.url: a sqlite sink needs a URL starting with sqlite:///"),
    (minimal(sink={"type": "postgres", "url": "postgresql://h/db", "key": "id"}),
     "pipelines[0].sink.key: expected a list"),
    (minimal(sink={"type": "parquet", "path": "/x", "partition": ["a"]}),
     "pipelines[0].sink.partition: unknown key (did you mean 'partition-by'?)"),
    (minimal(options={"starting": "sometime"}), "pipelines[0].options: option starting="),
    (minimal(options={"streaming-max-file-per-micro-batch": 1}),
     "pipelines[0].options.streaming-max-file-per-micro-batch: option "
     "streaming-max-file-per-micro-batch is not an option of the meltwater stream (did you "
     "mean 'streaming-max-files-per-micro-batch'?)"),
    (minimal(options={"Start-Snapshot-ID": 5, "strating": "earliest"}),
     "pipelines[0].options.strating: option strating is not an option of the meltwater "
     "stream (did you mean 'starting'?)"),
    (minimal(options={"end-snapshot-id": 5}),
     "pipelines[0].options.end-snapshot-id: option end-snapshot-id is an option of batch "
     "reads"),
    (minimal(options={"path": "/elsewhere"}), "pipelines[0].options.path: option path: the "
                                              "table is given where the stream is loaded"),
    (minimal(options={"schema-change": "project"}),
     "pipelines[0].options.schema-change: a sqlite sink's stream runs with "
     "schema-change=fail, so a column added mid-stream is restarted"),
    (minimal(sink={"type": "sqlite", "url": "sqlite:////tmp/m.db",
                   "keep-dropped-columns": "yes"}),
     "pipelines[0].sink.keep-dropped-columns: expected"),
    ({"pipelines": [minimal()["pipelines"][0], minimal()["pipelines"][0]]},
     "pipelines[1].name: 'orders' is used by an earlier pipeline"),
    ({"pipelines": [minimal()["pipelines"][0], minimal(name="b")["pipelines"][0]]},
     "pipelines[1].checkpoint: '/tmp/chk' is also pipeline 'orders''s"),
    ({"pipelines": [minimal()["pipelines"][0],
                    minimal(name="b", checkpoint="file:///tmp/./chk/")["pipelines"][0]]},
     "pipelines[1].checkpoint: 'file:///tmp/./chk/' is also pipeline 'orders''s: two "
     "queries cannot share a checkpoint"),
    (minimal(sink={"type": "console", "rows": -1}),
     "pipelines[0].sink.rows: expected at least 1, got -1"),
    (minimal(checkpoint=""), "pipelines[0].checkpoint: expected a directory, got \"\""),
    ({"service": {"spark-log": ""}, **minimal()},
     "service.spark-log: expected a file path or \"off\""),
    ({"pipelines": [minimal()["pipelines"][0], minimal(
        name="b", checkpoint="/tmp/chk-b",
        sink={"type": "sqlite", "url": "sqlite:////tmp/m.db", "table": "orders"})[
        "pipelines"][0]]},
     "pipelines[1].sink: writes what pipeline 'orders' writes (table 'orders' of "
     "sqlite:////tmp/m.db): two pipelines cannot share a destination"),
    ({"pipelines": [minimal(sink={"type": "parquet", "path": "/tmp/archive"})["pipelines"][0],
                    minimal(name="b", checkpoint="/tmp/chk-b", trigger="10s",
                            sink={"type": "json", "path": "/tmp/archive/"})["pipelines"][0]]},
     "pipelines[1].sink: writes what pipeline 'orders' writes (path '/tmp/archive/')"),
])
def test_bad_configs_name_the_key(document, message):
    with pytest.raises(ConfigError) as raised:
        parse_config(document, "svc.toml")
    text = str(raised.value)
    assert text.startswith("svc.toml: ") and message in text, text
    assert "\n" not in text


def test_a_checkpoint_and_spark_log_under_home_are_where_spark_writes_them():
    """Spark takes a path's "~" literally (a directory named ~ in the working directory),
    while the service's checks and its lock would look in the home directory: the
    configuration expands it, so all of them use one place."""
    config = parse_config({"service": {"spark-log": "~/logs/spark.log"},
                           **minimal(checkpoint="~/chk")})
    assert config.pipelines[0].checkpoint == str(Path.home() / "chk")
    assert config.spark_log == str(Path.home() / "logs" / "spark.log")


def test_stream_options_are_known_by_name():
    """Every option the source's parser reads is one the service's config accepts: the names
    in `meltwater.stream.spark.options` (found in its source, as the parser names them)."""
    import ast
    import inspect

    from meltwater.stream.spark import option_names, options

    tree = ast.parse(inspect.getsource(options))
    read = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(
                node.func, "attr", None)) in ("_int", "_bool", "_size", "_timestamp_ms",
                                              "_names", "get"):
            read |= {a.value for a in node.args[1:] + node.args[:1]
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    read = {name.lower() for name in read if name and name[0].isalpha()}
    known = {n.lower() for n in option_names.STREAM_OPTION_NAMES
             + option_names.BATCH_OPTION_NAMES + option_names.TABLE_OPTION_NAMES}
    assert len(read) > 30
    assert read - known == set(), "options read but not listed in option_names.py"
    option_names.check_stream_option_names(option_names.STREAM_OPTION_NAMES)
    option_names.check_stream_option_names(["catalog.uri", "io.s3.endpoint", "STARTING"])


def test_ipv6_status_address():
    config = parse_config({"service": {"http": "[::1]:9464"}, **minimal()})
    assert (config.http_host, config.http_port) == ("::1", 9464)


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[service\nhttp=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_configs_parse(example):
    config = load_config(example)
    assert config.pipelines
    for pipeline in config.pipelines:
        assert pipeline.sink.type in ("sqlite", "postgres", "parquet", "json", "console")


def test_cli_rejects_a_bad_config_before_starting_anything(tmp_path, corpus):
    """Exit 2, one line naming the key, and fast: no SparkSession was started."""
    table = corpus.scenarios["mor_partitioned"].location
    cases = {
        "sink": f'[[pipelines]]\nname="a"\ntable="{table}"\ncheckpoint="{tmp_path}/c"\n'
                f'[pipelines.sink]\ntype="sqlite"\nurl="sqlite:///{tmp_path}/x.db"\n'
                'key=["nope"]\n',
        "table": f'[[pipelines]]\nname="a"\ntable="{tmp_path}/none"\ncheckpoint="{tmp_path}/c"\n'
                 '[pipelines.sink]\ntype="console"\n',
    }
    expected = {"sink": "pipelines[0].sink.key: key column 'nope' is not a top-level column",
                "table": "pipelines[0].table: "}
    for case, text in cases.items():
        path = tmp_path / f"{case}.toml"
        path.write_text(text)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "meltwater.cli.main", "serve",
                                 "--config", str(path)], capture_output=True, text=True,
                                timeout=60)
        elapsed = time.monotonic() - started
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected[case] in lines[0], result.stderr
        assert "Traceback" not in result.stderr
        assert elapsed < 20, f"took {elapsed:.1f}s: did it start Spark?"


def test_a_registered_sink_kind_is_configured_by_its_own_keys():
    """The service knows sinks only through `meltwater.sinks.kinds`: a kind registered there
    is accepted with its keys, defaults and source options, and unknown keys are refused."""
    from meltwater.sinks.kinds import SinkKind, SinkOption, register_sink_kind

    register_sink_kind(SinkKind(
        "test-queue", {"topic": SinkOption(str, required=True), "batch": SinkOption(int)},
        writer=lambda _frame, _options, _placement: None,
        source_options={"compute-updates": "true"}, source_options_reason="for the test",
        defaults=lambda placement: {"batch": len(placement.pipeline)}))
    config = parse_config(minimal(sink={"type": "test-queue", "topic": "t"}))
    assert config.pipelines[0].sink.options == {"topic": "t", "batch": len("orders")}
    with pytest.raises(ConfigError, match=r"sink.topic: is required"):
        parse_config(minimal(sink={"type": "test-queue"}))
    with pytest.raises(ConfigError, match=r"sink.url: unknown key"):
        parse_config(minimal(sink={"type": "test-queue", "topic": "t", "url": "x"}))
    with pytest.raises(ConfigError, match=r"options.compute-updates: a test-queue sink's "
                                          r"stream runs with compute-updates=true"):
        parse_config(minimal(sink={"type": "test-queue", "topic": "t"},
                             options={"compute-updates": "false"}))


@pytest.mark.parametrize(("table", "topic"), [
    ("/warehouse/db/orders", "db.orders"), ("s3://bucket/warehouse/db/orders/", "db.orders"),
    ("/warehouse/db/orders/metadata/v3.metadata.json", "db.orders"), ("/orders", "orders"),
    ("/data/my table/ord ers", "my_table.ord_ers")])
def test_a_kafka_sinks_topic_is_the_tables_name_debezium_style(table, topic):
    """A location's last two directories (namespace.table of a Hadoop-catalog warehouse),
    a catalog table's identifier; the properties table flattened to librdkafka's names."""
    config = parse_config(minimal(table=table, sink={
        "type": "kafka", "bootstrap-servers": "b1:9092,b2:9092",
        "properties": {"security.protocol": "SASL_SSL", "sasl": {"mechanism": "PLAIN"},
                       "linger.ms": 20, "enable.idempotence": True}}))
    sink = config.pipelines[0].sink
    assert sink.options["topic"] == topic
    assert sink.options["properties"] == {"security.protocol": "SASL_SSL",
                                          "sasl.mechanism": "PLAIN", "linger.ms": 20,
                                          "enable.idempotence": True}


@pytest.mark.parametrize(("given", "derived"), [(None, "full"), ("full", "full"),
                                                ("key", "key")])
def test_a_kafka_sinks_before_images_are_its_streams(corpus, given, derived):
    """`before-images` in the sink becomes its stream's option as the query starts (full
    unless it says key), with the pairing by its key."""
    from meltwater.sinks.kinds import SinkPlacement, sink_kind

    location = str(corpus.scenarios["equality_deletes"].location)
    sink = {"type": "kafka", "bootstrap-servers": "b:9092"}
    if given is not None:
        sink["before-images"] = given
    config = parse_config(minimal(table=location, sink=sink))
    options = config.pipelines[0].sink.options
    placement = SinkPlacement("p", config.pipelines[0].table, "/tmp/ckpt")
    assert sink_kind("kafka").derived_source_options(options, placement) == {
        "identifier-columns": "id", "compute-updates": "true", "before-images": derived}


def test_a_catalog_tables_topic_is_its_identifier():
    config = parse_config({"catalogs": {"lake": {"uri": "http://127.0.0.1:1"}},
                           **minimal(table="lake.sales.orders",
                                     sink={"type": "kafka", "bootstrap-servers": "b:9092"})})
    assert config.pipelines[0].sink.options["topic"] == "lake.sales.orders"
