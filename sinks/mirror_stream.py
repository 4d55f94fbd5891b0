"""Database mirrors fed by a streaming query: the `sqlite` and `postgres` sink kinds.

A pipeline's mirror is a `Mirror` (`meltwater.sinks.mirror`) applied by an exactly-once
`foreachBatch` (`meltwater.sinks.spark_writer`).

The ledger's pipeline name is the pipeline's name plus a digest of its checkpoint location:
Spark's batch ids restart from 0 with a new checkpoint, so a pipeline pointed at a fresh
checkpoint must not find its new batches "already applied" under the old one's ids.

**Key images.** A mirror applies a batch by key: the rows that arrived are upserted, the
keys of the rows that left are deleted (`meltwater.sinks.net_effect`). So its stream pairs
updates by the mirror's key and reads departing rows as key images (`identifier-columns` =
the key, `before-images=key`, `mirror_source_options`; a pipeline may not set those
itself): an upsert commit's old rows are not read whole only to be dropped.

**Schema changes.** A stream's columns are fixed when its query starts
(`meltwater.stream.watch.stream_schema`, "Schema changes"), and by default a column added
later is projected away: a mirror would silently lose it. So a mirror kind asks for streams run with
`schema-change=fail` (its `source_options`; a configuration asking otherwise is refused):
the stream emits every commit before the change, then stops, and the service restarts the
query at once (a `SchemaChangedError`, `meltwater.service.failures`), which reads the new schema;
the first batch carrying it makes the mirror apply the DDL in that batch's transaction.
Renames do not stop the stream (it keeps the old name): each batch carries the stream's
field ids (`stream_field_ids`, read from the table as the query starts), so the mirror
follows the rename by id at the first batch whose commit has the new name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from meltwater.planner.table.table_loading import load_table
from meltwater.planner.table.table_source import TableSource
from meltwater.sinks.kinds import SinkKind, SinkOption, SinkPlacement, register_sink_kind
from meltwater.sinks.source_table import key_column_names
from meltwater.stream.engine.changes.change_schema import (
    LINEAGE_COLUMNS,
    METADATA_COLUMNS,
    BeforeImages,
)
from meltwater.stream.errors import SchemaChangedError
from meltwater.stream.watch.stream_modes import SchemaChange

MIRROR_SOURCE_OPTIONS: dict[str, str] = {"schema-change": SchemaChange.FAIL}
# What a mirror decides of its stream when the query starts (`mirror_source_options`).
MIRROR_DERIVED_OPTIONS = ("identifier-columns", "before-images")
# How a configuration gives a mirror its key columns, for the error that asks for them.
KEY_HINT = 'set key = ["<column>", ...] in the pipeline\'s sink'


def ledger_name(name: str, checkpoint: str) -> str:
    """The name a pipeline's batches go by in the mirror's ledger."""
    digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:8]
    return f"{name}@{digest}"


def open_mirror(options: Mapping[str, Any], placement: SinkPlacement, *,
                dry_run: bool = False) -> Any:
    """The pipeline's mirror (`dry_run`: checked as opening it checks, nothing changed)."""
    from meltwater.sinks.base import open_sink

    return open_sink(options["url"], table=options["table"], source=placement.table,
                     key_columns=options.get("key"),
                     pipeline=ledger_name(placement.pipeline, placement.checkpoint),
                     keep_dropped_columns=bool(options.get("keep-dropped-columns", False)),
                     dry_run=dry_run, key_hint=KEY_HINT)


def check_mirror(options: Mapping[str, Any], placement: SinkPlacement) -> None:
    """Open the mirror as the service would (connect, check its table or that one can be
    created, resolve the key) without creating or changing anything: what can fail there
    fails before the service starts, and `serve --check` leaves no file behind."""
    open_mirror(options, placement, dry_run=True).close()


def stream_field_ids(table: str | TableSource, columns: Sequence[str]) -> dict[str, int]:
    """The field ids of a starting stream's columns, from the table's current schema; the
    names must be exactly that schema's, else the table changed while the query started
    (a `SchemaChangedError`: the service starts the query again at once)."""
    schema = load_table(table).metadata.schema
    by_name = {f.name: f.field_id for f in schema.fields}
    data = [c for c in columns if c not in METADATA_COLUMNS and c not in LINEAGE_COLUMNS]
    if sorted(data) != sorted(by_name):
        raise SchemaChangedError(
            f"table {table} changed its schema while the mirror's query started (stream "
            f"columns {', '.join(data)}; table columns {', '.join(by_name)}): restarting")
    return {name: by_name[name] for name in data}


def mirror_writer(frame: Any, options: Mapping[str, Any], placement: SinkPlacement) -> Any:
    """`frame.writeStream.foreachBatch(...)` applying each micro-batch to the mirror, the
    batches carrying the stream's field ids."""
    from meltwater.sinks.spark_writer import foreach_batch

    field_ids = stream_field_ids(placement.table, frame.columns)
    return frame.writeStream.foreachBatch(
        foreach_batch(lambda: open_mirror(options, placement), field_ids,
                      checkpoint=placement.checkpoint))


def mirror_source_options(options: Mapping[str, Any], placement: SinkPlacement
                          ) -> dict[str, str]:
    """The stream options a mirror decides when its query starts: updates paired by its
    key, and departing rows read as key images (`before-images=key`): a mirror deletes by
    key, so the old values of the rows an upsert commit replaces are never read whole.
    A table without identifier fields and a mirror without `key` get neither (the mirror
    refuses them, naming `key`)."""
    names = key_column_names(options.get("key"), load_table(placement.table).metadata.schema)
    if not names:
        return {}
    return {"identifier-columns": ",".join(names), "before-images": BeforeImages.KEY}


def _default_table(placement: SinkPlacement) -> dict[str, Any]:
    """The mirror table is named after the pipeline unless the config says otherwise."""
    return {"table": placement.pipeline.replace(".", "_").replace("-", "_")}


def _mirror_kind(name: str, url_prefixes: tuple[str, ...],
                 aliases: tuple[str, ...] = ()) -> SinkKind:
    return SinkKind(name, {"url": SinkOption(str, required=True), "table": SinkOption(str),
                           "key": SinkOption(list, names=True),
                           "keep-dropped-columns": SinkOption(bool)},
                    mirror_writer, aliases=aliases, url_prefixes=url_prefixes,
                    source_options=MIRROR_SOURCE_OPTIONS,
                    source_options_reason="so a column added mid-stream is restarted into "
                                          "the mirror instead of projected away",
                    derived_source_options=mirror_source_options,
                    derived_option_names=MIRROR_DERIVED_OPTIONS,
                    derived_options_reason="applies rows by its key: set key in the sink "
                                           "instead",
                    defaults=_default_table,
                    check=check_mirror)


register_sink_kind(_mirror_kind("sqlite", ("sqlite:///",)))
register_sink_kind(_mirror_kind("postgres", ("postgresql://", "postgres://"), ("postgresql",)))
