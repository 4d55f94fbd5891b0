"""Reader options of the `meltwater` Spark source, in Iceberg's names and Spark 4.2's aliases.

Spark hands a data source a case-insensitive map of strings; this module turns it into the
arguments of `meltwater.stream.scan` / `change_feed`, so the batch reader, the
stream reader and their tests agree on what each option means. It imports no pyspark.

Iceberg's change options are exclusive at the start and inclusive at the end
(`start-snapshot-id`, `end-snapshot-id`, ...). Spark 4.2's change-read names
(`startingVersion`, `startingTimestamp`, ...) are inclusive at both ends. Each becomes a
`meltwater.planner.changes.change_range.RangeBound` named by the option the user set, so the
planner's one resolver decides what it means and its refusals speak of that option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meltwater.planner.changes.change_range import BoundKind, RangeBound, RangeRequest, given_bounds
from meltwater.planner.str_enum import StrEnum
from meltwater.planner.table.table_source import TableSource, parse_table_source
from meltwater.stream.engine.changes.change_schema import (
    BeforeImages,
    ChangeTypeNames,
    EqualityDeletes,
    RowOptions,
)
from meltwater.stream.errors import OptionError
from meltwater.stream.spark.option_names import CATALOG_OPTION, CATALOG_PREFIX, IO_PREFIX
from meltwater.stream.watch.change_stream import StreamRead
from meltwater.stream.watch.stream_modes import SchemaChange, Starting

TRUE_WORDS = ("true", "1", "yes")
FALSE_WORDS = ("false", "0", "no")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(options: dict[str, str], *names: str) -> bool | None:
    for name in names:
        value = options.get(name.lower())
        if value is None:
            continue
        if value.lower() in TRUE_WORDS:
            return True
        if value.lower() in FALSE_WORDS:
            return False
        raise OptionError(f"option {name}={value!r}: expected true or false")
    return None


def _int(options: dict[str, str], *names: str) -> int | None:
    for name in names:
        value = options.get(name.lower())
        if value is None:
            continue
        try:
            return int(value)
        except ValueError:
            raise OptionError(f"option {name}={value!r}: expected an integer") from None
    return None


def _timestamp_ms(options: dict[str, str], *names: str) -> int | None:
    """Milliseconds, or an ISO-8601 time as Spark users write `startingTimestamp`."""
    import datetime as dt

    for name in names:
        value = options.get(name.lower())
        if value is None:
            continue
        if value.lstrip("-").isdigit():
            return int(value)
        try:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise OptionError(f"option {name}={value!r}: expected milliseconds or an "
                              "ISO-8601 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.timezone.utc)
        return int(moment.timestamp() * 1000)
    return None


def _names(options: dict[str, str], name: str) -> list[str] | None:
    value = options.get(name.lower())
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise OptionError(f"option {name}: give at least one column name")
    return names




def table_source(options: Mapping[str, str]) -> TableSource:
    """The table a read names: `load(T)` / `path`, a location or `catalog.namespace.table`
    (or `namespace.table` with option `catalog`), with `catalog.<key>` options as that
    catalog's properties (over pyiceberg's configuration of it) and `io.<key>` options as
    FileIO properties (`io.s3.endpoint`, ...: Iceberg's names behind the prefix)."""
    lowered = _lower(options)
    text = lowered.get("path") or lowered.get("table")
    if not text:
        raise OptionError("the meltwater source needs a table: load(TABLE) or "
                          "option('path', TABLE)")
    catalog = lowered.get(CATALOG_OPTION)
    given = {k[len(CATALOG_PREFIX):]: v for k, v in lowered.items()
             if k.startswith(CATALOG_PREFIX)}
    io = {k[len(IO_PREFIX):]: v for k, v in lowered.items() if k.startswith(IO_PREFIX)}
    name = catalog or text.split(".", 1)[0]
    return parse_table_source(text, catalog=catalog,
                              catalog_properties={name: given} if given else None,
                              io_properties=io)


@dataclass(frozen=True)
class SnapshotRead:
    """A batch read of one snapshot: kwargs for `meltwater.stream.scan`/`plan`."""

    snapshot_id: int | None = None
    as_of_ms: int | None = None
    ref: str | None = None


@dataclass(frozen=True)
class ChangeRead:
    """A change read: the range and row-level options of `meltwater.stream.change_feed`."""

    range: RangeRequest
    rows: RowOptions


_CHANGE_START = ("start-snapshot-id", "start-sequence-number", "start-timestamp",
                 "startingversion", "startingtimestamp")


def is_change_read(options: Mapping[str, str]) -> bool:
    """Whether the options name a change range (or ask for changes). Delta's
    `startingVersion=latest` names none: it is a stream's start, read by `stream_read`
    (Spark asks `schema()` first, which must not parse it as a snapshot id)."""
    lowered = _lower(options)
    if lowered.get("startingversion", "").lower() == "latest":
        lowered.pop("startingversion")
    return any(name in lowered for name in _CHANGE_START) or _bool(
        lowered, "read-changes", "readChangeFeed") is True


def snapshot_read(options: Mapping[str, str]) -> SnapshotRead:
    """The snapshot a batch read targets, from `snapshot-id`/`versionAsOf`,
    `as-of-timestamp`/`timestampAsOf`, `branch` or `tag`."""
    lowered = _lower(options)
    ref = lowered.get("branch") or lowered.get("tag")
    if lowered.get("branch") and lowered.get("tag"):
        raise OptionError("options branch and tag exclude each other")
    read = SnapshotRead(snapshot_id=_int(lowered, "snapshot-id", "versionAsOf"),
                        as_of_ms=_timestamp_ms(lowered, "as-of-timestamp", "timestampAsOf"),
                        ref=ref)
    chosen = [v for v in (read.snapshot_id, read.as_of_ms, read.ref) if v is not None]
    if len(chosen) > 1:
        raise OptionError("choose one of snapshot-id, as-of-timestamp and branch/tag")
    return read


def row_options(options: Mapping[str, str]) -> RowOptions:
    """The row-level options of a change read (shared by batch and streaming reads)."""
    lowered = _lower(options)
    kwargs: dict[str, Any] = {}
    net = _bool(lowered, "net-changes")
    dedup = lowered.get("deduplicationmode")
    if dedup is not None:
        if dedup.lower() == "netchanges":
            net = True
        elif dedup.lower() in ("none", "dropcarryovers"):
            kwargs["keep_carryover"] = dedup.lower() == "none"
        else:
            raise OptionError(f"option deduplicationMode={dedup!r}: expected none, "
                              "dropCarryovers or netChanges")
    if net is not None:
        kwargs["net"] = net
    updates = _bool(lowered, "compute-updates", "computeUpdates")
    if updates is not None:
        kwargs["compute_updates"] = updates
        name = "compute-updates" if "compute-updates" in lowered else "computeUpdates"
        kwargs["updates_option"] = f"option {name}={lowered[name.lower()]}"
    kwargs["identifiers_option"] = "option identifier-columns"
    identifiers = _names(lowered, "identifier-columns")
    if identifiers is not None:
        kwargs["identifier_columns"] = identifiers
    carryover = _bool(lowered, "keep-carryover")
    if carryover is not None:
        kwargs["keep_carryover"] = carryover
    appends = _bool(lowered, "appends-only")
    if appends is not None:
        kwargs["appends_only"] = appends
    for option, keyword, kind in (("equality-deletes", "equality_deletes", EqualityDeletes),
                                  ("change-type-names", "change_type_names", ChangeTypeNames),
                                  ("before-images", "before_images", BeforeImages)):
        value = lowered.get(option)
        if value is not None:
            kwargs[keyword] = _mode(kind, option, value)
    return RowOptions(**kwargs)


def _mode(kind: type[StrEnum], option: str, value: str, text: str | None = None) -> Any:
    """Option `option`'s `value` as a member of `kind` (looked up as `text`, when the
    option's case does not matter); an unknown value is an OptionError in the user's
    words."""
    member = kind.named(value if text is None else text)
    if member is None:
        raise OptionError(f"option {option}={value!r}: expected {' or '.join(kind.texts())}")
    return member


def _skip_expired(lowered: dict[str, str]) -> bool:
    return bool(_bool(lowered, "skip-expired-snapshots"))


def change_read(options: Mapping[str, str]) -> ChangeRead:
    """A batch change read's range and options, Iceberg names first, Spark 4.2 aliases after.

    Iceberg: start-snapshot-id / start-sequence-number / start-timestamp (exclusive),
    end-snapshot-id / end-timestamp (inclusive). Spark 4.2: startingVersion /
    startingTimestamp (inclusive), endingVersion / endingTimestamp (inclusive). Each end
    is given once; a refusal names the option as the user spelled it here.
    """
    lowered = _lower(options)
    exclusive_starts = {
        "start-snapshot-id": (BoundKind.SNAPSHOT, _int(lowered, "start-snapshot-id")),
        "start-sequence-number": (BoundKind.SEQUENCE, _int(lowered, "start-sequence-number")),
        "start-timestamp": (BoundKind.TIMESTAMP, _timestamp_ms(lowered, "start-timestamp"))}
    inclusive_starts = {
        "startingVersion": (BoundKind.SNAPSHOT, _int(lowered, "startingVersion")),
        "startingTimestamp": (BoundKind.TIMESTAMP, _timestamp_ms(lowered, "startingTimestamp"))}
    ends = {"end-snapshot-id": (BoundKind.SNAPSHOT, _int(lowered, "end-snapshot-id")),
            "endingVersion": (BoundKind.SNAPSHOT, _int(lowered, "endingVersion")),
            "end-timestamp": (BoundKind.TIMESTAMP, _timestamp_ms(lowered, "end-timestamp")),
            "endingTimestamp": (BoundKind.TIMESTAMP, _timestamp_ms(lowered, "endingTimestamp"))}
    starts = (given_bounds(exclusive_starts, inclusive=False)
              + given_bounds(inclusive_starts, inclusive=True))
    request = RangeRequest.of(starts, given_bounds(ends, inclusive=True),
                              skip_expired=_skip_expired(lowered),
                              skip_option="skip-expired-snapshots=true")
    return ChangeRead(request, row_options(options))


# -- streaming reads -------------------------------------------------------------------------

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def _size(options: dict[str, str], *names: str) -> int | None:
    """Bytes, as a number or with a unit as Delta's `maxBytesPerTrigger` takes ("512m")."""
    import re

    for name in names:
        value = options.get(name.lower())
        if value is None:
            continue
        match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise OptionError(f"option {name}={value!r}: expected bytes, e.g. 1048576 or 512m")
        return int(match.group(1)) * _SIZE_UNITS[unit]
    return None


def _positive(value: int | None, name: str) -> int | None:
    if value is not None and value <= 0:
        raise OptionError(f"option {name}={value}: expected a positive number")
    return value


def _not_negative(value: int | None, name: str) -> int:
    if value is not None and value < 0:
        raise OptionError(f"option {name}={value}: expected milliseconds, 0 or more")
    return value or 0


def _stream_start(lowered: dict[str, str]) -> tuple[Starting, RangeBound | None]:
    """`starting` and the start bound of a stream: at most one of `starting` (or Delta's
    `startingVersion=latest`) and the start options, which the range resolver refuses to
    take twice."""
    text = lowered.get("starting")
    starting: Starting | None = None
    if text is not None:
        starting = _mode(Starting, "starting", text, text.lower())
    version = lowered.get("startingversion")
    if version is not None and version.lower() == Starting.LATEST:
        if starting is not None and starting is not Starting.LATEST:
            raise OptionError("give the stream's start once, not starting and startingVersion")
        starting, version = Starting.LATEST, None
    exclusive = {
        "start-snapshot-id": (BoundKind.SNAPSHOT, _int(lowered, "start-snapshot-id")),
        "stream-from-timestamp": (BoundKind.TIMESTAMP,
                                  _timestamp_ms(lowered, "stream-from-timestamp"))}
    inclusive = {
        "startingVersion": (BoundKind.SNAPSHOT,
                            None if version is None else _int(lowered, "startingVersion")),
        "startingTimestamp": (BoundKind.TIMESTAMP, _timestamp_ms(lowered, "startingTimestamp"))}
    bounds = given_bounds(exclusive, inclusive=False) + given_bounds(inclusive, inclusive=True)
    if starting is not None and bounds:
        raise OptionError(f"give the stream's start once, not "
                          f"{' and '.join(b.option for b in bounds)} and starting")
    start = RangeRequest.of(bounds).start
    return starting or Starting.EARLIEST, start


def stream_read(options: Mapping[str, str]) -> StreamRead:
    """The options of `spark.readStream.format("meltwater")`.

    Where to start (give one): `start-snapshot-id` (exclusive, as in batch reads),
    `stream-from-timestamp` (commits after that time, ms or ISO-8601),
    `starting=earliest|latest` (default earliest: the whole retained history; latest: only
    commits after the query starts), or Delta's inclusive `startingVersion` (a snapshot id,
    or `latest`) / `startingTimestamp`. `starting-snapshot-as-inserts=true` first emits
    the table's contents at the start snapshot as INSERT rows (for `earliest`, the oldest
    retained snapshot), then the changes after it.

    How much a micro-batch reads: `streaming-max-files-per-micro-batch` (Delta:
    `maxFilesPerTrigger`), `streaming-max-rows-per-micro-batch`,
    `streaming-max-bytes-per-micro-batch` (Delta: `maxBytesPerTrigger`, units like `512m`).

    `skip-expired-snapshots=true` skips snapshots expired before the stream read them
    (with a warning) instead of failing; `schema-change=project|fail` says what a column
    added after the stream started does: projected away with a warning (default), or the
    stream stops and asks to be restarted. `split-size` (bytes) is how much one Spark task
    of a micro-batch reads (default: the table's `read.split.target-size`).

    `branch`: the branch the stream follows (default `main`): its commits in order, as
    main's are followed (a branch fast-forwarded, reset or rolled back is followed as a
    rolled-back main is).

    `watch-wait-ms` (default 0): when no commit is new, `latestOffset` waits up to this
    long for the table's watcher to see one and returns as soon as it does, so a
    `processingTime="0 seconds"` trigger starts a micro-batch the moment a commit lands
    instead of asking again every 10 ms (local tables: file events; remote: polling).
    Stopping the query may take up to this long. `key-index-dir`: where executors keep the
    table's key index (`key_index_dir`). The row-level
    options are `row_options`' (`compute-updates`, `identifier-columns`, ...);
    `net-changes` is for batch reads only.
    """
    lowered = _lower(options)
    rows = row_options(options)
    if rows.net:
        raise OptionError("net-changes is a batch option: a stream emits each commit's "
                          "changes; read a range with spark.read to get its net changes")
    starting, start = _stream_start(lowered)
    branch = _stream_branch(lowered, start)
    text = lowered.get("schema-change")
    mode = (SchemaChange.PROJECT if text is None
            else _mode(SchemaChange, "schema-change", text, text.lower()))
    return StreamRead(
        source=table_source(options),
        start=start,
        starting=starting,
        snapshot_as_inserts=bool(_bool(lowered, "starting-snapshot-as-inserts")),
        max_files=_positive(_int(lowered, "streaming-max-files-per-micro-batch",
                                 "maxFilesPerTrigger"), "streaming-max-files-per-micro-batch"),
        max_rows=_positive(_int(lowered, "streaming-max-rows-per-micro-batch"),
                           "streaming-max-rows-per-micro-batch"),
        max_bytes=_positive(_size(lowered, "streaming-max-bytes-per-micro-batch",
                                  "maxBytesPerTrigger"), "streaming-max-bytes-per-micro-batch"),
        skip_expired=_skip_expired(lowered),
        schema_change=mode,
        split_size=_positive(_size(lowered, "split-size"), "split-size"),
        watch_wait_ms=_not_negative(_int(lowered, "watch-wait-ms"), "watch-wait-ms"),
        rows=rows,
        key_index_dir=key_index_dir(options),
        branch=branch,
    )


def _stream_branch(lowered: dict[str, str], start: RangeBound | None) -> str | None:
    """Option `branch`: the branch a stream follows (default main). A tag never moves, so
    it has no stream; a start by time would be found along main's history, not the
    branch's, so a branch's stream starts by snapshot id (or earliest/latest)."""
    if "tag" in lowered:
        raise OptionError("option tag: a tag names one snapshot and never moves; a stream "
                          "follows a branch (option branch), a tag is read with spark.read")
    branch = lowered.get("branch") or None
    if branch in (None, "main"):
        return None
    if start is not None and start.kind is not BoundKind.SNAPSHOT:
        raise OptionError(f"option {start.option}: a stream of branch {branch!r} starts by "
                          "snapshot id (start-snapshot-id, startingVersion), earliest or "
                          "latest; a time is looked up along main's history")
    return branch


def key_index_dir(options: Mapping[str, str]) -> str | None:
    """Option `key-index-dir`: the local directory where each executor keeps the table's key
    index (`meltwater.stream.engine.keys`), so an upsert commit finds the rows it replaced
    by lookups; None (absent or empty): no index."""
    return _lower(options).get("key-index-dir") or None


def split_size(options: Mapping[str, str]) -> int | None:
    """Option `split-size`: the bytes one Spark task reads (None: the table's
    `read.split.target-size`)."""
    return _positive(_size(_lower(options), "split-size"), "split-size")
