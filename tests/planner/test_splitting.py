"""A table's `read.split.*` properties, read one way for snapshot scans and streams."""

from __future__ import annotations

from meltwater.planner.splitting import (
    DEFAULT_LOOKBACK,
    DEFAULT_OPEN_FILE_COST,
    DEFAULT_TARGET_SIZE,
    SplitOptions,
)


def test_split_options_come_from_the_table_properties():
    assert SplitOptions.of_table({}) == SplitOptions(DEFAULT_TARGET_SIZE, DEFAULT_LOOKBACK,
                                                     DEFAULT_OPEN_FILE_COST)
    given = SplitOptions.of_table({"read.split.target-size": "1048576",
                                   "read.split.planning-lookback": "3",
                                   "read.split.open-file-cost": " 1024 "})
    assert given == SplitOptions(1_048_576, 3, 1024)


def test_a_property_that_is_not_a_positive_whole_number_is_ignored():
    for bad in ("0", "-5", "12MB", "1.5", ""):
        options = SplitOptions.of_table({"read.split.target-size": bad,
                                         "read.split.open-file-cost": bad})
        assert options == SplitOptions(), bad
