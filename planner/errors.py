"""The planner's errors, and `MeltwaterError`, the base of every error meltwater raises.

Every error carries one line that names the thing (a file, a snapshot id, an option) and
the problem, so the CLI can print it as-is and exit with status 2 instead of a traceback.

`retryable` says whether the same work, tried again unchanged, may succeed: true of a
store, catalog or database that did not answer, false of bad input, which stays bad. The
service (`meltwater.service.failures`) restarts a pipeline only after a retryable failure.
"""

import re

# scheme://user:PASSWORD@host: the password runs to the netloc's last "@", as urlsplit reads it
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^\s/]+@")


class MeltwaterError(Exception):
    """Base of all errors meltwater raises on bad input or an unreadable table."""

    exit_code = 2
    retryable = False  # whether trying again unchanged may succeed (see the module doc)


def redact_url(text: str) -> str:
    """`text` with the password of every URL in it replaced by `***`, for messages
    (`postgresql://app:secret@db/x` -> `postgresql://app:***@db/x`)."""
    return _URL_PASSWORD.sub(r"\1***@", text)


class StreamError(MeltwaterError):
    """A change stream cannot go on (and says what to do about it)."""


class OffsetError(StreamError):
    """A checkpointed offset this version of meltwater does not understand."""


class NoSuchFileError(MeltwaterError):
    """A file the table's metadata refers to does not exist."""


class InvalidRangeError(MeltwaterError):
    """A change range whose ends do not form a valid (from, to] along one lineage."""


class ExpiredSnapshotsError(InvalidRangeError):
    """Part of the range's history has expired and can no longer be read."""


class NoSuchTableError(MeltwaterError):
    """No Iceberg table at the given location."""


class CorruptMetadataError(MeltwaterError):
    """A metadata, manifest list or manifest file cannot be parsed."""


class MetadataInFlightError(CorruptMetadataError):
    """The newest metadata file of a table named by its location, in a catalog's
    `<NNNNN>-<uuid>.metadata.json` naming, does not parse: a catalog writes that file in
    place, so it may still be being written. Retryable: read again, it is most likely whole
    (a file that stays broken keeps failing, and says so each time)."""

    retryable = True


class UnsupportedFeatureError(MeltwaterError):
    """The table uses something meltwater does not read (yet); never silently skipped."""


class NoSuchSnapshotError(MeltwaterError):
    """A snapshot id, ref or timestamp names no snapshot of the table."""


class FilterError(MeltwaterError):
    """A filter cannot be parsed or bound (unknown column, literal of the wrong type, ...)."""


class SchemaError(MeltwaterError):
    """A schema, type or column reference is invalid."""


class CorruptAvroError(MeltwaterError):
    """The bytes are not a readable Avro object container file (the manifest readers add
    which file)."""


class CatalogError(MeltwaterError):
    """A catalog cannot be used: not configured, misconfigured, unreachable, or refusing
    access; the message names the catalog (and the table, where one was asked for).
    Retryable: a catalog that answered once (the service checks each before it starts)
    and fails later is most likely down for a while."""

    retryable = True


class StorageError(MeltwaterError):
    """The storage holding a table's files refused or could not be reached (access denied,
    expired credentials, a bucket that does not exist, an endpoint that does not answer).
    Retryable, as `CatalogError`: credentials are renewed and endpoints come back."""

    retryable = True
