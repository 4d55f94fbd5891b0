"""The stream layer's errors: files that cannot be read, options and streams that cannot
go on. All are `MeltwaterError`s (one line, exit status 2). What cannot be written is
`meltwater.output.errors`'s.
"""

from meltwater.planner.errors import MeltwaterError, StreamError


class UnreadableFileError(MeltwaterError):
    """A data or delete file cannot be read as the format its manifest entry claims."""


class CorruptDeleteFileError(UnreadableFileError):
    """A delete file (position, equality or deletion vector) is truncated or malformed."""


class KeyIndexDamagedError(MeltwaterError):
    """A key index's segment is not what its catalog says (missing, truncated, altered). The
    index is a cache: its readers treat what is damaged as absent and rebuild it."""


class ChangeOptionError(MeltwaterError):
    """A change-read option is invalid (unknown value, contradictory choices)."""


class MissingIdentifierColumnError(MeltwaterError):
    """Update pairing needs an identifier column that is not among the selected columns."""


class SchemaChangedError(StreamError):
    """The table's schema changed mid-stream and the stream was asked to stop."""


class WatcherError(MeltwaterError):
    """A watcher is used in a way it does not support (e.g. before `start()`)."""


class OptionError(MeltwaterError):
    """A Spark reader option is unknown in value or contradicts another option."""


class SparkStartError(MeltwaterError):
    """Spark's JVM exited while starting (no Java, a setting the JVM refuses, ...)."""
