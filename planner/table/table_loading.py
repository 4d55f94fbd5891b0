"""Loading a table: finding its current metadata file and reading it, by location or catalog.

A table is a pointer to one immutable `*.metadata.json` (`meltwater.planner.table.metadata` parses
it). A table directory's current one is found as Iceberg Java's Hadoop tables find it (the
version hint, then forward while a newer version exists); a catalog table's is the answer
to one `loadTable`, which also carries the FileIO properties (vended credentials among
them) that read the table's files. A `Table` is the parsed metadata with that FileIO.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
from dataclasses import dataclass

from meltwater.planner.errors import (
    CorruptMetadataError,
    MetadataInFlightError,
    NoSuchFileError,
    NoSuchSnapshotError,
    NoSuchTableError,
    StorageError,
)
from meltwater.planner.table.catalogs import load_catalog_table
from meltwater.planner.table.fileio import FileIO, PyArrowFileIO, shared_file_io
from meltwater.planner.table.metadata import Snapshot, TableMetadata, parse_metadata
from meltwater.planner.table.table_source import TableSource, parse_table_source

_COMMITTED = re.compile(r"^(?:v(\d+)|(\d+)-(.+?))(?:\.gz)?\.metadata\.json$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                   re.IGNORECASE)


def metadata_file_version(name: str) -> int | None:
    """The version of a committed metadata file: 12 for `v12.metadata.json` (Hadoop tables)
    or `00012-<uuid>.metadata.json` (other catalogs), either also `.gz.metadata.json`.

    None for any other name, in particular for the `<uuid>.metadata.json` a Hadoop table
    writes before renaming it to `v<N>.metadata.json`: that file may be half written, and a
    uuid whose first group is all digits would otherwise pass for a huge version number.
    """
    match = _COMMITTED.match(name)
    if match is None:
        return None
    if match.group(1) is not None:
        return int(match.group(1))
    if _UUID.match(f"{match.group(2)}-{match.group(3)}"):
        return None  # a bare uuid: a writer's temporary file
    return int(match.group(2))


def _versioned_file(metadata_dir: str, version: int, io: FileIO) -> str | None:
    """`v<version>.metadata.json` (or its gzip twin) if it exists."""
    for name in (f"v{version}.metadata.json", f"v{version}.gz.metadata.json"):
        if io.exists(f"{metadata_dir}/{name}"):
            return f"{metadata_dir}/{name}"
    return None


def _hinted_version(metadata_dir: str, io: FileIO) -> int | None:
    """The version `version-hint.text` names; None when it is missing or not a number."""
    hint = metadata_dir + "/version-hint.text"
    if not io.exists(hint):
        return None
    text = ""
    # deleted in between: Iceberg deletes the hint, then renames the new one in place
    with contextlib.suppress(NoSuchFileError):
        text = io.read_bytes(hint).decode("utf-8", "replace").strip()
    return int(text) if text.isdigit() else None


def _newest_listed(location: str, metadata_dir: str, io: FileIO) -> str:
    try:
        names = io.list_dir(metadata_dir)
    except (FileNotFoundError, NotADirectoryError, OSError):
        names = []
    versions = {p: metadata_file_version(p.rsplit("/", 1)[-1]) for p in names}
    committed = [p for p, version in versions.items() if version is not None]
    if not committed:
        raise NoSuchTableError(f"{location}: not an Iceberg table (no metadata/*.metadata.json)")
    return max(committed, key=lambda p: (versions[p], p))


def find_metadata_location(location: str, io: FileIO) -> str:
    """The current metadata file of a table directory, found as Iceberg Java's
    `HadoopTableOperations` finds it: from the version `version-hint.text` names (else,
    with no readable hint, the newest committed `*.metadata.json` listed, never a writer's
    temporary file, see `metadata_file_version`), then forward while `v<N+1>` exists.

    The hint is only a hint: a writer renames `v<N+1>.metadata.json` in, the commit, and
    then rewrites the hint, so a writer that stopped in between leaves a stale hint and a
    committed newer version. A hint naming a version that does not exist is refused, as
    Java refuses it: the table's history is damaged and any choice would be a guess.
    """
    if location.endswith(".json"):
        return location
    metadata_dir = location.rstrip("/") + "/metadata"
    version = _hinted_version(metadata_dir, io)
    if version is None:
        found = _newest_listed(location, metadata_dir, io)
        version = metadata_file_version(found.rsplit("/", 1)[-1])
        if not found.rsplit("/", 1)[-1].startswith("v"):
            return found  # another catalog's <NNNNN>-<uuid> names: no v<N+1> to walk to
    else:
        hinted = _versioned_file(metadata_dir, version, io)
        if hinted is None:
            raise CorruptMetadataError(f"{metadata_dir}/version-hint.text names version "
                                  f"{version}, but v{version}.metadata.json is missing")
        found = hinted
    assert version is not None
    while (newer := _versioned_file(metadata_dir, version + 1, io)) is not None:
        found, version = newer, version + 1
    return found


def read_metadata(metadata_location: str, io: FileIO) -> TableMetadata:
    """Parse the metadata file at `metadata_location` (gzipped or not); NoSuchTableError if
    absent, CorruptMetadataError if unreadable."""
    try:
        raw = io.read_bytes(metadata_location)
    except NoSuchFileError:
        raise NoSuchTableError(f"{metadata_location}: metadata file not found") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise CorruptMetadataError(f"{metadata_location}: corrupt gzip ({error})") from error
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptMetadataError(f"{metadata_location}: not valid JSON ({error})") from error
    return parse_metadata(obj, metadata_location)


def resolve_snapshot(table: Table, snapshot_id: int | None = None, ref: str | None = None,
                     as_of_ms: int | None = None) -> Snapshot | None:
    """The snapshot a read targets; at most one of id, ref and time may be given."""
    chosen = [name for name, value in (("snapshot id", snapshot_id), ("ref", ref),
                                       ("timestamp", as_of_ms)) if value is not None]
    if len(chosen) > 1:
        raise NoSuchSnapshotError(f"choose one of snapshot id, ref and timestamp, not "
                               f"{' and '.join(chosen)}")
    metadata = table.metadata
    if snapshot_id is not None:
        return metadata.snapshot(snapshot_id)
    if ref is not None:
        return metadata.snapshot_for_ref(ref)
    if as_of_ms is not None:
        return metadata.snapshot_as_of(as_of_ms)
    return metadata.current_snapshot


@dataclass
class Table:
    """A loaded table: its metadata, where it came from, and the FileIO to read it."""

    metadata_location: str
    metadata: TableMetadata
    io: FileIO
    source: TableSource | None = None  # how it was named; None: from its location

    @property
    def location(self) -> str:
        """The table's base location, from its metadata."""
        return self.metadata.location

    @property
    def name(self) -> str:
        """What the user called the table: its catalog identifier, else its location."""
        return str(self.source) if self.source is not None else self.location

    @property
    def io_properties(self) -> dict[str, str]:
        """The FileIO properties reading this table's files takes (endpoint, credentials),
        for executors to build their own FileIO with."""
        return dict(self.io.properties)

@dataclass(frozen=True, repr=False)
class LocatedTable:
    """Where a table's current metadata is, and the FileIO that reads the table."""

    metadata_location: str
    io: FileIO


def locate_table(source: TableSource, io: FileIO | None = None) -> LocatedTable:
    """A table's current metadata file: one `loadTable` for a catalog table (whose answer
    also carries the FileIO properties, vended credentials among them, so the FileIO is
    the one for those properties), else the walk of its metadata directory. `io`, when
    given, is used for a location; a catalog table's FileIO always follows its catalog."""
    if source.identifier is not None:
        ident = source.identifier
        found = load_catalog_table(ident.catalog, ident.in_catalog, source.catalog_properties,
                                   table_name=str(ident))
        return LocatedTable(found.metadata_location,
                            shared_file_io({**found.io_properties, **source.io_properties}))
    assert source.location is not None
    io = io or PyArrowFileIO(source.io_properties)  # a location reads the environment
    return LocatedTable(find_metadata_location(source.location, io), io)


def _read_located(located: LocatedTable, pinned: bool) -> TableMetadata:
    """`read_metadata` of a located table. The newest of a directory's catalog-named
    metadata files (`<NNNNN>-<uuid>`, written in place, no rename) that does not parse may
    be one its catalog is still writing: MetadataInFlightError, which a service retries;
    a file a catalog or the caller named (`pinned`) is read as it is."""
    try:
        return read_metadata(located.metadata_location, located.io)
    except CorruptMetadataError as error:
        name = located.metadata_location.rsplit("/", 1)[-1]
        if pinned or name.startswith("v") or metadata_file_version(name) is None:
            raise
        raise MetadataInFlightError(
            f"{error}; the newest metadata file of a table read by its location may still "
            "be being written by its catalog: try again, or name the table through its "
            "catalog") from error


def load_table(table: str | TableSource, io: FileIO | None = None, *,
               metadata_location: str | None = None) -> Table:
    """Load a table named by location (a directory or a `*.metadata.json` file, any
    `pyarrow.fs` URI) or by catalog identifier (`catalog.namespace.table`; see
    `meltwater.planner.table.table_source` for how a text is read).

    `metadata_location` pins the metadata file to read (one a reader resolved before,
    so that it plans against the table it described); the FileIO is still the table's
    current one, so a catalog table's credentials are fresh."""
    source = table if isinstance(table, TableSource) else parse_table_source(table)
    try:
        if metadata_location is not None and source.identifier is None:
            located = LocatedTable(metadata_location, io or PyArrowFileIO(source.io_properties))
        else:
            located = locate_table(source, io)
        if metadata_location is not None:
            located = LocatedTable(metadata_location, located.io)
        named = (source.identifier is not None or metadata_location is not None
                 or str(source.location).endswith(".json"))
        metadata = _read_located(located, pinned=named)
    except StorageError as error:
        if source.identifier is None:
            raise
        raise StorageError(f"table {source}: {error}") from error
    return Table(located.metadata_location, metadata, located.io,
                 source if source.identifier is not None or source.io_properties else None)
