"""A batch of change rows -> the Kafka messages of the `kafka` sink, in the order they go out.

Each change is one Debezium envelope (`meltwater.output.change_events.debezium_event`, the
one `meltwater changes --format debezium-jsonl` writes) as the message value, and the JSON
object of its key columns as the message key::

    key   {"id": 2}
    value {"before": {"id": 2, "v": "a"}, "after": {"id": 2, "v": "b"}, "op": "u",
           "source": {"table": "lake.db.t", "snapshot_id": 42, "sequence_number": 7,
                      "ts_ms": 1700000000000}, "ts_ms": 1700000000123}

**Pairing and order, by the message key.** The rows of one commit (one `_change_ordinal`)
are grouped by key: a key that left and arrived is one "u" event, one that only left a
"d" event (followed, with `tombstones`, by a message with the same key and a null value,
as Debezium does, so a compacted topic forgets the key), one that only arrived a "c"
event ("r" for the rows of a starting snapshot read as inserts, `snapshot_as_inserts`:
ordinal 0, the stream's first commit). Commits go out in commit order, so every key's
events are in commit order (and a commit's keys in the order of their JSON, so the same
rows in any order make the same messages); Kafka keeps that order within a partition, and
a key always goes to one partition. The stream feeding the sink pairs its updates by the same key
(`identifier-columns`, see `meltwater.sinks.kafka_stream`), which keeps a key's rows of a
commit in one micro-batch when read limits split the commit.

A key must be unique among the table's live rows: a key with two rows leaving or two
arriving in one commit is refused (`DuplicateKeyError`), as is a null in a key column
(`NullKeyError`); Debezium's consumers fold a topic by key, and would silently keep one
of two rows.

**Event ids.** Each message carries headers naming its commit (`meltwater.snapshot_id`),
the commit's `_change_ordinal` (`meltwater.change_ordinal`) and a deterministic
`meltwater.event_id`, `<snapshot id>-<first 16 hex digits of the SHA-256 of the key>`
(the tombstone's ends in `-tombstone`): a commit has one event per key, and the same
commit read again yields the same ids, so a consumer can drop a message whose id it has
seen (what an at-least-once delivery needs).

**With schemas** (`format = "json-with-schema"`, `EventOptions.message_format`): each key
and value is Kafka Connect's `{"schema": ..., "payload": ...}` of the same key object and
envelope, its payload's times and decimals as the schema's Debezium types hold them
(`meltwater.sinks.connect_json`). Pairing, order, tombstones and event ids are the same.

**Columns by commit.** With `names_at`, each commit's images carry the columns of that
commit's schema, by field id: a column renamed after the stream started goes by its new
name from the commit that renamed it, and one the commit's schema lacks (added later) is
left out. Without it, images carry the batch's columns as they are.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.output.change_events import debezium_op, envelope_tail, envelope_text
from meltwater.output.json_values import json_default, json_safe
from meltwater.output.text import json_objects
from meltwater.sinks.connect_json import (
    connect_values,
    envelope_schema,
    key_schema,
    schema_name,
    with_schema,
)
from meltwater.sinks.errors import DuplicateKeyError, InvalidChangesError, NullKeyError
from meltwater.sinks.message_formats import MessageFormat
from meltwater.stream.engine.changes.change_schema import (
    CANONICAL_NAMES,
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)
from meltwater.stream.engine.changes.updates import content_columns

if TYPE_CHECKING:
    from meltwater.sinks.kafka_avro import AvroMessages

EVENT_ID = "meltwater.event_id"
SNAPSHOT_ID = "meltwater.snapshot_id"
CHANGE_ORDINAL_HEADER = "meltwater.change_ordinal"
TOMBSTONE_SUFFIX = "-tombstone"
_LEAVING_NAMES = sorted(n for n, c in CANONICAL_NAMES.items() if c in (DELETE, UPDATE_BEFORE))
_ARRIVING_NAMES = sorted(n for n, c in CANONICAL_NAMES.items() if c in (INSERT, UPDATE_AFTER))

# batch column -> its name in a commit's schema (a column the commit lacks: left out)
NamesAt = Callable[[int], Mapping[str, str]]


class KafkaEvent(NamedTuple):
    """One message: its key and value (None: a tombstone), headers and event id.

    A named tuple: a batch makes one per change, and a frozen dataclass takes about four
    times as long to build."""

    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    event_id: str
    snapshot_id: int
    ordinal: int
    op: str | None  # c, u, d, r; None for a tombstone

    @property
    def tombstone(self) -> bool:
        """Whether this is the null-valued message that follows a delete."""
        return self.value is None


@dataclass(frozen=True)
class EventOptions:
    """How a batch becomes messages: the table's name in `source.table`, the key columns
    (batch column names), tombstones after deletes, the starting-snapshot mode, what keys
    and values are written as, and whether each event carries its commit's `transaction`
    block (`kafka_transactions`)."""

    table_name: str
    key_columns: tuple[str, ...]
    tombstones: bool = True
    snapshot_as_inserts: bool = False
    message_format: MessageFormat = MessageFormat.JSON
    transaction_metadata: bool = False
    avro: AvroMessages | None = None  # the schema registry's side of `format = "avro"`


def event_id(snapshot_id: int, key: bytes) -> str:
    """The deterministic id of a commit's event for a key (see the module doc)."""
    return f"{snapshot_id}-{hashlib.sha256(key).hexdigest()[:16]}"


def kafka_events(batch: pa.Table, options: EventOptions, *, names_at: NamesAt | None = None,
                 ts_ms: int | None = None, what: str = "batch",
                 written_before: Mapping[int, int] | None = None) -> list[KafkaEvent]:
    """The messages of a batch of change rows, in the order they are produced (see the
    module doc). `ts_ms` is the events' production time (now if not given);
    `written_before`: per snapshot id, how many of its commit's events earlier batches
    wrote (the `transaction` block's orders continue from there).

    Keys and images are rendered to JSON column by column with Arrow's kernels
    (`meltwater.output.text.json_objects`, the `jsonl` format's renderer, which writes what
    `json.dumps` of the row writes), commit by commit; only the pairing and the envelopes'
    assembly (`envelope_text`) go row by row."""
    _require(batch, [CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, *options.key_columns],
             what)
    for name in options.key_columns:
        nulls = batch.column(name).null_count
        if nulls:
            raise NullKeyError(f"{what} has {nulls} change row(s) with a null in key column "
                               f"{name!r}; a Kafka message key must never be null (set key "
                               "to columns that are never null)")
    if batch.num_rows == 0:
        return []
    leaving = _leaving(batch, what)
    ordinals = pc.cast(batch.column(CHANGE_ORDINAL), pa.int64())
    produced = ts_ms if ts_ms is not None else int(time.time() * 1000)
    events: list[KafkaEvent] = []
    for ordinal in sorted(pc.unique(ordinals).to_pylist()):
        mask = pc.equal(ordinals, ordinal)
        events.extend(_commit_events(batch.filter(mask), leaving.filter(mask), ordinal,
                                     options, names_at, produced, what,
                                     written_before or {}))
    return events


def _leaving(batch: pa.Table, what: str) -> pa.ChunkedArray:
    """Per row, whether it left (DELETE, UPDATE_BEFORE) or arrived; an unknown type is
    refused."""
    types = pc.cast(batch.column(CHANGE_TYPE), pa.string())
    leaving = pc.is_in(types, value_set=pa.array(_LEAVING_NAMES))
    known = pc.or_(leaving, pc.is_in(types, value_set=pa.array(_ARRIVING_NAMES)))
    if not pc.all(known).as_py():
        bad = pc.unique(pc.filter(types, pc.invert(known))).to_pylist()
        raise InvalidChangesError(f"{what} has unknown change type(s) {bad[:5]} in "
                                  f"{CHANGE_TYPE}")
    return leaving


def _commit_events(commit: pa.Table, leaving: pa.ChunkedArray, ordinal: int,
                   options: EventOptions, names_at: NamesAt | None, produced: int,
                   what: str, written_before: Mapping[int, int]) -> list[KafkaEvent]:
    """The events of one commit's rows: one per key, in the order of the keys' JSON."""
    first = commit.slice(0, 1).to_pylist()[0]  # the commit's snapshot, sequence, time
    snapshot_id = int(first[COMMIT_SNAPSHOT_ID])
    columns = content_columns(commit)
    names = dict(names_at(snapshot_id)) if names_at is not None else {c: c for c in columns}
    shown = [c for c in columns if c in names]
    image_table = commit.select(shown).rename_columns([names[c] for c in shown])
    key_table = commit.select(list(options.key_columns)).rename_columns(
        [names.get(c, c) for c in options.key_columns])
    keys = _json_objects(key_table)  # what pairs rows, orders events and names them
    pairs: dict[str, list[int | None]] = {}  # key -> [leaving row, arriving row]
    for row, (key, left) in enumerate(zip(keys, leaving.to_pylist(), strict=True)):
        pair = pairs.get(key)
        if pair is None:
            pair = pairs[key] = [None, None]
        side = 0 if left else 1
        if pair[side] is not None:
            raise DuplicateKeyError(
                f"{what}: key {key} has two rows {'leaving' if left else 'arriving'} in "
                f"snapshot {snapshot_id}: the table holds two live rows with that key; "
                "choose key columns that are unique")
        pair[side] = row
    render = _rendering(options, image_table, key_table, keys, first, produced)
    arrived_op = debezium_op(INSERT, initial_snapshot=options.snapshot_as_inserts
                             and ordinal == 0)
    deleted_op = debezium_op(DELETE)
    headers = ((SNAPSHOT_ID, str(snapshot_id).encode()),
               (CHANGE_ORDINAL_HEADER, str(ordinal).encode()))
    events = []
    order = written_before.get(snapshot_id, 0)  # the commit's events before this one
    for key in sorted(pairs):
        before, after = pairs[key]
        op = "u" if before is not None and after is not None else \
            arrived_op if after is not None else deleted_op
        ident = event_id(snapshot_id, key.encode())
        order += 1
        shown_row = after if after is not None else before
        assert shown_row is not None  # every key has a row
        key_bytes = render.key(shown_row)
        events.append(KafkaEvent(key_bytes, render.value(before, after, op, order),
                                 (*headers, (EVENT_ID, ident.encode())), ident, snapshot_id,
                                 ordinal, op))
        if op == "d" and options.tombstones:
            tombstone = ident + TOMBSTONE_SUFFIX
            events.append(KafkaEvent(key_bytes, None,
                                     (*headers, (EVENT_ID, tombstone.encode())), tombstone,
                                     snapshot_id, ordinal, None))
    return events


class Rendering(Protocol):
    """How one commit's messages are written: a row's key, and the envelope of a key's
    leaving and arriving rows (row numbers of the commit's tables)."""

    def key(self, row: int) -> bytes:
        """The message key of row `row`."""
        ...

    def value(self, before: int | None, after: int | None, op: str, order: int) -> bytes:
        """The envelope of a key's rows (None: no such side), `op`, the commit's `order`-th
        event."""
        ...


def _rendering(options: EventOptions, images: pa.Table, keys: pa.Table, key_texts: list[str],
               first: dict[str, Any], produced: int) -> Rendering:
    if options.message_format == MessageFormat.AVRO:
        if options.avro is None:
            raise InvalidChangesError("format avro needs the sink's schema registry")
        return options.avro.rendering(options.table_name, options.transaction_metadata, images,
                                      keys, first, produced)
    return _JsonRendering(options, images, keys, key_texts, first, produced)


class _JsonRendering:
    """`json` and `json-with-schema` (see the module doc)."""

    def __init__(self, options: EventOptions, images: pa.Table, keys: pa.Table,
                 key_texts: list[str], first: dict[str, Any], produced: int) -> None:
        self._options = options
        self._first = first
        self._produced = produced
        self._framed = _Framing.of(options, images.schema, keys.schema)
        if self._framed is not None:  # payloads hold values as their Connect schemas say
            images, keys = connect_values(images), connect_values(keys)
            key_texts = _json_objects(keys)
        self._images = _json_objects(images)
        self._keys = key_texts
        self._tails: dict[str, str] = {}

    def key(self, row: int) -> bytes:
        """The key object's JSON (wrapped with its schema for `json-with-schema`)."""
        key = self._keys[row]
        return (key if self._framed is None else with_schema(self._framed.key, key)).encode()

    def value(self, before: int | None, after: int | None, op: str, order: int) -> bytes:
        """The envelope's JSON, built from the images' JSON (`envelope_text`)."""
        tail = self._tails.get(op)
        if tail is None:
            tail = self._tails[op] = envelope_tail(op, self._options.table_name, self._first,
                                                   self._produced)
        if self._options.transaction_metadata:  # Debezium's block, before the envelope's end
            snapshot_id = int(self._first[COMMIT_SNAPSHOT_ID])
            tail = f"{tail[:-1]}, {transaction_block(snapshot_id, order)}}}"
        value = envelope_text(None if before is None else self._images[before],
                              None if after is None else self._images[after], tail)
        if self._framed is not None:
            value = with_schema(self._framed.value, value)
        return value.encode()


@dataclass(frozen=True)
class _Framing:
    """The JSON of a commit's key and value schemas, for `json-with-schema`."""

    key: str
    value: str

    @staticmethod
    def of(options: EventOptions, images: pa.Schema, keys: pa.Schema) -> _Framing | None:
        """The schemas a commit's messages carry, None if they carry none."""
        if options.message_format != MessageFormat.JSON_WITH_SCHEMA:
            return None
        name = schema_name(options.table_name)
        return _Framing(key_schema(list(keys), name),
                        envelope_schema(list(images), name,
                                        transaction=options.transaction_metadata))


def transaction_block(snapshot_id: int, order: int) -> str:
    """The `"transaction"` member of a change event's envelope: its commit (one Iceberg
    snapshot is one transaction, its id the snapshot id) and its place among the commit's
    events, counted from 1 (one table: the data collection's order is the same)."""
    return (f'"transaction": {{"id": "{snapshot_id}", "total_order": {order}, '
            f'"data_collection_order": {order}}}')


def _json_objects(table: pa.Table) -> list[str]:
    """Each row of `table` as `json.dumps` of its dict writes it (values as the `jsonl`
    format writes them)."""
    if table.num_columns == 0:
        return ["{}"] * table.num_rows
    batch = table.combine_chunks().to_batches()
    objects = json_objects(batch[0]) if len(batch) == 1 else None
    if objects is None:  # no rows in one batch, or a column name twice: row by row
        return [json.dumps(json_safe(row), default=json_default, allow_nan=False)
                for row in table.to_pylist(maps_as_pydicts="strict")]
    return objects.to_pylist()


def _require(batch: pa.Table, needed: Sequence[str], what: str) -> None:
    missing = [c for c in needed if c not in batch.column_names]
    if missing:
        raise InvalidChangesError(f"{what} lacks column(s) {', '.join(missing)} "
                                  f"(columns: {', '.join(batch.column_names)})")
