"""What a validated `meltwater serve` configuration holds (`meltwater.service.config` reads
the TOML file into it): the service's settings, its pipelines, each pipeline's sink.

Choices are enums of their own text (`ProgressMode`, `Trigger`; the log format is
`meltwater.service.logs.LogFormat`), so code selects on members.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from meltwater.planner.str_enum import StrEnum
from meltwater.planner.table.table_source import TableSource, parse_table_source
from meltwater.service.logs import LogFormat
from meltwater.sinks.kinds import SinkPlacement

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
    def branch(self) -> str | None:
        """The branch the pipeline follows (option `branch`; None: main)."""
        return next((v for k, v in self.options.items() if k.lower() == "branch"), None) or None

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
class PipelineTemplate:
    """A pipeline over many tables (`tables = "lake.sales.*"`): one pipeline per table the
    pattern matches, found as they come and go (`meltwater.service.discovery`). `entry` is
    the configuration's table for it, less `tables`: what each table's pipeline is parsed
    from, with the table, its name, checkpoint and `{table}` in sink options filled in."""

    name: str
    pattern: str
    checkpoint: str
    entry: dict[str, Any]
    index: int  # its place in [[pipelines]], for messages
    discovery_interval_s: float = 10.0


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
    templates: tuple[PipelineTemplate, ...] = ()
