"""Pipelines over many tables (`tables = "lake.sales.*"` or `"/warehouse/sales/*"`): which
tables a pattern names now, and each one's pipeline.

A pattern is a catalog namespace and a glob of table names (`catalog.namespace.glob`,
asked of the catalog with `list_tables`), or a glob of table directories on this machine
(each holding `metadata/`: a Hadoop-catalog warehouse). Each table found gets the
pipeline the template's keys make for it: its name `<template>.<table>`, its checkpoint
`<checkpoint>/<table>`, and `{table}` in its sink's text options (a mirror's `table`, a
topic, an archive's `path`) made the table's name; those options must say `{table}` when
given, or every table would write one destination. `meltwater.service.runner` asks every
`discovery-interval` (10 s by default), starts a pipeline for a table that appeared
without a restart, and stops the one of a table that is gone, with one log line and the
`meltwater_tables_dropped` metric, the others going on.
"""

from __future__ import annotations

import copy
import fnmatch
import glob
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from meltwater.planner.errors import CatalogError
from meltwater.planner.table.catalogs import known_catalogs, list_catalog_tables
from meltwater.service.config_model import PipelineConfig, PipelineTemplate, local_path

PLACEHOLDER = "{table}"
# sink options that name a destination: one per table, so `{table}` must be in them
DESTINATION_OPTIONS = ("table", "topic", "path")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

Parse = Callable[[str, int, Any, Mapping[str, Mapping[str, str]]], PipelineConfig]


@dataclass(frozen=True)
class TablePattern:
    """A `tables` pattern, parsed: a glob of local directories, or a catalog's namespace
    and a glob of its table names."""

    text: str
    directory_glob: str | None = None
    catalog: str | None = None
    namespace: tuple[str, ...] = ()
    name_glob: str = "*"


def table_pattern(text: str, catalogs: Mapping[str, Mapping[str, str]]) -> TablePattern:
    """Parse a pattern; CatalogError (one line) when it names neither."""
    if "/" in text or text.startswith("file:"):
        local = local_path(text)
        if local is None:
            raise CatalogError(f"{text!r}: a pattern of table locations must be on this "
                               "machine's file system; name a catalog namespace instead "
                               "(catalog.namespace.*)")
        return TablePattern(text, directory_glob=str(local))
    parts = text.split(".")
    if len(parts) < 3 or parts[0] not in known_catalogs(catalogs):
        raise CatalogError(f"{text!r}: expected catalog.namespace.pattern with a configured "
                           "catalog, or a glob of table directories (/warehouse/db/*)")
    return TablePattern(text, catalog=parts[0], namespace=tuple(parts[1:-1]),
                        name_glob=parts[-1])


def matching_tables(pattern: TablePattern, catalogs: Mapping[str, Mapping[str, str]]
                    ) -> list[str]:
    """The tables the pattern names now, as `table = ...` would name each, sorted."""
    if pattern.directory_glob is not None:
        return sorted(path for path in glob.glob(pattern.directory_glob)
                      if os.path.isdir(os.path.join(path, "metadata")))
    assert pattern.catalog is not None
    found = list_catalog_tables(pattern.catalog, pattern.namespace,
                                catalogs.get(pattern.catalog, {}))
    return sorted(".".join((pattern.catalog, *identifier)) for identifier in found
                  if fnmatch.fnmatchcase(identifier[-1], pattern.name_glob))


def example_table(text: str, catalogs: Mapping[str, Mapping[str, str]]) -> str:
    """A table the pattern could name, to check the template's keys by before any is found."""
    pattern = table_pattern(text, catalogs)
    if pattern.directory_glob is not None:
        return os.path.join(os.path.dirname(pattern.directory_glob) or ".", "example")
    return ".".join((str(pattern.catalog), *pattern.namespace, "example"))


def short_name(table: str) -> str:
    """A table's own name, as pipelines, checkpoints and `{table}` use it."""
    last = table.rstrip("/").rsplit("/", 1)[-1] if "/" in table else table.rsplit(".", 1)[-1]
    return _UNSAFE.sub("_", last) or "table"


def expand(template: PipelineTemplate, table: str, source: str,
           catalogs: Mapping[str, Mapping[str, str]], parse: Parse) -> PipelineConfig:
    """The pipeline of one table the template's pattern names, parsed as a `[[pipelines]]`
    table (ConfigError naming the key, as for any pipeline)."""
    from meltwater.service.errors import ConfigError

    name = short_name(table)
    entry = copy.deepcopy(template.entry)
    sink = entry.get("sink")
    if isinstance(sink, dict):
        for key in DESTINATION_OPTIONS:
            value = sink.get(key)
            if isinstance(value, str) and PLACEHOLDER not in value:
                raise ConfigError(f"{source}: pipelines[{template.index}].sink.{key}: a "
                                  f"pipeline over many tables writes one {key} each: put "
                                  f"{PLACEHOLDER} in it (e.g. \"{PLACEHOLDER}\")")
        entry["sink"] = {k: v.replace(PLACEHOLDER, name) if isinstance(v, str) else v
                         for k, v in sink.items()}
    entry.update(table=table, name=f"{template.name}.{name}",
                 checkpoint=f"{template.checkpoint.rstrip('/')}/{name}")
    return parse(source, template.index, entry, catalogs)
