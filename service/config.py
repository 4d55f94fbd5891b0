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

Each sink type's keys come from its kind (`meltwater.sinks.kinds`). A mirror pipeline's stream
runs with `schema-change=fail` (the service restarts it with the new schema; see
`meltwater.sinks.mirror_stream`); a source option contradicting what the sink's kind needs
is refused.

Every problem is reported as one line naming the file, the key and what is wrong, before a
SparkSession or a sink is touched: a bad config must never half-start a service.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import unquote, urlsplit

from meltwater.planner.errors import MeltwaterError
from meltwater.planner.str_enum import StrEnum
from meltwater.planner.table.table_source import TableSource, parse_table_source
from meltwater.service.logs import LogFormat
from meltwater.sinks.base import redact_url
from meltwater.sinks.errors import SinkError
from meltwater.sinks.kinds import SinkPlacement, sink_kind

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SPARK_LOG_OFF = "off"


class ProgressMode(StrEnum):
    """The progress lines on stdout (`[service] progress`)."""

    AUTO = "auto"  # a live line per pipeline on a terminal, else LINES
    LINES = "lines"  # a line per pipeline whenever it changes
    OFF = "off"


class Trigger(StrEnum):
    """When a pipeline's micro-batches start (`trigger`)."""

    EVENT = "event"  # when the table commits
    AVAILABLE_NOW = "available-now"  # once, over what is there, then the pipeline ends
    INTERVAL = "interval"  # every `interval_s` seconds (the configuration gives a duration)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|m|min|minutes?|h|hours?)\s*$")
_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
          "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600}
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class ConfigError(MeltwaterError):
    """The service configuration is invalid; the message names the file and the key."""


class CheckpointInUseError(MeltwaterError):
    """Another process holds a checkpoint's lock: another service runs that pipeline
    (`meltwater.service.checkpoints`)."""


def local_path(location: str) -> Path | None:
    """A checkpoint location on this machine's file system (a path or a file: URI); None
    for a remote one (s3://, hdfs://, ...)."""
    if location.startswith("file:"):
        return Path(unquote(urlsplit(location).path)).expanduser()
    if "://" in location:
        return None
    return Path(location).expanduser()


@dataclass(frozen=True)
class SinkConfig:
    """A pipeline's sink: its kind, and that kind's options as the configuration gives them."""

    type: str  # a registered sink kind's name (aliases resolved)
    options: dict[str, Any]


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline: the table it streams, where it checkpoints, its sink and trigger."""

    name: str
    table: str  # as the config names it
    checkpoint: str
    sink: SinkConfig
    trigger: Trigger = Trigger.EVENT
    interval_s: float | None = None  # for Trigger.INTERVAL
    options: dict[str, str] = field(default_factory=dict)
    source: TableSource | None = None  # the table, resolved with the config's [catalogs]

    @property
    def event_driven(self) -> bool:
        """Whether micro-batches start when the table commits, not on an interval."""
        return self.trigger == Trigger.EVENT

    @property
    def table_source(self) -> TableSource:
        """The pipeline's table, with its catalog's properties from this configuration."""
        return self.source or parse_table_source(self.table)

    @property
    def sink_placement(self) -> SinkPlacement:
        """The names a sink may need to place its state (pipeline, table, checkpoint), and
        the options of its stream."""
        return SinkPlacement(self.name, self.table_source, self.checkpoint, self.options)

    @property
    def source_options(self) -> dict[str, str]:
        """The options of the pipeline's `readStream.format("meltwater")`: its own, and its
        catalog's properties as `catalog.*` options (the source runs in Spark's Python
        workers, which do not see this configuration file). Unless the pipeline bounds its
        micro-batches itself, they read at most `DEFAULT_MAX_ROWS` rows
        (`streaming-max-rows-per-micro-batch`): sinks gather each micro-batch in the
        service's own process, so this bounds its memory (a table's first snapshot, read
        as INSERTs, is then several micro-batches)."""
        options = {**self.options, **catalog_options(self.table_source)}
        if not any(k.lower() in _BUDGET_OPTIONS for k in options):
            options[_DEFAULT_BUDGET] = str(DEFAULT_MAX_ROWS)
        return options


DEFAULT_MAX_ROWS = 500_000
_DEFAULT_BUDGET = "streaming-max-rows-per-micro-batch"
_BUDGET_OPTIONS = {"streaming-max-files-per-micro-batch", "maxfilespertrigger",
                   "streaming-max-rows-per-micro-batch", "streaming-max-bytes-per-micro-batch",
                   "maxbytespertrigger"}


def catalog_options(source: TableSource) -> dict[str, str]:
    """A table source's catalog properties as the Spark source's `catalog.*` options."""
    return {f"catalog.{k}": v for k, v in source.catalog_properties.items()}


@dataclass(frozen=True)
class ServiceConfig:
    """A `meltwater serve` configuration: its pipelines, status server, logging and Spark."""

    pipelines: tuple[PipelineConfig, ...]
    http_host: str | None = "127.0.0.1"
    http_port: int = 9464
    log_format: LogFormat = LogFormat.TEXT
    progress: ProgressMode = ProgressMode.AUTO
    shutdown_timeout_s: float = 30.0
    spark_master: str | None = None
    spark_log: str | None = None  # a path, "off", or None: beside the first checkpoint
    spark_conf: dict[str, str] = field(default_factory=dict)
    source: str = "<config>"
    catalogs: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)


def parse_duration(text: str) -> float | None:
    """Seconds in `text` ("10s", "500ms", "1min"), or None if it is not a duration."""
    match = _DURATION.match(str(text))
    if not match:
        return None
    return float(match.group(1)) * _UNITS[match.group(2)]


class _Reader:
    """Reads one table of the TOML document, naming keys by their path in errors."""

    def __init__(self, source: str, path: str, table: Any) -> None:
        self.source = source
        self.path = path
        if not isinstance(table, Mapping):
            self.fail("", f"expected a table, got {type(table).__name__}")
        self.table = dict(table)
        self.used: set[str] = set()

    def fail(self, key: str, problem: str) -> NoReturn:
        where = ".".join(p for p in (self.path, key) if p) or "(top level)"
        raise ConfigError(f"{self.source}: {where}: {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None, *,
            required: bool = False) -> Any:
        self.used.add(key)
        if key not in self.table:
            if required:
                self.fail(key, "is required")
            return default
        value = self.table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            self.fail(key, f"expected {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            self.fail(key, f"expected {_kind_name(kind)}, got {type(value).__name__} "
                           f"{value!r}")
        return value

    def child(self, key: str) -> _Reader:
        self.used.add(key)
        return _Reader(self.source, f"{self.path}.{key}" if self.path else key,
                       self.table.get(key, {}))

    def done(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            self.fail(unknown[0], "unknown key" + _suggest(unknown[0], self.used))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _suggest(key: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"


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
    top = _Reader(source, "", document)
    service = top.child("service")
    http = service.get("http", (str, bool), "127.0.0.1:9464")
    host, port = _http_address(service, http)
    log_format = _choice(service, "log", LogFormat, LogFormat.TEXT)
    progress = _choice(service, "progress", ProgressMode, ProgressMode.AUTO)
    shutdown = _duration(service, "shutdown-timeout", "30s")
    spark_log = service.get("spark-log", str)
    if spark_log is not None and not spark_log.strip():
        service.fail("spark-log", f"expected a file path or \"{SPARK_LOG_OFF}\", got \"\"")
    if spark_log is not None and spark_log != SPARK_LOG_OFF:
        spark_log = str(Path(spark_log).expanduser())
    service.done()

    spark = top.child("spark")
    master = spark.get("master", str)
    conf_reader = spark.child("conf")
    conf = {}
    for key in list(conf_reader.table):
        value = conf_reader.get(key, (str, int, float, bool))
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    spark.done()

    catalogs = _catalogs(top.child("catalogs"))
    raw = top.get("pipelines", list, required=True)
    if not raw:
        top.fail("pipelines", "needs at least one [[pipelines]] table")
    pipelines = [_pipeline(source, index, entry, catalogs) for index, entry in enumerate(raw)]
    top.done()
    _unique(source, pipelines)
    return ServiceConfig(tuple(pipelines), host, port, log_format, progress, shutdown,
                         master, spark_log, conf, source, catalogs)


def _catalogs(reader: _Reader) -> dict[str, dict[str, str]]:
    """`[catalogs.NAME]` tables: each catalog's properties, as pyiceberg names them (nested
    TOML keys such as `s3.endpoint = ...` become dotted names)."""
    catalogs: dict[str, dict[str, str]] = {}
    for name in list(reader.table):
        if not _NAME.match(name):
            reader.fail(name, "use letters, digits, '.', '_' and '-' in catalog names")
        child = reader.child(name)
        catalogs[name] = {key: str(value).lower() if isinstance(value, bool) else str(value)
                          for key, value in _dotted(child, child.table).items()}
    reader.done()
    return catalogs


def _dotted(reader: _Reader, table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(_dotted(reader, value, f"{prefix}{key}."))
        elif isinstance(value, (str, int, float, bool)):
            flat[f"{prefix}{key}"] = value
        else:
            reader.fail(f"{prefix}{key}", "expected a string, number or boolean")
    reader.used.update(table)
    return flat


def _http_address(reader: _Reader, value: str | bool) -> tuple[str | None, int]:
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


_Choice = TypeVar("_Choice", bound=StrEnum)


def _choice(reader: _Reader, key: str, kind: type[_Choice], default: _Choice) -> _Choice:
    """Key `key` as a member of `kind`; any other text is a ConfigError naming the choices."""
    text = reader.get(key, str, default)
    member = kind.named(text)
    if member is None:
        reader.fail(key, f"expected one of {', '.join(kind.texts())}, got {text!r}")
    return member


def _duration(reader: _Reader, key: str, default: str) -> float:
    text = reader.get(key, str, default)
    seconds = parse_duration(text)
    if seconds is None:
        reader.fail(key, f"expected a duration such as 500ms, 10s or 1min, got {text!r}")
    return float(seconds)


def _pipeline(source: str, index: int, entry: Any,
              catalogs: Mapping[str, Mapping[str, str]]) -> PipelineConfig:
    reader = _Reader(source, f"pipelines[{index}]", entry)
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
    options = {}
    for key in list(options_reader.table):
        value = options_reader.get(key, (str, int, float, bool))
        options[key] = str(value).lower() if isinstance(value, bool) else str(value)
    _check_source_options(options_reader, table, {**options, **catalog_options(table_source)})
    sink = _sink(reader.child("sink"), name, table_source, checkpoint)
    _check_sink_source_options(options_reader, sink, options)
    reader.done()
    return PipelineConfig(name, table, checkpoint, sink, trigger, interval, options,
                          table_source)


def _check_source_options(reader: _Reader, table: str, options: dict[str, str]) -> None:
    """The source's own option parser, run now so a bad option stops the service early;
    and every name one of the stream's options (the source itself reads past names it does
    not know, so a misspelled option would silently be its default)."""
    from meltwater.stream.spark.options import check_stream_option_names, stream_read

    for key in reader.table:
        try:
            check_stream_option_names([key])
        except MeltwaterError as error:
            reader.fail(key, str(error))
    try:
        stream_read({**options, "path": table})
    except MeltwaterError as error:
        reader.fail("", str(error))


def _sink(reader: _Reader, pipeline: str, table: TableSource, checkpoint: str) -> SinkConfig:
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
            value = _dotted(child, child.table)
        if option.names and not all(isinstance(v, str) and v for v in value):
            reader.fail(key, "expected a list of column names")
        if option.minimum is not None and value < option.minimum:
            reader.fail(key, f"expected at least {option.minimum}, got {value}")
        options[key] = value
    url = options.get("url")
    if kind.url_prefixes and url is not None and not url.startswith(kind.url_prefixes):
        reader.fail("url", f"a {kind.name} sink needs a URL starting with "
                           f"{' or '.join(kind.url_prefixes)}, got {redact_url(url)!r}")
    reader.done()
    return SinkConfig(kind.name, options)


def _check_sink_source_options(reader: _Reader, sink: SinkConfig,
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
