"""Errors the engine raises while reading data and delete files.

Each names the file and the problem in one line (see `meltwater.planner.errors`), so a
corrupt delete file stops a scan with a message an operator can act on instead of a
traceback from deep inside pyarrow or pyroaring.
"""

from __future__ import annotations

from meltwater.planner.errors import MeltwaterError


class UnreadableFile(MeltwaterError):
    """A data or delete file cannot be read as the format its manifest entry claims."""


class CorruptDeleteFile(UnreadableFile):
    """A delete file (position, equality or deletion vector) is truncated or malformed."""


class UnsupportedFeature(MeltwaterError):
    """The table uses something this engine cannot read yet; never skipped silently."""
