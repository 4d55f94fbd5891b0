"""`meltwater serve --config FILE`: the TOML file, validated before anything starts.

A service runs pipelines; each reads one table's change stream and writes one sink::

    [service]
    http = "127.0.0.1:9464"        # /health and /metrics; "off" disables, port 0 picks one
    log = "text"                   # or "json": one JSON object per log line
    progress = "auto"              # a live line per table: auto (on a terminal), lines, off
    shutdown-timeout = "30s"       # SIGTERM/SIGINT: how long a running batch may finish
    spark-log = "/var/log/meltwater/spark.log"  # what Spark's JVM prints (default: spark.log
                                   # in the first pipeline's checkpoint directory; "off")

    [spark]
    master = "local[2]"            # leave out under spark-submit
    [spark.conf]
    "spark.sql.shuffle.partitions" = "2"

    [catalogs.lake]                # pyiceberg catalog properties (over ~/.pyiceberg.yaml)
    uri = "https://catalog.example.com/api/catalog"
    credential = "client-id:client-secret"
    warehouse = "lake"

    [[pipelines]]
    name = "orders"
    table = "lake.db.orders"       # catalog.namespace.table, or a location
                                   # ("/warehouse/db/orders", "s3://bucket/db/orders")
    checkpoint = "/var/lib/meltwater/checkpoints/orders"
    trigger = "event"              # event (default), an interval ("10s"), or "available-now"
    [pipelines.options]            # options of readStream.format("meltwater")
    starting = "earliest"
    [pipelines.sink]
    type = "sqlite"                # sqlite, postgres, parquet, json, console, kafka
    url = "sqlite:////var/lib/meltwater/mirror.db"
    table = "orders"
    key = ["id"]                   # default: the table's identifier fields
    keep-dropped-columns = false   # true: a column dropped in Iceberg stays (unwritten)

A pipeline over many tables gives `tables = "lake.sales.*"` (a catalog namespace and a glob
of names, or a glob of table directories) instead of `table`, `{table}` in its sink's
destination, and `discovery-interval` (default 10s): one pipeline per table it names, as
they come and go (`meltwater.service.discovery`).

Each sink type's keys come from its kind (`meltwater.sinks.kinds`). A mirror pipeline's stream
runs with `schema-change=fail` (the service restarts it with the new schema; see
`meltwater.sinks.mirror_stream`); a source option contradicting what the sink's kind needs
is refused.

Every problem is reported as one line naming the file, the key and what is wrong, before a
SparkSession or a sink is touched: a bad config must never half-start a service. The
tables are read by `toml_reader`; what they become is `config_model`'s (re-exported here).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.table.table_source import TableSource, parse_table_source
from meltwater.service.config_model import (
    SPARK_LOG_OFF,
    PipelineConfig,
    PipelineTemplate,
    ProgressMode,
    ServiceConfig,
    SinkConfig,
    Trigger,
    catalog_options,
    local_path,
)
from meltwater.service.errors import ConfigError
from meltwater.service.logs import LogFormat
from meltwater.service.toml_reader import (
    TableReader,
    choice,
    dotted,
    duration,
    parse_duration,
    scalar_text,
)
from meltwater.sinks.base import redact_url
from meltwater.sinks.errors import SinkError
from meltwater.sinks.kinds import SinkPlacement, sink_kind

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# what a configuration is, and its error, for the callers of load_config and parse_config
__all__ = ["ConfigError", "PipelineConfig", "ProgressMode", "ServiceConfig", "SinkConfig",
           "Trigger", "load_config", "parse_config", "parse_duration"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def load_config(path: str | Path) -> ServiceConfig:
    """The service configuration in the TOML file at `path`, validated."""
    source = str(path)
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except OSError as error:
        raise ConfigError(f"{source}: cannot read ({error.strerror})") from error
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{source}: not valid TOML ({error})") from error
    return parse_config(document, source)


def parse_config(document: Mapping[str, Any], source: str = "<config>") -> ServiceConfig:
    """Validate a parsed TOML document (see the module docstring for its keys)."""
    top = TableReader(source, "", document)
    service = top.child("service")
    http = service.get("http", (str, bool), "127.0.0.1:9464")
    host, port = _http_address(service, http)
    log_format = choice(service, "log", LogFormat, LogFormat.TEXT)
    progress = choice(service, "progress", ProgressMode, ProgressMode.AUTO)
    shutdown = duration(service, "shutdown-timeout", "30s")
    spark_log = service.get("spark-log", str)
    if spark_log is not None and not spark_log.strip():
        service.fail("spark-log", f"expected a file path or \"{SPARK_LOG_OFF}\", got \"\"")
    if spark_log is not None and spark_log != SPARK_LOG_OFF:
        spark_log = str(Path(spark_log).expanduser())
    service.done()

    spark = top.child("spark")
    master = spark.get("master", str)
    conf = spark.child("conf").scalars()
    spark.done()

    catalogs = _catalogs(top.child("catalogs"))
    raw = top.get("pipelines", list, required=True)
    if not raw:
        top.fail("pipelines", "needs at least one [[pipelines]] table")
    pipelines = [_pipeline(source, index, entry, catalogs) for index, entry in enumerate(raw)
                 if not (isinstance(entry, Mapping) and "tables" in entry)]
    templates = [_template(source, index, entry, catalogs) for index, entry in enumerate(raw)
                 if isinstance(entry, Mapping) and "tables" in entry]
    top.done()
    _unique(source, pipelines)
    return ServiceConfig(tuple(pipelines), host, port, log_format, progress, shutdown,
                         master, spark_log, conf, source, catalogs, tuple(templates))


def _template(source: str, index: int, entry: Mapping[str, Any],
              catalogs: Mapping[str, Mapping[str, str]]) -> PipelineTemplate:
    """A pipeline over the tables a pattern names (`PipelineTemplate`), checked by parsing
    the pipeline of an example table of it as any other."""
    from meltwater.service.discovery import example_table, expand, table_pattern

    reader = TableReader(source, f"pipelines[{index}]", entry)
    name = reader.get("name", str, required=True)
    if not _NAME.match(name):
        reader.fail("name", f"{name!r}: use letters, digits, '.', '_' and '-' only")
    pattern = reader.get("tables", str, required=True)
    if "table" in entry:
        reader.fail("table", "give table (one table) or tables (a pattern), not both")
    try:
        table_pattern(pattern, catalogs)
    except MeltwaterError as error:
        reader.fail("tables", str(error))
    checkpoint = reader.get("checkpoint", str, required=True)
    interval = duration(reader, "discovery-interval", "10s")
    rest = {k: v for k, v in entry.items() if k not in ("tables", "discovery-interval")}
    template = PipelineTemplate(name, pattern, str(Path(checkpoint).expanduser())
                                if checkpoint.startswith("~") else checkpoint, rest, index,
                                interval)
    expand(template, example_table(pattern, catalogs), source, catalogs, _pipeline)
    return template


def _catalogs(reader: TableReader) -> dict[str, dict[str, str]]:
    """`[catalogs.NAME]` tables: each catalog's properties, as pyiceberg names them (nested
    TOML keys such as `s3.endpoint = ...` become dotted names)."""
    catalogs: dict[str, dict[str, str]] = {}
    for name in list(reader.table):
        if not _NAME.match(name):
            reader.fail(name, "use letters, digits, '.', '_' and '-' in catalog names")
        child = reader.child(name)
        catalogs[name] = {key: scalar_text(value)
                          for key, value in dotted(child, child.table).items()}
    reader.done()
    return catalogs


def _http_address(reader: TableReader, value: str | bool) -> tuple[str | None, int]:
    if value is False or (isinstance(value, str) and value.lower() in ("off", "false", "")):
        return None, 0
    if value is True:
        return "127.0.0.1", 9464
    host, _, port_text = str(value).rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # [::1]:9464
        host = host[1:-1]
    if not host or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        reader.fail("http", f"expected HOST:PORT (e.g. 127.0.0.1:9464) or \"off\", "
                            f"got {value!r}")
    return host, int(port_text)


def parse_pipeline(source: str, index: int, entry: Any,
                   catalogs: Mapping[str, Mapping[str, str]]) -> PipelineConfig:
    """One `[[pipelines]]` table, validated (also each table's of a `tables` pattern)."""
    return _pipeline(source, index, entry, catalogs)


def _pipeline(source: str, index: int, entry: Any,
              catalogs: Mapping[str, Mapping[str, str]]) -> PipelineConfig:
    reader = TableReader(source, f"pipelines[{index}]", entry)
    name = reader.get("name", str, required=True)
    if not _NAME.match(name):
        reader.fail("name", f"{name!r}: use letters, digits, '.', '_' and '-' only")
    table = reader.get("table", str, required=True)
    try:
        table_source = parse_table_source(table, catalog_properties=catalogs)
    except MeltwaterError as error:
        reader.fail("table", str(error))
    checkpoint = reader.get("checkpoint", str, required=True)
    if not checkpoint.strip():
        reader.fail("checkpoint", "expected a directory, got \"\" (which would be the "
                                  "working directory)")
    if checkpoint.startswith("~"):  # Spark's Hadoop paths take "~" literally: ./~/...
        checkpoint = str(Path(checkpoint).expanduser())
    trigger_text = reader.get("trigger", str, Trigger.EVENT)
    trigger = Trigger.named(trigger_text)
    interval = None
    if trigger not in (Trigger.EVENT, Trigger.AVAILABLE_NOW):
        interval = parse_duration(trigger_text)
        if interval is None:
            reader.fail("trigger", f"expected \"{Trigger.EVENT}\", \"{Trigger.AVAILABLE_NOW}\" or "
                                   f"an interval such as 10s, got {trigger_text!r}")
        trigger = Trigger.INTERVAL
    options_reader = reader.child("options")
    options = options_reader.scalars()
    _check_source_options(options_reader, table, {**options, **catalog_options(table_source)})
    sink = _sink(reader.child("sink"), name, table_source, checkpoint)
    _check_sink_source_options(options_reader, sink, options)
    reader.done()
    return PipelineConfig(name, table, checkpoint, sink, trigger, interval, options,
                          table_source)


def _check_source_options(reader: TableReader, table: str, options: dict[str, str]) -> None:
    """The source's own option parser, run now so a bad option stops the service early;
    and every name one of the stream's options (the source itself reads past names it does
    not know, so a misspelled option would silently be its default)."""
    from meltwater.stream.spark.option_names import check_stream_option_names
    from meltwater.stream.spark.options import stream_read

    for key in reader.table:
        try:
            check_stream_option_names([key])
        except MeltwaterError as error:
            reader.fail(key, str(error))
    try:
        stream_read({**options, "path": table})
    except MeltwaterError as error:
        reader.fail("", str(error))


def _sink(reader: TableReader, pipeline: str, table: TableSource, checkpoint: str) -> SinkConfig:
    name = reader.get("type", str, required=True)
    try:
        kind = sink_kind(name)
    except SinkError as error:
        reader.fail("type", str(error))
    placement = SinkPlacement(pipeline, table, checkpoint)
    options: dict[str, Any] = dict(kind.defaults(placement)) if kind.defaults else {}
    for key, option in kind.options.items():
        value = reader.get(key, option.kind, required=option.required)
        if value is None:
            continue
        if option.kind is dict:  # a table of scalars, dotted names flattened
            child = reader.child(key)
            value = dotted(child, child.table)
        if option.names and not all(isinstance(v, str) and v for v in value):
            reader.fail(key, "expected a list of column names")
        if option.minimum is not None and value < option.minimum:
            reader.fail(key, f"expected at least {option.minimum}, got {value}")
        if option.choices is not None and value not in option.choices:
            reader.fail(key, f"expected one of {', '.join(map(repr, option.choices))}, "
                             f"got {value!r}")
        options[key] = value
    url = options.get("url")
    if kind.url_prefixes and url is not None and not url.startswith(kind.url_prefixes):
        reader.fail("url", f"a {kind.name} sink needs a URL starting with "
                           f"{' or '.join(kind.url_prefixes)}, got {redact_url(url)!r}")
    reader.done()
    return SinkConfig(kind.name, options)


def _check_sink_source_options(reader: TableReader, sink: SinkConfig,
                               options: Mapping[str, str]) -> None:
    """A source option the sink's kind fixes must not say otherwise (a mirror's stream runs
    with schema-change=fail, so a column added mid-stream is restarted into the mirror
    instead of projected away), nor one it derives from its own options (a kafka sink's
    key)."""
    given = {k.lower(): v for k, v in options.items()}
    kind = sink_kind(sink.type)
    for key, needed in kind.source_options.items():
        if given.get(key, needed) != needed:
            reader.fail(key, f"a {sink.type} sink's stream runs with {key}={needed}, "
                             f"{kind.source_options_reason}; remove the option")
    for key in kind.derived_option_names:
        if key in given:
            reader.fail(key, f"a {sink.type} sink {kind.derived_options_reason}; remove "
                             "the option")


def _unique(source: str, pipelines: list[PipelineConfig]) -> None:
    """No two pipelines share a name, a checkpoint (a path and its file: URI are one), or
    a destination (a mirror table of one database, an archive directory): two queries on
    one would each think they alone write it."""
    names: set[str] = set()
    checkpoints: dict[str, str] = {}
    destinations: dict[tuple[str, ...], str] = {}
    for index, pipeline in enumerate(pipelines):
        if pipeline.name in names:
            raise ConfigError(f"{source}: pipelines[{index}].name: {pipeline.name!r} is used "
                              "by an earlier pipeline")
        names.add(pipeline.name)
        resolved = _place(pipeline.checkpoint)
        if resolved in checkpoints:
            raise ConfigError(f"{source}: pipelines[{index}].checkpoint: {pipeline.checkpoint!r}"
                              f" is also pipeline {checkpoints[resolved]!r}'s: two queries "
                              "cannot share a checkpoint")
        checkpoints[resolved] = pipeline.name
        destination = _destination(pipeline.sink)
        if destination is not None and destination in destinations:
            raise ConfigError(f"{source}: pipelines[{index}].sink: writes what pipeline "
                              f"{destinations[destination]!r} writes ({_described(pipeline.sink)})"
                              ": two pipelines cannot share a destination")
        if destination is not None:
            destinations[destination] = pipeline.name


def _place(location: str) -> str:
    """A directory's location, the same for every way of writing it."""
    local = local_path(location)
    return location.rstrip("/") if local is None else str(local.resolve())


def _destination(sink: SinkConfig) -> tuple[str, ...] | None:
    """What a sink writes, comparable between pipelines: a mirror's database and table, an
    archive's directory; None for a sink that writes nothing shared (the console)."""
    options = sink.options
    if "path" in options:
        return ("path", _place(str(options["path"])))
    if "url" in options:
        return ("table", str(options["url"]), str(options.get("table")))
    return None


def _described(sink: SinkConfig) -> str:
    options = sink.options
    if "path" in options:
        return f"path {options['path']!r}"
    return f"table {options.get('table')!r} of {redact_url(str(options['url']))}"
