"""stream/watch/stream_offsets.py: stream offsets as Spark's offset log stores them, version
1 checkpoints included, refused when this version cannot read them, and the snapshot a
reader that stopped at an offset holds whole."""

from __future__ import annotations

import json

import pytest

from meltwater.planner.errors import OffsetError
from meltwater.stream.watch.stream_offsets import OFFSET_VERSION, StreamOffset

# -- offsets ---------------------------------------------------------------------------------


OFFSETS = [
    StreamOffset(None),  # before the first snapshot
    StreamOffset(None, complete=True),
    StreamOffset(5140426932827412781, 3, False, False, 2),
    StreamOffset(2**63 - 1, 0, True, True, 0),
    StreamOffset(-(2**63), 7, True, False, 11),  # snapshot ids are signed longs
    StreamOffset(42, 2, False, False, 5, version=1),
]


@pytest.mark.parametrize("offset", OFFSETS, ids=repr)
def test_offsets_round_trip_through_json_text(offset):
    """Spark stores an offset as JSON text and compares offsets by it: the text must come
    back as an equal offset, and that offset must write the very same text."""
    text = json.dumps(offset.to_json())
    again = StreamOffset.from_json(json.loads(text))
    assert again == offset
    assert json.dumps(again.to_json()) == text
    assert list(offset.to_json()) == ["version", "snapshot_id", "position", "complete",
                                      "scan_all_files", "ordinal"]


# Offsets as meltwater wrote them while OFFSET_VERSION was 1 (stream/offsets.py before commit
# fb93ca7): the same keys, positions counting tasks in planner order.
VERSION_1 = {
    "mid-commit": '{"version": 1, "snapshot_id": 5342120463833342646, "position": 2, '
                  '"complete": false, "scan_all_files": false, "ordinal": 1}',
    "commit read": '{"version": 1, "snapshot_id": 5342120463833342646, "position": 4, '
                   '"complete": true, "scan_all_files": false, "ordinal": 1}',
    "commit start": '{"version": 1, "snapshot_id": 5342120463833342646, "position": 0, '
                    '"complete": false, "scan_all_files": false, "ordinal": 1}',
    "scan": '{"version": 1, "snapshot_id": 8421478786760426754, "position": 3, '
            '"complete": false, "scan_all_files": true, "ordinal": 0}',
}


@pytest.mark.parametrize("name", VERSION_1)
def test_version_1_offsets_are_read_and_written_back_unchanged(name):
    text = VERSION_1[name]
    offset = StreamOffset.from_json(json.loads(text))
    assert offset.version == 1 and offset.version != OFFSET_VERSION
    assert json.dumps(offset.to_json()) == text  # Spark's offset log compares the text
    # Only a position inside a commit counts tasks in the old order and needs the rest of
    # that commit read as version 1 read it; a commit read whole (or not begun) resumes
    # the same under either version.
    assert offset.legacy == (name in ("mid-commit", "scan"))


@pytest.mark.parametrize(("obj", "message"), [
    ({"version": 3, "snapshot_id": 1, "position": 0, "complete": True, "ordinal": 0},
     r"unknown version 3 .*reads versions 1 and 2.*start a new checkpoint"),
    ({"version": True, "snapshot_id": 1, "position": 0, "complete": True, "ordinal": 0},
     "unknown version True"),  # JSON true is not version 1
    ({"snapshot_id": 1, "position": 0, "complete": True, "ordinal": 0}, "unknown version None"),
    ({"version": 2, "snapshot_id": 1}, "malformed"),
    ({"version": 2, "snapshot_id": "x1", "position": 0, "complete": True, "ordinal": 0},
     "malformed"),
    ({"version": 2, "snapshot_id": 1, "position": -1, "complete": False, "ordinal": 0},
     "negative position"),
    ([2, 1, 0], "expected a JSON object"),
])
def test_offsets_this_version_cannot_read_are_refused(obj, message):
    with pytest.raises(OffsetError, match=message):
        StreamOffset.from_json(obj)


@pytest.mark.parametrize(("offset", "held"), [
    (StreamOffset(7, 4, complete=True, ordinal=2), 7),  # its commit read whole
    (StreamOffset(7, 2, complete=False, ordinal=2), 5),  # in part: the parent, whole
    (StreamOffset(7, 0, complete=False, ordinal=0), 5),  # a stream's start, before 7
    (StreamOffset(7, 9, complete=True, scan_all_files=True, ordinal=0), 7),  # contents, all
    (StreamOffset(7, 3, complete=False, scan_all_files=True, ordinal=0), None),  # some
    (StreamOffset(None, complete=True), None),  # before the first snapshot
])
def test_the_snapshot_an_offset_holds_whole(offset, held):
    assert offset.held_snapshot({7: 5}.get) == held
