"""Errors the sinks raise: one line naming the table, column, batch or URL, and the fix.

They subclass `MeltwaterError`, so the CLI and the service print them as-is. A batch that
fails with one of them leaves the destination as it was: nothing of it is applied.
"""

from __future__ import annotations

from meltwater.planner.errors import MeltwaterError


class SinkError(MeltwaterError):
    """Base of the sink errors. `retryable`: whether trying the batch again may succeed."""

    retryable = False


class InvalidSinkUrl(SinkError):
    """A sink URL is malformed or names a scheme no sink handles."""


class SinkUnavailable(SinkError):
    """The destination cannot be reached or is busy (connection refused or lost, locked)."""

    retryable = True


class MissingKeyColumns(SinkError):
    """A mirror needs key columns: none were given and the table has no identifier fields."""


class InvalidKeyColumn(SinkError):
    """A key column is unknown, nested, or of a type that cannot be a key (float, double)."""


class NullKey(SinkError):
    """A change row has a null in a key column, so it cannot be mirrored by key."""


class DuplicateKey(SinkError):
    """Two live rows share one key: the table breaks the uniqueness the mirror needs."""


class InvalidChanges(SinkError):
    """A change batch lacks a change column or carries an unknown change type."""


class UnsupportedType(SinkError):
    """A column's Iceberg type has no mapping to the destination database."""


class MirrorTableMismatch(SinkError):
    """The mirror table exists with a primary key other than the key columns."""


class BatchMismatch(SinkError):
    """A batch id the ledger already holds arrived with different contents."""


class SchemaChangeNotMirrored(SinkError):
    """An Iceberg schema change the mirror table cannot follow (the database refuses the
    DDL, a name is taken by a column the mirror does not own, a batch lacks a column its
    commit has); the message names the table and the column."""
