"""Errors the sinks raise: one line naming the table, column, batch or URL, and the fix.

They subclass `MeltwaterError`, so the CLI and the service print them as-is. A batch that
fails with one of them leaves the destination as it was: nothing of it is applied.
"""

from __future__ import annotations

from meltwater.planner.errors import MeltwaterError


class SinkError(MeltwaterError):
    """Base of the sink errors. `retryable`: whether trying the batch again may succeed."""

    retryable = False


class InvalidSinkUrlError(SinkError):
    """A sink URL is malformed or names a scheme no sink handles."""


class SinkUnavailableError(SinkError):
    """The destination cannot be reached or is busy (connection refused or lost, locked)."""

    retryable = True


class MissingKeyColumnsError(SinkError):
    """A mirror needs key columns: none were given and the table has no identifier fields."""


class InvalidKeyColumnError(SinkError):
    """A key column is unknown, nested, or of a type that cannot be a key (float, double)."""


class NullKeyError(SinkError):
    """A change row has a null in a key column, so it cannot be mirrored by key."""


class DuplicateKeyError(SinkError):
    """Two live rows share one key: the table breaks the uniqueness the mirror needs."""


class InvalidChangesError(SinkError):
    """A change batch lacks a change column or carries an unknown change type."""


class UnsupportedTypeError(SinkError):
    """A column's Iceberg type has no mapping to the destination database."""


class MirrorTableMismatchError(SinkError):
    """The mirror table exists with a primary key other than the key columns."""


class BatchMismatchError(SinkError):
    """A batch id the ledger already holds arrived with different contents."""


class SchemaChangeNotMirroredError(SinkError):
    """An Iceberg schema change the mirror table cannot follow (the database refuses the
    DDL, a name is taken by a column the mirror does not own, a batch lacks a column its
    commit has); the message names the table and the column."""


class KafkaRefusedError(SinkError):
    """The Kafka broker refused the sink's writes for good: the message names the topic or
    the property and what to change (the pipeline stops; restarting would not help)."""


class MessageTooLargeError(KafkaRefusedError):
    """A change event is larger than the producer's `message.max.bytes` or the broker's
    (or the topic's) `max.message.bytes`; the message names the event and the limit."""


class TopicUnavailableError(KafkaRefusedError):
    """The sink's topic does not exist and may not be created, or may not be written."""


class BrokerAuthenticationError(KafkaRefusedError):
    """The broker refused the client's credentials (SASL) or its TLS handshake failed."""


class ProducerFencedError(KafkaRefusedError):
    """Another producer took over the pipeline's `transactional.id`: another process
    writes this pipeline."""
