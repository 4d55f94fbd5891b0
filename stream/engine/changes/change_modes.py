"""The row-level modes a change read takes (Spark options, the Python API, the CLI), and
the scope its caller reads in (`ReadScope`), as enums.

Apart from `change_schema` so that the command line can take its choices from them when it
builds its parser, without loading the planner's schema model.
"""

from __future__ import annotations

import enum

from meltwater.planner.str_enum import StrEnum


class ChangeTypeNames(StrEnum):
    """Which vocabulary `_change_type` speaks (option `change-type-names`)."""

    ICEBERG = "iceberg"  # Iceberg's, and Spark's changelog view's
    DELTA = "delta"  # Delta's change data feed, also Spark 4.2's


class EqualityDeletes(StrEnum):
    """What an equality delete is taken to delete (option `equality-deletes`; see
    `reconstruction`)."""

    RESOLVE = "resolve"  # the live rows its key matches
    TRUST_PAYLOAD = "trust-payload"  # a full-row delete: its own row, as written


class BeforeImages(StrEnum):
    """What a row that left (DELETE, UPDATE_BEFORE) carries (option `before-images`).

    `key` is PostgreSQL's replica identity DEFAULT against FULL: a sink that applies changes
    by key (a mirror, a compacted topic) needs of a departing row only its key, and reading
    it whole costs an upsert commit a decode of every page its old keys sit in."""

    FULL = "full"  # the whole row, as it was
    KEY = "key"  # its identifier columns (and v3's lineage columns); every other one null


class ReadScope(enum.Enum):
    """How many commits a reader looks at, which its caller says (never inferred from
    what the reader's cache happens to hold): it decides how a commit's equality deletes
    are looked up (`equality_changes.EqualityRows.liveness_lookups`).

    A reader of ONE_COMMIT decides the liveness of the rows its changed keys match with
    lookups of those keys only: cheap, and useless to any other commit. A reader of
    COMMITS (a range, or a stream, whose process keeps its loader from micro-batch to
    micro-batch) builds the lookup of every equality delete of the table once and extends
    it by each next commit's deletes.
    """

    ONE_COMMIT = "one-commit"
    COMMITS = "commits"
