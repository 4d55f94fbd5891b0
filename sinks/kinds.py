"""The kinds of sink a pipeline can write to, by the name its configuration gives.

Each kind says what its configuration holds (`options`), what the change stream feeding
it must be run with (`source_options`: a mirror needs `schema-change=fail`; and
`derived_source_options`, decided from the sink's own options as its query starts: a
kafka sink pairs updates by its key), what can be
checked before anything starts (`check`: a mirror opens its database once) and how a
streaming query writes to it (`writer`). The service reads all of that from here, so a new
sink is one `register_sink_kind` call, not an edit of the service's config parser, its
preflight and its query builder.

The kinds meltwater ships register themselves where they are defined (`archive`:
parquet, json, console; `mirror_stream`: sqlite, postgres; `kafka_stream`: kafka), and
importing `meltwater.sinks` imports them all, as it registers the mirror's URL schemes.

The URL-scheme registry in `meltwater.sinks.base` (`open_sink`) is the other half: it opens a
`Sink` (applies batches exactly once by id) from a URL; the mirror kinds use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from meltwater.planner.table.table_source import TableSource
from meltwater.sinks.errors import SinkError


@dataclass(frozen=True)
class SinkOption:
    """One key of a sink's configuration: its TOML type, and whether it must be given.

    `names` marks a list of column names (each a non-empty string); `minimum` is the least
    a number may be; `choices`, the values a string may take. A `dict` option is a TOML
    table of scalars, its nested keys flattened to dotted names
    (`[pipelines.sink.properties]`)."""

    kind: type | tuple[type, ...]
    required: bool = False
    names: bool = False
    minimum: int | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SinkPlacement:
    """Where a sink sits: the pipeline writing to it, its source table and checkpoint, and
    the options its stream is read with (`[pipelines.options]`)."""

    pipeline: str
    table: TableSource
    checkpoint: str
    stream_options: Mapping[str, str] = field(default_factory=dict)


# (frame, the sink's options, its placement) -> a DataStreamWriter not yet started
WriterFactory = Callable[[Any, Mapping[str, Any], SinkPlacement], Any]
Check = Callable[[Mapping[str, Any], SinkPlacement], None]
# (the sink's options, its placement) -> stream options decided as its query starts
DerivedOptions = Callable[[Mapping[str, Any], SinkPlacement], Mapping[str, str]]


@dataclass(frozen=True)
class SinkKind:
    """A kind of sink as a pipeline configuration names it (`type = "sqlite"`)."""

    name: str
    options: Mapping[str, SinkOption]
    writer: WriterFactory
    aliases: tuple[str, ...] = ()
    url_prefixes: tuple[str, ...] = ()  # the `url` option must start with one of these
    source_options: Mapping[str, str] = field(default_factory=dict)
    source_options_reason: str = ""  # why, for the refusal of a config saying otherwise
    # Stream options that follow from the sink's own (a kafka sink pairs updates by its
    # key), resolved as the query starts; a pipeline setting one of `derived_option_names`
    # itself is refused, `derived_options_reason` saying why.
    derived_source_options: DerivedOptions | None = None
    derived_option_names: tuple[str, ...] = ()
    derived_options_reason: str = ""
    defaults: Callable[[SinkPlacement], dict[str, Any]] | None = None
    check: Check | None = None

    def stream_options(self, options: Mapping[str, Any], placement: SinkPlacement
                       ) -> dict[str, str]:
        """Every stream option this kind fixes for a pipeline: its static ones and those
        derived from the sink's options (which may load the table, and refuse)."""
        derived = (self.derived_source_options(options, placement)
                   if self.derived_source_options else {})
        return {**self.source_options, **derived}


_KINDS: dict[str, SinkKind] = {}
_ALIASES: dict[str, str] = {}


def register_sink_kind(kind: SinkKind) -> None:
    """Make `sink_kind(name)` (and each alias) return `kind`."""
    _KINDS[kind.name] = kind
    for alias in kind.aliases:
        _ALIASES[alias] = kind.name


def sink_kind_names() -> list[str]:
    """The registered kinds' names, sorted (aliases left out)."""
    return sorted(_KINDS)


def sink_kind(name: str) -> SinkKind:
    """The kind registered under `name` or one of its aliases."""
    kind = _KINDS.get(_ALIASES.get(name, name))
    if kind is None:
        raise SinkError(f"unknown sink {name!r}; expected one of "
                        f"{', '.join(sink_kind_names())}")
    return kind
