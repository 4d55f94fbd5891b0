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

import pyarrow as pa

from meltwater.output.change_events import debezium_event, debezium_op, encode_event
from meltwater.output.json_values import json_default, json_safe
from meltwater.sinks.errors import DuplicateKeyError, InvalidChangesError, NullKeyError
from meltwater.stream.engine.change_schema import (
    CANONICAL_NAMES,
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)
from meltwater.stream.engine.updates import content_columns

EVENT_ID = "meltwater.event_id"
SNAPSHOT_ID = "meltwater.snapshot_id"
CHANGE_ORDINAL_HEADER = "meltwater.change_ordinal"
TOMBSTONE_SUFFIX = "-tombstone"
_LEAVING = (DELETE, UPDATE_BEFORE)
_ARRIVING = (INSERT, UPDATE_AFTER)

# batch column -> its name in a commit's schema (a column the commit lacks: left out)
NamesAt = Callable[[int], Mapping[str, str]]


@dataclass(frozen=True)
class KafkaEvent:
    """One message: its key and value (None: a tombstone), headers and event id."""

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
    (batch column names), tombstones after deletes, and the starting-snapshot mode."""

    table_name: str
    key_columns: tuple[str, ...]
    tombstones: bool = True
    snapshot_as_inserts: bool = False


def event_id(snapshot_id: int, key: bytes) -> str:
    """The deterministic id of a commit's event for a key (see the module doc)."""
    return f"{snapshot_id}-{hashlib.sha256(key).hexdigest()[:16]}"


def key_bytes(image: Mapping[str, object], key_names: Sequence[str]) -> bytes:
    """The message key: the JSON object of the key columns, in the key's order."""
    return json.dumps({name: image[name] for name in key_names}, default=json_default,
                      allow_nan=False).encode()


@dataclass
class _Group:
    """One key's rows in one commit."""

    ordinal: int
    order: str  # the key as JSON: a commit's keys go out in this order, whatever the input's
    leaving: list[dict]
    arriving: list[dict]


def kafka_events(batch: pa.Table, options: EventOptions, *, names_at: NamesAt | None = None,
                 ts_ms: int | None = None, what: str = "batch") -> list[KafkaEvent]:
    """The messages of a batch of change rows, in the order they are produced (see the
    module doc). `ts_ms` is the events' production time (now if not given)."""
    _require(batch, [CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, *options.key_columns],
             what)
    for name in options.key_columns:
        nulls = batch.column(name).null_count
        if nulls:
            raise NullKeyError(f"{what} has {nulls} change row(s) with a null in key column "
                               f"{name!r}; a Kafka message key must never be null (set key "
                               "to columns that are never null)")
    columns = content_columns(batch)
    produced = ts_ms if ts_ms is not None else int(time.time() * 1000)
    groups: dict[tuple[int, tuple], _Group] = {}
    for row in batch.to_pylist():
        kind = CANONICAL_NAMES.get(row[CHANGE_TYPE])
        if kind not in _LEAVING and kind not in _ARRIVING:
            raise InvalidChangesError(f"{what} has unknown change type {row[CHANGE_TYPE]!r} "
                                      f"in {CHANGE_TYPE}")
        ordinal = int(row[CHANGE_ORDINAL])
        key = tuple(_hashable(row[name]) for name in options.key_columns)
        group = groups.get((ordinal, key))
        if group is None:
            group = groups[(ordinal, key)] = _Group(
                ordinal, json.dumps(key, default=json_default), [], [])
        (group.leaving if kind in _LEAVING else group.arriving).append(row)
    events: list[KafkaEvent] = []
    renames: dict[int, Mapping[str, str]] = {}
    for group in sorted(groups.values(), key=lambda g: (g.ordinal, g.order)):
        events.extend(_group_events(group, columns, options, names_at, renames, produced,
                                    what))
    return events


def _group_events(group: _Group, columns: list[str], options: EventOptions,
                  names_at: NamesAt | None, renames: dict[int, Mapping[str, str]],
                  produced: int, what: str) -> list[KafkaEvent]:
    """The event (and tombstone) of one key in one commit."""
    row = (group.arriving or group.leaving)[0]
    snapshot_id = int(row[COMMIT_SNAPSHOT_ID])
    if len(group.leaving) > 1 or len(group.arriving) > 1:
        shown = {name: row[name] for name in options.key_columns}
        raise DuplicateKeyError(
            f"{what}: key {shown} has {len(group.leaving)} row(s) leaving and "
            f"{len(group.arriving)} arriving in snapshot {snapshot_id}: the table holds two "
            "live rows with that key; choose key columns that are unique")
    if names_at is not None and snapshot_id not in renames:
        renames[snapshot_id] = names_at(snapshot_id)
    names = renames.get(snapshot_id)

    def image(source: dict) -> dict:
        if names is None:
            return json_safe({c: source[c] for c in columns})
        return json_safe({names[c]: source[c] for c in columns if c in names})

    before = image(group.leaving[0]) if group.leaving else None
    after = image(group.arriving[0]) if group.arriving else None
    if before is not None and after is not None:
        op = "u"
    elif after is not None:
        op = debezium_op(INSERT, initial_snapshot=options.snapshot_as_inserts
                         and group.ordinal == 0)
    else:
        op = debezium_op(DELETE)
    key_names = [names.get(c, c) for c in options.key_columns] if names else \
        list(options.key_columns)
    key = key_bytes(after if after is not None else before or {}, key_names)
    ident = event_id(snapshot_id, key)
    headers = ((SNAPSHOT_ID, str(snapshot_id).encode()),
               (CHANGE_ORDINAL_HEADER, str(group.ordinal).encode()))
    value = encode_event(debezium_event(op, before, after, options.table_name, row, produced))
    events = [KafkaEvent(key, value.encode(), (*headers, (EVENT_ID, ident.encode())), ident,
                         snapshot_id, group.ordinal, op)]
    if op == "d" and options.tombstones:
        tombstone = ident + TOMBSTONE_SUFFIX
        events.append(KafkaEvent(key, None, (*headers, (EVENT_ID, tombstone.encode())),
                                 tombstone, snapshot_id, group.ordinal, None))
    return events


def _hashable(value: object) -> object:
    """A key value as a dict key (nested values are refused as keys before they get here;
    lists and dicts are made hashable rather than crash the grouping)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=json_default, sort_keys=True)
    return value


def _require(batch: pa.Table, needed: Sequence[str], what: str) -> None:
    missing = [c for c in needed if c not in batch.column_names]
    if missing:
        raise InvalidChangesError(f"{what} lacks column(s) {', '.join(missing)} "
                                  f"(columns: {', '.join(batch.column_names)})")
