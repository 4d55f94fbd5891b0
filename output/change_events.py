"""Change batches as Debezium-style JSON events, for consumers that already speak Debezium.

One event per change, one JSON object per line::

    {"before": {"id": 2, "name": "b"}, "after": {"id": 2, "name": "B"}, "op": "u",
     "source": {"table": "db.events", "snapshot_id": 42, "sequence_number": 7,
                "ts_ms": 1700000000000},
     "ts_ms": 1700000000123}

- `op` is "c" for an INSERT, "d" for a DELETE, "u" for an UPDATE_BEFORE / UPDATE_AFTER
  pair (one event with both images), and "r" for rows read by an initial snapshot (an
  option: `initial_snapshot=True` marks every INSERT as a read, as Debezium's snapshot
  phase does).
- `source.ts_ms` is the commit's timestamp; the top-level `ts_ms` is when meltwater
  produced the event, as in Debezium (pass `ts_ms` for reproducible output).
- Values are converted like the `jsonl` format (`meltwater.output.writers`): ISO times, exact
  decimals as strings, bytes in base64, NaN and the infinities as the strings "NaN",
  "Infinity" and "-Infinity" (JSON has no literal for them), nested values too.

Change types in either vocabulary (Iceberg's or Delta's) are understood. An update pair may
straddle two batches; the writer carries the UPDATE_BEFORE over.

The envelope is built in one place, `debezium_event` (and `encode_event` its JSON), for
`meltwater changes --format debezium-jsonl` and for the Kafka sink
(`meltwater.sinks.kafka_events`), which orders and pairs the events by its message key
itself: both write the same events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

import pyarrow as pa

from meltwater.output.errors import ChangeOutputError
from meltwater.output.files import output_destination
from meltwater.output.json_values import json_default, json_safe
from meltwater.stream.engine.changes.change_schema import (
    CANONICAL_NAMES,
    CHANGE_TYPE,
    COMMIT_SEQUENCE_NUMBER,
    COMMIT_SNAPSHOT_ID,
    COMMIT_TIMESTAMP,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)
from meltwater.stream.engine.changes.updates import data_columns


def epoch_ms(value: Any) -> int | None:
    """A commit timestamp (datetime or epoch value) in epoch milliseconds."""
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1000)
    return int(value)


def debezium_op(change_type: str, *, initial_snapshot: bool = False) -> str:
    """The Debezium `op` of a single change row's type (either vocabulary): "c" for an
    INSERT ("r" for rows an initial snapshot read), "d" for a DELETE. An update pair is one
    "u" event, built from its two rows by whoever pairs them."""
    kind = CANONICAL_NAMES.get(change_type)
    if kind == INSERT:
        return "r" if initial_snapshot else "c"
    if kind == DELETE:
        return "d"
    raise ChangeOutputError(f"no single-row Debezium op for change type {change_type!r}")


def debezium_event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
                   table_name: str, commit: dict[str, Any], ts_ms: int | None = None
                   ) -> dict[str, Any]:
    """One Debezium envelope (see the module doc). `before` / `after` are row images as
    `json_safe` makes them; `commit` is a change row (or any mapping) carrying the commit's
    `_commit_snapshot_id`, `_commit_sequence_number` and `_commit_timestamp`; `ts_ms` is
    when the event is produced (now, if not given)."""
    return {
        "before": before,
        "after": after,
        "op": op,
        "source": {
            "table": table_name,
            "snapshot_id": commit.get(COMMIT_SNAPSHOT_ID),
            "sequence_number": commit.get(COMMIT_SEQUENCE_NUMBER),
            "ts_ms": epoch_ms(commit.get(COMMIT_TIMESTAMP)),
        },
        "ts_ms": ts_ms if ts_ms is not None else int(time.time() * 1000),
    }


def encode_event(event: dict[str, Any]) -> str:
    """An envelope as one line of JSON, values as the module doc says."""
    return json.dumps(event, default=json_default, allow_nan=False)


_IMAGES = '{"before": null, "after": null'


def envelope_tail(op: str, table_name: str, commit: dict[str, Any], ts_ms: int) -> str:
    """What follows the two images in an envelope's JSON (`encode_event` of
    `debezium_event`): the same for every event of one op in one commit."""
    text = encode_event(debezium_event(op, None, None, table_name, commit, ts_ms))
    if not text.startswith(_IMAGES):
        raise AssertionError("debezium_event no longer starts with before and after")
    return text[len(_IMAGES):]


def envelope_text(before: str | None, after: str | None, tail: str) -> str:
    """An envelope's JSON from its images' JSON (as `json.dumps` writes a row's dict, e.g.
    `meltwater.output.text.json_objects`) and its op and commit's `envelope_tail`: the
    text `encode_event` writes for the same event, without a dict per event."""
    return f'{{"before": {before or "null"}, "after": {after or "null"}{tail}'


def debezium_events(batches: Iterable[pa.RecordBatch], table_name: str, *,
                    initial_snapshot: bool = False, ts_ms: int | None = None
                    ) -> Iterator[dict[str, Any]]:
    """Debezium envelopes for change batches, in order (see the module doc)."""
    pending: dict[str, Any] | None = None  # an UPDATE_BEFORE waiting for its after image
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    for batch in batches:
        names = data_columns(batch)
        for row in batch.to_pylist(maps_as_pydicts="strict"):
            kind = CANONICAL_NAMES.get(row[CHANGE_TYPE])
            image = json_safe({n: row[n] for n in names})
            if pending is not None and kind != UPDATE_AFTER:
                raise ChangeOutputError("an UPDATE_BEFORE row is not followed by its "
                                        "UPDATE_AFTER row")
            if kind == UPDATE_BEFORE:
                pending = image
                continue
            if kind == UPDATE_AFTER:
                if pending is None:
                    raise ChangeOutputError("an UPDATE_AFTER row without its UPDATE_BEFORE")
                before, after, op = pending, image, "u"
                pending = None
            elif kind in (INSERT, DELETE):
                op = debezium_op(kind, initial_snapshot=initial_snapshot)
                before, after = (None, image) if kind == INSERT else (image, None)
            else:
                raise ChangeOutputError(f"unknown change type {row[CHANGE_TYPE]!r}")
            yield debezium_event(op, before, after, table_name, row, ts_ms)
    if pending is not None:
        raise ChangeOutputError("the last UPDATE_BEFORE row has no UPDATE_AFTER row")


def write_debezium_jsonl(reader: Iterable[pa.RecordBatch], output: str | IO[str] | None,
                         table_name: str, *, initial_snapshot: bool = False,
                         ts_ms: int | None = None) -> int:
    """Write Debezium events as JSON lines to a path, an open text file, or stdout (None);
    returns the number of events (an update pair is one). A path is replaced only once
    every event is written (`meltwater.output.files`)."""
    if output is not None and not isinstance(output, str):
        return _write_events(reader, output, table_name, initial_snapshot, ts_ms)
    with output_destination(output, text=True) as handle:
        return _write_events(reader, handle, table_name, initial_snapshot, ts_ms)


def _write_events(reader: Iterable[pa.RecordBatch], handle: IO[str], table_name: str,
                  initial_snapshot: bool, ts_ms: int | None) -> int:
    count = 0
    try:
        for event in debezium_events(reader, table_name, initial_snapshot=initial_snapshot,
                                     ts_ms=ts_ms):
            handle.write(encode_event(event) + "\n")
            count += 1
        return count
    finally:
        handle.flush()
