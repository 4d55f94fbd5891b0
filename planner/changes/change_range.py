"""Where a change range starts and ends: bounds as callers give them, resolved to commits.

A change range is the commits of one lineage after a start and up to an end, `(from, to]`
in Iceberg's changelog terms. Each entry point names its bounds its own way: the CLI's
`--from-timestamp`, Iceberg's Spark option `start-timestamp` (exclusive), Spark 4.2 and
Delta's `startingTimestamp` (inclusive), the Python API's `from_timestamp_ms`, a stream's
`stream-from-timestamp`. Each becomes a `RangeBound` that keeps the caller's name for it,
and one resolver turns a `RangeRequest` into a `ChangeRange`: every entry point makes the
same decisions, and every refusal names the option the user set.

A bound names a point of the end's lineage, by snapshot id, sequence number, commit time or
ref; by sequence number or time it is the newest snapshot at or before the value, as
Iceberg's `SnapshotUtil.snapshotIdAsOfTime` finds one. An exclusive start (Iceberg's
`fromSnapshotExclusive`, the default) reads the commits after that point; an inclusive
start (`fromSnapshotInclusive`, Spark's `startingVersion`) also reads the point's own
commit, so it resolves one step earlier: the parent of a snapshot, the newest commit
strictly before a time or sequence number. Ends are inclusive, as Iceberg's `toSnapshot`
and Spark's `endingVersion` are.

Resolving reads table metadata only, never a manifest.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from meltwater.planner.errors import (
    ExpiredSnapshotsError,
    InvalidRangeError,
    MeltwaterError,
    NoSuchSnapshotError,
)
from meltwater.planner.table.lineage import walk_back
from meltwater.planner.table.metadata import Snapshot, TableMetadata
from meltwater.planner.table.table_loading import Table


class BoundKind(enum.Enum):
    """What a bound's value is."""

    SNAPSHOT = "snapshot id"
    SEQUENCE = "sequence number"
    TIMESTAMP = "timestamp in ms"
    REF = "branch or tag"

    @property
    def names_a_snapshot(self) -> bool:
        """Snapshot ids and refs name one snapshot; sequence numbers and times a position
        along the lineage, found by searching it."""
        return self in (BoundKind.SNAPSHOT, BoundKind.REF)


@dataclass(frozen=True)
class RangeBound:
    """One end of a change range, as a caller gave it.

    `option` is what the caller calls this bound (`--from-timestamp`, `startingVersion`,
    `from_timestamp_ms`); every refusal that involves the bound names it so, with the value
    as the caller wrote it (`given`, when that is not the value: an ISO-8601 time).
    """

    kind: BoundKind
    value: int | str
    inclusive: bool
    option: str
    given: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind is BoundKind.REF:
            if not isinstance(self.value, str) or not self.value:
                raise InvalidRangeError(f"{self.option} {self.value!r}: expected the name of "
                                        "a branch or tag")
        elif not isinstance(self.value, int) or isinstance(self.value, bool):
            raise InvalidRangeError(f"{self.option} {self.value!r}: expected an integer "
                                    f"({self.kind.value})")

    @classmethod
    def after(cls, kind: BoundKind, value: int | str, option: str) -> RangeBound:
        """An exclusive start: the changes committed after this point."""
        return cls(kind, value, False, option)

    @classmethod
    def at(cls, kind: BoundKind, value: int | str, option: str) -> RangeBound:
        """An inclusive bound: a start whose own commit is read, or a range's end."""
        return cls(kind, value, True, option)

    def __str__(self) -> str:
        if self.given is not None:
            return f"{self.option} {self.given}"
        value = repr(self.value) if self.kind is BoundKind.REF else str(self.value)
        return f"{self.option} {value}"


@dataclass(frozen=True)
class RangeRequest:
    """A change range as asked for: where it starts, where it ends, and whether history
    that expired inside it is skipped (with a warning from the reader) or refused.

    No start means the whole retained history; no end the table's current snapshot.
    `skip_option` is how the caller's user asks to skip expired history (`--skip-expired`,
    `skip-expired-snapshots=true`), for a refusal to name.
    """

    start: RangeBound | None = None
    end: RangeBound | None = None
    skip_expired: bool = False
    skip_option: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.end is not None and not self.end.inclusive:
            raise InvalidRangeError(f"{self.end}: a range's end is inclusive (the range is "
                                    "(from, to], or [from, to] with an inclusive start)")

    @classmethod
    def of(cls, start: Iterable[RangeBound] = (), end: Iterable[RangeBound] = (), *,
           skip_expired: bool = False, skip_option: str | None = None) -> RangeRequest:
        """The range of the bounds a caller was given, each end at most once (a caller
        offering several ways to give an end passes whichever were set)."""
        return cls(_once("start", start), _once("end", end), skip_expired, skip_option)

    @classmethod
    def empty_at(cls, snapshot_id: int | None) -> RangeRequest:
        """No commits, ending at a snapshot: the schema and options of a feed there without
        resolving its history (which may have expired). None: an empty table."""
        if snapshot_id is None:
            return cls()
        return cls(RangeBound.after(BoundKind.SNAPSHOT, snapshot_id, "snapshot"),
                   RangeBound.at(BoundKind.SNAPSHOT, snapshot_id, "snapshot"))


def given_bounds(options: Mapping[str, tuple[BoundKind, int | str | None]], *,
                 inclusive: bool, given: Mapping[str, str | None] | None = None,
                 ) -> list[RangeBound]:
    """The bounds of the options a caller has that were set: option name -> (kind, value,
    None when not set); `given`: option name -> the text the caller wrote, where the value
    was converted from it (an ISO-8601 time). For `RangeRequest.of`, which refuses more
    than one per end."""
    texts = given or {}
    return [RangeBound(kind, value, inclusive, option, texts.get(option))
            for option, (kind, value) in options.items() if value is not None]


def _once(side: str, bounds: Iterable[RangeBound]) -> RangeBound | None:
    given = list(bounds)
    if len(given) > 1:
        raise InvalidRangeError(f"give the range's {side} once, not "
                                f"{' and '.join(b.option for b in given)}")
    return given[0] if given else None


@dataclass(frozen=True)
class ChangeRange:
    """Commits after `from_snapshot_id` up to and including `to`, oldest first.

    `expired_skipped`: parents of the oldest commit whose history had expired and was
    skipped on request (the reader warns about them).
    """

    from_snapshot_id: int | None
    to_snapshot_id: int | None
    commits: tuple[Snapshot, ...]
    expired_skipped: tuple[int, ...] = ()


# -- the resolver ------------------------------------------------------------------------------


def resolve_range(table: Table, request: RangeRequest = RangeRequest()) -> ChangeRange:
    """The commits of the requested range, walking the end's parent chain back to the start.

    Refused, naming the bounds as the caller calls them: a start later than an explicit
    end (Iceberg's Spark changelog scans refuse a start-timestamp after the end-timestamp;
    the range would be empty by mistake), an end sequence number beyond the head (clamping
    it would answer for a range nobody asked for), a start sequence number beyond the head
    (likewise: sequence numbers are the table's own count of its commits, so one beyond the
    head names no commit and an empty answer would pass for "nothing since"), a bound naming
    no snapshot, a start that is not an ancestor of the end (`InvalidRangeError`,
    `NoSuchSnapshotError`), and history that expired inside the range unless `skip_expired`
    (`ExpiredSnapshotsError`). A start time after the head's commit, or the head itself as
    the start, with no end given is a valid, empty range: nothing since (Iceberg Java's
    changelog scan answers an empty scan for a start-timestamp after the current snapshot's).
    """
    metadata = table.metadata
    if request.start is not None:
        _check_within_head(metadata, request.start)
    end = _resolve_end(metadata, request.end)
    if end is None:  # an empty table: nothing to read, but a named start must exist
        if request.start is not None and request.start.kind.names_a_snapshot:
            _named_snapshot(metadata, request.start)
        return ChangeRange(None, None, ())
    if request.start is not None:
        _check_start_before_end(request.start, request.end, end)
    start = _resolve_start(metadata, request.start, metadata.ancestors(end.snapshot_id))
    walk = walk_back(metadata, start, end, _RangeRefusals(metadata, request, start, end),
                     skip_expired=request.skip_expired)
    commits = walk.commits
    bound = request.start
    if bound is not None and bound.inclusive and bound.kind.names_a_snapshot:
        first = _named_snapshot(metadata, bound).snapshot_id
        if first not in {c.snapshot_id for c in commits}:
            raise _not_an_ancestor(metadata, bound, end)
    expired = () if walk.expired_skipped is None else (walk.expired_skipped,)
    return ChangeRange(start, end.snapshot_id, commits, expired)


def resolve_start(table: Table, start: RangeBound, *, skip_expired: bool = False) -> int | None:
    """Where a stream starting at `start` begins: the snapshot whose commits it has read
    (None: none yet, read from the first). Resolved as the range from `start` to the
    current snapshot, with the same checks and errors."""
    request = RangeRequest(start, None, skip_expired)
    return resolve_range(table, request).from_snapshot_id


def _named_snapshot(metadata: TableMetadata, bound: RangeBound) -> Snapshot:
    """The snapshot a snapshot-id or ref bound names; a refusal names the bound."""
    try:
        if bound.kind is BoundKind.REF:
            return metadata.snapshot_for_ref(str(bound.value))
        return metadata.snapshot(int(bound.value))
    except NoSuchSnapshotError as error:
        raise NoSuchSnapshotError(f"{bound}: {error}") from None


def _not_an_ancestor(metadata: TableMetadata, bound: RangeBound,
                     end: Snapshot) -> InvalidRangeError:
    """The refusal of a start off the end's lineage (a ref shown with its snapshot)."""
    shown = str(bound)
    if bound.kind is BoundKind.REF:
        shown += f" (snapshot {_named_snapshot(metadata, bound).snapshot_id})"
    return InvalidRangeError(f"{shown} is not an ancestor of {end.snapshot_id}")


def _position(snapshot: Snapshot, kind: BoundKind) -> int:
    """A snapshot's place along the lineage as a bound of this kind measures it."""
    return snapshot.sequence_number if kind is BoundKind.SEQUENCE else snapshot.timestamp_ms


def _describe_position(value: int, kind: BoundKind) -> str:
    return f"sequence number {value}" if kind is BoundKind.SEQUENCE else f"{value} ms"


def _at_or_before(lineage: list[Snapshot], kind: BoundKind, value: int) -> Snapshot | None:
    """The newest snapshot of a lineage (newest first) at or before a sequence number or
    commit time."""
    return next((s for s in lineage if _position(s, kind) <= value), None)


def _resolve_end(metadata: TableMetadata, bound: RangeBound | None) -> Snapshot | None:
    """The range's last snapshot (None: the table has none)."""
    current = metadata.current_snapshot
    if bound is None:
        return current
    _check_within_head(metadata, bound)
    if bound.kind.names_a_snapshot:
        return _named_snapshot(metadata, bound)
    if current is None:
        return None
    value = int(bound.value)
    found = _at_or_before(metadata.ancestors(current.snapshot_id), bound.kind, value)
    if found is None:
        raise NoSuchSnapshotError(f"{bound}: no snapshot at or before "
                                  f"{_describe_position(value, bound.kind)}")
    return found


def _check_within_head(metadata: TableMetadata, bound: RangeBound) -> None:
    """Refuse a sequence number beyond the head's, as a start or an end: it names no
    commit of the table (a time after the head's commit is a moment that came, and the
    range after it is empty; a snapshot id or ref is checked by looking it up). And any
    sequence number on a format v1 table, whose commits all carry 0: a start at 0 would
    read none of them and an end at 0 all, neither what was meant."""
    if bound.kind is not BoundKind.SEQUENCE:
        return
    if metadata.format_version == 1:
        raise InvalidRangeError(f"{bound}: table {metadata.location} is format version 1, "
                                "whose commits carry no sequence numbers (all are 0); give "
                                "the range by snapshot id, time or ref")
    current = metadata.current_snapshot
    head = current.sequence_number if current is not None else 0
    if int(bound.value) > head:
        raise InvalidRangeError(f"{bound} is beyond the table's head (sequence number "
                                f"{head}, snapshot "
                                f"{current.snapshot_id if current else None})")


def _resolve_start(metadata: TableMetadata, bound: RangeBound | None,
                   lineage: list[Snapshot]) -> int | None:
    """The last snapshot before the range (None: the range starts at the beginning).

    An exclusive snapshot id is taken as given, even expired: a range after the parent of
    the oldest retained snapshot is still whole."""
    if bound is None:
        return None
    if bound.kind is BoundKind.SNAPSHOT and not bound.inclusive:
        return int(bound.value)
    if bound.kind.names_a_snapshot:
        named = _named_snapshot(metadata, bound)
        return named.parent_id if bound.inclusive else named.snapshot_id
    # an inclusive start also reads the commit at its value: the point is strictly before it
    limit = int(bound.value) - 1 if bound.inclusive else int(bound.value)
    found = _at_or_before(lineage, bound.kind, limit)
    return found.snapshot_id if found is not None else None


def _check_start_before_end(start: RangeBound, end: RangeBound | None,
                            last: Snapshot) -> None:
    """Refuse a start by time or sequence number later than an explicit end: against the
    end's own value when it is of the same kind, else against the end snapshot's; a start
    by snapshot or ref after the end is refused by the ancestor check."""
    if end is None or start.kind.names_a_snapshot:
        return
    if end.kind is start.kind:
        limit, what = int(end.value), str(end)
    else:
        limit = _position(last, start.kind)
        where = _describe_position(limit, start.kind)
        if start.kind is BoundKind.TIMESTAMP:
            where = f"committed at {where}"
        if not end.kind.names_a_snapshot:
            where = f"snapshot {last.snapshot_id}, {where}"
        what = f"{end} ({where})"
    if int(start.value) > limit:
        raise InvalidRangeError(f"{start} is later than {what}: the range's start must not "
                                "be after its end")


@dataclass(frozen=True)
class _RangeRefusals:
    """The lineage walk's refusals (`meltwater.planner.table.lineage`), naming the range's start
    as the caller gave it and how its user asks to skip expired history."""

    metadata: TableMetadata
    request: RangeRequest
    start: int | None  # the snapshot the start bound resolved to
    end: Snapshot

    def not_an_ancestor(self) -> MeltwaterError:
        assert self.request.start is not None  # a start id comes from a bound
        return _not_an_ancestor(self.metadata, self.request.start, self.end)

    def not_on_lineage(self) -> MeltwaterError:
        bound = self.request.start
        assert bound is not None
        if bound.inclusive:  # its snapshot exists, with a parent off the lineage
            return _not_an_ancestor(self.metadata, bound, self.end)
        return NoSuchSnapshotError(f"{bound} is not a snapshot of table "
                                   f"{self.metadata.location} (expired or never committed)")

    def expired(self, oldest: Snapshot) -> MeltwaterError:
        request, start = self.request, self.start
        parent = oldest.parent_id
        named = f"{request.start}: " if request.start is not None else ""
        skip = (f", or give {request.skip_option} to skip the expired snapshots with a "
                "warning" if request.skip_option else "")
        if start is not None:
            return ExpiredSnapshotsError(
                f"{named}the snapshots between {start} and {self.end.snapshot_id} have expired "
                f"(the oldest retained ancestor {oldest.snapshot_id} has parent {parent}, "
                f"which is gone); start from {oldest.snapshot_id}{skip}")
        return ExpiredSnapshotsError(
            f"{named}the history before snapshot {oldest.snapshot_id} has expired (its parent "
            f"{parent} is gone); start from {oldest.snapshot_id}"
            f"{skip or ' or opt in to skipping expired snapshots'}")

__all__ = ["BoundKind", "ChangeRange", "RangeBound", "RangeRequest", "given_bounds",
           "resolve_range", "resolve_start"]
