"""Change-range bounds and their one resolver, on tables written by Iceberg Java.

`mor_partitioned` has ten snapshots on main, a branch `audit` of two more off snapshot 6
and a tag `before_branch` on it; `maintenance` kept only its last four snapshots. Every
refusal must name the option the caller gave, whatever the caller calls it.
"""

from __future__ import annotations

import re

import pytest

from meltwater.planner.changes.change_range import (
    BoundKind,
    RangeBound,
    RangeRequest,
    given_bounds,
    resolve_range,
    resolve_start,
)
from meltwater.planner.errors import (
    ExpiredSnapshotsError,
    InvalidRangeError,
    NoSuchSnapshotError,
)
from meltwater.planner.table.table_loading import Table, load_table

SNAPSHOT, SEQUENCE, TIMESTAMP, REF = (BoundKind.SNAPSHOT, BoundKind.SEQUENCE,
                                      BoundKind.TIMESTAMP, BoundKind.REF)


def after(kind: BoundKind, value, option: str = "from") -> RangeBound:
    return RangeBound.after(kind, value, option)


def at(kind: BoundKind, value, option: str = "to") -> RangeBound:
    return RangeBound.at(kind, value, option)


def ids(table: Table, request: RangeRequest) -> list[int]:
    return [s.snapshot_id for s in resolve_range(table, request).commits]


@pytest.fixture(scope="module")
def mor(corpus):
    """The table, its main lineage oldest first, and the audit branch's snapshots."""
    scenario = corpus.scenarios["mor_partitioned"]
    table = load_table(scenario.location)
    main = list(reversed(table.metadata.ancestors(table.metadata.current_snapshot_id)))
    on_main = {s.snapshot_id for s in main}
    audit = [s for s in scenario.snapshots if s.snapshot_id not in on_main]
    assert len(main) == 8 and len(audit) == 2
    return table, main, audit


@pytest.fixture(scope="module")
def maintenance(corpus):
    """The table, its retained lineage oldest first, and its expired snapshots."""
    scenario = corpus.scenarios["maintenance"]
    table = load_table(scenario.location)
    retained = list(reversed(table.metadata.ancestors(table.metadata.current_snapshot_id)))
    expired = [s.snapshot_id for s in scenario.snapshots if s.expired]
    assert retained[0].parent_id == expired[-1] and len(expired) > 3
    return table, retained, expired


# -- each kind of bound -----------------------------------------------------------------------


def test_no_bounds_is_the_whole_history_up_to_the_current_snapshot(mor):
    table, main, _ = mor
    changes = resolve_range(table, RangeRequest())
    assert changes.from_snapshot_id is None
    assert changes.to_snapshot_id == main[-1].snapshot_id
    assert [s.snapshot_id for s in changes.commits] == [s.snapshot_id for s in main]
    assert changes.expired_skipped == ()


@pytest.mark.parametrize("kind", [SNAPSHOT, SEQUENCE, TIMESTAMP])
def test_each_kind_of_start_is_exclusive_and_each_end_inclusive(mor, kind):
    table, main, _ = mor
    first, last = main[2], main[5]

    def value(snapshot):
        return {SNAPSHOT: snapshot.snapshot_id, SEQUENCE: snapshot.sequence_number,
                TIMESTAMP: snapshot.timestamp_ms}[kind]

    request = RangeRequest(after(kind, value(first)), at(kind, value(last)))
    changes = resolve_range(table, request)
    assert ids(table, request) == [s.snapshot_id for s in main[3:6]]
    assert (changes.from_snapshot_id, changes.to_snapshot_id) == (first.snapshot_id,
                                                                  last.snapshot_id)


def test_a_time_or_sequence_number_between_commits_means_the_commit_before(mor):
    table, main, _ = mor
    between = main[3].timestamp_ms + 1  # after commit 3, before commit 4
    assert main[4].timestamp_ms > between
    assert ids(table, RangeRequest(after(TIMESTAMP, between))) == [
        s.snapshot_id for s in main[4:]]
    assert resolve_range(table, RangeRequest(end=at(TIMESTAMP, between))).to_snapshot_id == (
        main[3].snapshot_id)
    # main skips the audit branch's sequence numbers: one of them is "the commit before"
    audit_sequence = main[5].sequence_number + 1
    assert main[6].sequence_number > audit_sequence
    request = RangeRequest(after(SEQUENCE, audit_sequence), at(SEQUENCE, audit_sequence))
    assert resolve_range(table, request).commits == ()


def test_refs_name_the_snapshot_they_point_at(mor):
    table, main, audit = mor
    tag = table.metadata.refs["before_branch"].snapshot_id
    assert tag == main[5].snapshot_id
    assert ids(table, RangeRequest(after(REF, "before_branch"))) == [
        s.snapshot_id for s in main[6:]]
    assert ids(table, RangeRequest(after(REF, "before_branch"), at(REF, "audit"))) == [
        s.snapshot_id for s in audit]
    assert ids(table, RangeRequest(end=at(REF, "main"))) == [s.snapshot_id for s in main]


@pytest.mark.parametrize("kind", [SNAPSHOT, SEQUENCE, TIMESTAMP, REF])
def test_an_inclusive_start_also_reads_its_own_commit(mor, kind):
    """Spark/Delta's startingVersion/startingTimestamp: the start's own commit is in."""
    table, main, _ = mor
    start = main[5]  # the tag before_branch
    value = {SNAPSHOT: start.snapshot_id, SEQUENCE: start.sequence_number,
             TIMESTAMP: start.timestamp_ms, REF: "before_branch"}[kind]
    inclusive = resolve_range(table, RangeRequest(at(kind, value, "startingVersion")))
    assert inclusive.from_snapshot_id == main[4].snapshot_id
    assert [s.snapshot_id for s in inclusive.commits] == [s.snapshot_id for s in main[5:]]
    exclusive = resolve_range(table, RangeRequest(after(kind, value)))
    assert exclusive.commits == inclusive.commits[1:]


def test_an_inclusive_start_at_the_first_snapshot_is_the_whole_history(mor):
    table, main, _ = mor
    changes = resolve_range(table, RangeRequest(at(SNAPSHOT, main[0].snapshot_id)))
    assert changes.from_snapshot_id is None and len(changes.commits) == len(main)
    before_everything = RangeRequest(at(TIMESTAMP, main[0].timestamp_ms))
    assert len(resolve_range(table, before_everything).commits) == len(main)


def test_a_start_at_or_after_the_head_without_an_end_is_empty(mor):
    """Nothing since: the head itself as the start, or a time after its commit (Iceberg
    Java's changelog scan is empty for a start-timestamp after the current snapshot's)."""
    table, main, _ = mor
    head = main[-1]
    for request in (RangeRequest(after(TIMESTAMP, head.timestamp_ms + 1)),
                    RangeRequest(after(SEQUENCE, head.sequence_number)),
                    RangeRequest(after(SNAPSHOT, head.snapshot_id)),
                    RangeRequest.empty_at(head.snapshot_id)):
        changes = resolve_range(table, request)
        assert changes.commits == () and changes.to_snapshot_id == head.snapshot_id


def test_a_start_sequence_number_beyond_the_head_is_refused_as_an_end_is(mor, corpus):
    """A sequence number beyond the head's names no commit: refused, not read as an empty
    range that would pass for "nothing since"; with or without an end, on an empty table
    too, and as a stream's start."""
    table, main, _ = mor
    head = main[-1]
    beyond = head.sequence_number + 1
    message = (f"^--from-sequence {beyond} is beyond the table's head \\(sequence number "
               f"{head.sequence_number}, snapshot {head.snapshot_id}\\)$")
    for request in (RangeRequest(after(SEQUENCE, beyond, "--from-sequence")),
                    RangeRequest(after(SEQUENCE, beyond, "--from-sequence"),
                                 at(SNAPSHOT, head.snapshot_id))):
        with pytest.raises(InvalidRangeError, match=message):
            resolve_range(table, request)
    with pytest.raises(InvalidRangeError, match=r"^start-sequence-number 9999 is beyond"):
        resolve_start(table, after(SEQUENCE, 9999, "start-sequence-number"))
    empty = load_table(corpus.scenarios["mor_partitioned"].location
                       + "/metadata/v1.metadata.json")
    with pytest.raises(InvalidRangeError, match=r"^from_sequence 1 is beyond the table's head "
                                                r"\(sequence number 0, snapshot None\)$"):
        resolve_range(empty, RangeRequest(after(SEQUENCE, 1, "from_sequence")))


def test_an_empty_table_has_an_empty_range_but_named_starts_must_exist(corpus):
    table = load_table(corpus.scenarios["mor_partitioned"].location
                       + "/metadata/v1.metadata.json")
    assert table.metadata.current_snapshot is None
    assert resolve_range(table, RangeRequest()) == resolve_range(table, RangeRequest(
        after(TIMESTAMP, 5), at(TIMESTAMP, 9)))
    assert resolve_range(table, RangeRequest.empty_at(None)).commits == ()
    assert resolve_start(table, after(TIMESTAMP, 5)) is None
    with pytest.raises(NoSuchSnapshotError, match=r"start-snapshot-id 42: snapshot 42 does not"):
        resolve_start(table, after(SNAPSHOT, 42, "start-snapshot-id"))
    with pytest.raises(InvalidRangeError, match=r"--to-sequence 1 is beyond the table's head "
                                                r"\(sequence number 0, snapshot None\)"):
        resolve_range(table, RangeRequest(end=at(SEQUENCE, 1, "--to-sequence")))


# -- refusals, naming the caller's options ----------------------------------------------------


def test_a_start_later_than_an_explicit_end_is_refused(mor):
    table, main, _ = mor
    early, late = main[1], main[4]

    def refused(start: RangeBound, end: RangeBound, message: str) -> None:
        with pytest.raises(InvalidRangeError, match=message):
            resolve_range(table, RangeRequest(start, end))

    refused(after(TIMESTAMP, late.timestamp_ms, "--from-timestamp"),
            at(TIMESTAMP, early.timestamp_ms, "--to-timestamp"),
            f"^--from-timestamp {late.timestamp_ms} is later than --to-timestamp "
            f"{early.timestamp_ms}: the range's start must not be after its end$")
    refused(at(TIMESTAMP, late.timestamp_ms, "startingTimestamp"),
            at(TIMESTAMP, early.timestamp_ms, "endingTimestamp"),
            f"startingTimestamp {late.timestamp_ms} is later than endingTimestamp")
    refused(after(SEQUENCE, late.sequence_number, "start-sequence-number"),
            at(SNAPSHOT, early.snapshot_id, "end-snapshot-id"),
            f"start-sequence-number {late.sequence_number} is later than end-snapshot-id "
            rf"{early.snapshot_id} \(sequence number {early.sequence_number}\)")
    refused(after(TIMESTAMP, main[-1].timestamp_ms, "--from-timestamp"),
            at(REF, "before_branch", "--to-ref"),
            r"is later than --to-ref 'before_branch' \(committed at")
    # against an end of the other kind, by the end snapshot's value
    refused(after(SEQUENCE, late.sequence_number, "from_sequence"),
            at(TIMESTAMP, early.timestamp_ms, "to_timestamp_ms"),
            f"from_sequence {late.sequence_number} is later than to_timestamp_ms "
            rf"{early.timestamp_ms} \(snapshot {early.snapshot_id}, sequence number "
            rf"{early.sequence_number}\)")
    # an inclusive start at the end, or an exclusive one at it (empty), is no mistake
    same = at(TIMESTAMP, early.timestamp_ms)
    assert ids(table, RangeRequest(at(TIMESTAMP, early.timestamp_ms), same)) == [
        early.snapshot_id]
    assert ids(table, RangeRequest(after(TIMESTAMP, early.timestamp_ms), same)) == []


def test_an_end_beyond_the_head_or_before_the_first_commit_is_refused(mor):
    table, main, _ = mor
    head = main[-1]
    with pytest.raises(InvalidRangeError, match=f"^endingSequence {head.sequence_number + 1} "
                                                "is beyond the table's head"):
        resolve_range(table, RangeRequest(end=at(SEQUENCE, head.sequence_number + 1,
                                                 "endingSequence")))
    with pytest.raises(NoSuchSnapshotError, match=r"^--to-sequence 0: no snapshot at or before "
                                                  r"sequence number 0$"):
        resolve_range(table, RangeRequest(end=at(SEQUENCE, 0, "--to-sequence")))
    with pytest.raises(NoSuchSnapshotError, match=r"^to_timestamp_ms 5: no snapshot at or "
                                                  r"before 5 ms$"):
        resolve_range(table, RangeRequest(end=at(TIMESTAMP, 5, "to_timestamp_ms")))


def test_bounds_naming_no_snapshot_are_refused(mor):
    table, _, _ = mor
    with pytest.raises(NoSuchSnapshotError, match=r"^--to-snapshot 42: snapshot 42 does not "
                                                  r"exist in table"):
        resolve_range(table, RangeRequest(end=at(SNAPSHOT, 42, "--to-snapshot")))
    with pytest.raises(NoSuchSnapshotError, match=r"^startingVersion 42: snapshot 42"):
        resolve_range(table, RangeRequest(at(SNAPSHOT, 42, "startingVersion")))
    with pytest.raises(NoSuchSnapshotError, match=r"^--from-ref 'nope': .*no branch or tag "
                                                  r"'nope' \(refs: audit, before_branch, main"):
        resolve_range(table, RangeRequest(after(REF, "nope", "--from-ref")))
    # the whole lineage is retained, so an unknown exclusive start was never on it
    with pytest.raises(NoSuchSnapshotError, match=r"^start-snapshot-id 1 is not a snapshot of "
                                                  r"table .* \(expired or never committed\)$"):
        resolve_range(table, RangeRequest(after(SNAPSHOT, 1, "start-snapshot-id")))


def test_a_start_off_the_end_lineage_is_refused(mor):
    table, main, audit = mor
    head = main[-1].snapshot_id
    with pytest.raises(InvalidRangeError, match=f"^from_snapshot_id {audit[-1].snapshot_id} "
                                                f"is not an ancestor of {head}$"):
        resolve_range(table, RangeRequest(after(SNAPSHOT, audit[-1].snapshot_id,
                                                "from_snapshot_id")))
    with pytest.raises(InvalidRangeError, match=f"^--from-ref 'audit' \\(snapshot "
                                                f"{audit[-1].snapshot_id}\\) is not an "
                                                f"ancestor of {head}$"):
        resolve_range(table, RangeRequest(after(REF, "audit", "--from-ref")))
    # an inclusive start on the branch: its parent is on main, it is not
    with pytest.raises(InvalidRangeError, match=f"^startingVersion {audit[0].snapshot_id} is "
                                                f"not an ancestor of {head}$"):
        resolve_range(table, RangeRequest(at(SNAPSHOT, audit[0].snapshot_id,
                                             "startingVersion")))
    # a start after the end, both by snapshot
    with pytest.raises(InvalidRangeError, match=r"is not an ancestor of "
                                                f"{main[2].snapshot_id}"):
        resolve_range(table, RangeRequest(after(SNAPSHOT, main[4].snapshot_id),
                                          at(SNAPSHOT, main[2].snapshot_id)))


def test_each_end_is_given_once_and_ends_are_inclusive(mor):
    _, main, _ = mor
    starts = {"start-snapshot-id": (SNAPSHOT, main[1].snapshot_id),
              "start-sequence-number": (SEQUENCE, None),
              "start-timestamp": (TIMESTAMP, main[0].timestamp_ms)}
    with pytest.raises(InvalidRangeError, match=r"^give the range's start once, not "
                                                r"start-snapshot-id and start-timestamp$"):
        RangeRequest.of(given_bounds(starts, inclusive=False))
    ends = [at(SNAPSHOT, 1, "end-snapshot-id"), at(SNAPSHOT, 1, "endingVersion")]
    with pytest.raises(InvalidRangeError, match=r"^give the range's end once, not "
                                                r"end-snapshot-id and endingVersion$"):
        RangeRequest.of(end=ends)
    request = RangeRequest.of(given_bounds({"a": (SNAPSHOT, None), "b": (REF, "main")},
                                           inclusive=True), skip_expired=True)
    assert request == RangeRequest(at(REF, "main", "b"), None, True)
    with pytest.raises(InvalidRangeError, match=r"^--to-snapshot 7: a range's end is "
                                                r"inclusive"):
        RangeRequest(end=after(SNAPSHOT, 7, "--to-snapshot"))


def test_bound_values_are_checked_and_shown_as_given():
    with pytest.raises(InvalidRangeError, match=r"^from_snapshot_id '5': expected an integer "
                                                r"\(snapshot id\)$"):
        after(SNAPSHOT, "5", "from_snapshot_id")
    with pytest.raises(InvalidRangeError, match=r"^from_sequence True: expected an integer"):
        after(SEQUENCE, True, "from_sequence")
    with pytest.raises(InvalidRangeError, match=r"^--from-ref 5: expected the name of a "
                                                r"branch or tag$"):
        after(REF, 5, "--from-ref")
    assert str(after(REF, "audit", "--from-ref")) == "--from-ref 'audit'"
    assert str(at(TIMESTAMP, 17, "startingTimestamp")) == "startingTimestamp 17"
    assert at(TIMESTAMP, 17, "x").inclusive and not after(TIMESTAMP, 17, "x").inclusive


# -- expired history --------------------------------------------------------------------------


def test_expired_history_is_refused_naming_the_start_or_skipped_on_request(maintenance):
    table, retained, expired = maintenance
    head = retained[-1].snapshot_id
    oldest = retained[0].snapshot_id
    with pytest.raises(ExpiredSnapshotsError, match=f"^start-snapshot-id {expired[2]}: the "
                                                    f"snapshots between {expired[2]} and "
                                                    f"{head} have expired .* start from "
                                                    f"{oldest}$"):
        resolve_range(table, RangeRequest(after(SNAPSHOT, expired[2], "start-snapshot-id")))
    with pytest.raises(ExpiredSnapshotsError, match=f"^the history before snapshot {oldest} "
                                                    "has expired"):
        resolve_range(table, RangeRequest())
    # a time before the retained history cannot tell what was committed after it
    with pytest.raises(ExpiredSnapshotsError, match=r"^stream-from-timestamp 5: the history "
                                                    f"before snapshot {oldest} has expired"):
        resolve_range(table, RangeRequest(after(TIMESTAMP, 5, "stream-from-timestamp")))
    skipped = resolve_range(table, RangeRequest(after(SNAPSHOT, expired[2]),
                                                skip_expired=True))
    assert skipped.expired_skipped == (expired[-1],)
    assert skipped.from_snapshot_id == expired[2]
    assert [s.snapshot_id for s in skipped.commits] == [s.snapshot_id for s in retained]
    whole = resolve_range(table, RangeRequest(skip_expired=True))
    assert whole.commits == skipped.commits and whole.from_snapshot_id is None


@pytest.mark.parametrize("option", ["--skip-expired", "skip_expired=True",
                                    "skip-expired-snapshots=true"])
def test_expired_history_refusal_names_the_caller_s_way_to_skip_it(maintenance, option):
    table, retained, expired = maintenance
    oldest = retained[0].snapshot_id
    hint = f"start from {oldest}, or give {option} to skip the expired snapshots with a warning$"
    for start in ([], [after(SNAPSHOT, expired[2], "from")]):
        with pytest.raises(ExpiredSnapshotsError, match=re.escape(hint[:-1]) + "$"):
            resolve_range(table, RangeRequest.of(start, skip_option=option))


def test_a_start_right_before_the_retained_history_needs_nothing_expired(maintenance):
    """After the oldest retained snapshot's parent, the range is whole, expired or not."""
    table, retained, expired = maintenance
    changes = resolve_range(table, RangeRequest(after(SNAPSHOT, expired[-1])))
    assert [s.snapshot_id for s in changes.commits] == [s.snapshot_id for s in retained]
    assert changes.expired_skipped == ()
    inclusive = resolve_range(table, RangeRequest(at(SNAPSHOT, retained[0].snapshot_id)))
    assert inclusive.commits == changes.commits
    assert inclusive.from_snapshot_id == expired[-1]


# -- a stream's start: the same resolver ------------------------------------------------------


def test_a_stream_start_resolves_as_the_range_from_it_to_the_head(mor, maintenance):
    table, main, audit = mor
    for bound in (after(SNAPSHOT, main[3].snapshot_id), at(SNAPSHOT, main[4].snapshot_id),
                  after(TIMESTAMP, main[3].timestamp_ms),
                  at(TIMESTAMP, main[4].timestamp_ms), after(SEQUENCE, main[3].sequence_number),
                  after(REF, "before_branch")):
        expected = resolve_range(table, RangeRequest(bound)).from_snapshot_id
        assert resolve_start(table, bound) == expected
    assert resolve_start(table, after(SNAPSHOT, main[3].snapshot_id)) == main[3].snapshot_id
    assert resolve_start(table, at(SNAPSHOT, main[0].snapshot_id)) is None
    with pytest.raises(InvalidRangeError, match=f"^startingVersion {audit[0].snapshot_id} "
                                                "is not an ancestor"):
        resolve_start(table, at(SNAPSHOT, audit[0].snapshot_id, "startingVersion"))
    expired_table, _, expired = maintenance
    with pytest.raises(ExpiredSnapshotsError, match=f"^start-snapshot-id {expired[0]}: "):
        resolve_start(expired_table, after(SNAPSHOT, expired[0], "start-snapshot-id"))
    assert resolve_start(expired_table, after(SNAPSHOT, expired[0]),
                         skip_expired=True) == expired[0]
