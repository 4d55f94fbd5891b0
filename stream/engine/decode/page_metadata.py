"""What page reads decoded and checked of a Parquet file's metadata, kept per process and,
where a reader keeps a key index, on disk beside it.

`parquet_pages` decodes a file's footer and OffsetIndexes with thriftpy2's pure-Python
compact protocol, and checks page headers against them: 2.3 s of 7.4 s for one upsert
commit's before-images at 200M rows (an OffsetIndex of 100 pages takes 1.9 ms, a page
header 0.14 ms, all under the GIL). Data files never change, so what was decoded and
found to agree is kept, by the file's path and size, for the last `KEPT_FILES` files: a
reader that comes back to a file (each upsert of a stream or the service reaches the same
older files) decodes no Thrift for it again.

On disk (`persist_under`: the key index's root, so a second `meltwater changes` starts as
warm as a stream): one small JSON file a data file, named by a hash of its path and size,
holding its OffsetIndexes' page locations and which pages' headers agreed, with a CRC-32 of
the content and the CRC-32 of the data file's footer bytes. The footer is still read and
decoded by each process (0.7 ms a file) and must match: a file rewritten in place at the
same size is not taken for the one described. A file that fails any check is ignored and
written again; the OffsetIndex read from it is checked as a decoded one is (its pages must
tile the column chunk).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

KEPT_FILES = 4096  # files whose decoded page metadata a process keeps (a few KiB a column)
FORMAT = 1


class PageLocation(NamedTuple):
    """One page of an OffsetIndex (parquet.thrift's PageLocation, as read back from disk)."""

    offset: int
    compressed_page_size: int
    first_row_index: int


class StoredOffsets:
    """An OffsetIndex read back from disk: its page locations as the Thrift one's, made
    when first asked for (a command reads a few columns of files whose facts hold all)."""

    def __init__(self, raw: list[list[int]]) -> None:
        self.raw = raw  # [offset, compressed size, first row] a page
        self._locations: list[PageLocation] | None = None

    @property
    def page_locations(self) -> list[PageLocation]:
        """The pages, in order."""
        if self._locations is None:
            try:
                self._locations = [PageLocation(int(o), int(s), int(f))
                                   for o, s, f in self.raw]
            except (TypeError, ValueError) as error:  # a page read reads the group whole
                raise ValueError(f"page facts not of page locations: {error}") from error
        return self._locations


@dataclass
class FileFacts:
    """What was decoded and checked of one file's page metadata."""

    footer: Any
    leaves: dict[int, int]  # top-level field index -> leaf index
    offsets: dict[tuple[int, int], Any] = dataclasses.field(default_factory=dict)
    # (group, leaf) -> the pages whose headers agreed with the OffsetIndex
    checked: dict[tuple[int, int], set[int]] = dataclasses.field(default_factory=dict)
    footer_crc: int = 0  # CRC-32 of the footer's bytes: which file these facts are of

    def extent(self) -> int:
        """How much is known (grows when a read decodes or checks more: then it is saved)."""
        return len(self.offsets) + sum(len(pages) for pages in list(self.checked.values()))


_kept: OrderedDict[tuple[str, int], FileFacts] = OrderedDict()
_kept_lock = threading.Lock()
_persisted: Path | None = None
_said_unwritable = False


def facts_of(key: tuple[str, int]) -> FileFacts | None:
    """The facts kept of a file (path, size), if the process kept them."""
    with _kept_lock:
        facts = _kept.get(key)
        if facts is not None:
            _kept.move_to_end(key)
        return facts


def keep(key: tuple[str, int], facts: FileFacts) -> None:
    """Keep a file's facts, forgetting the least recently used beyond `KEPT_FILES`."""
    with _kept_lock:
        _kept[key] = facts
        while len(_kept) > KEPT_FILES:
            _kept.popitem(last=False)


def persist_under(directory: Path | None) -> None:
    """Keep page facts on disk in `directory` from now on in this process (None: not)."""
    global _persisted
    _persisted = directory


def restore(key: tuple[str, int], facts: FileFacts) -> None:
    """Fill a file's freshly read facts (its footer decoded) from disk, where they were
    saved for the same file; anything unreadable or of another file is left out."""
    directory = _persisted
    if directory is None:
        return
    try:
        raw = (directory / _name(key)).read_bytes()
    except OSError:
        return
    try:
        stored_crc, _, content = raw.partition(b"\n")
        if int(stored_crc) != zlib.crc32(content):
            raise ValueError("CRC-32 mismatch")
        data = json.loads(content)
        if data["format"] != FORMAT or data["path"] != key[0] or data["size"] != key[1] \
                or data["footer_crc"] != facts.footer_crc:
            raise ValueError("of another file")
        offsets = {_chunk(name): StoredOffsets(pages)
                   for name, pages in data["offsets"].items()}
        checked = {_chunk(name): {int(p) for p in pages}
                   for name, pages in data["checked"].items()}
    except (ValueError, KeyError, TypeError) as error:
        log.debug("page facts of %s not used: %s", key[0], error)
        return
    facts.offsets.update(offsets)
    for chunk, pages in checked.items():
        facts.checked.setdefault(chunk, set()).update(pages)


def save(key: tuple[str, int], facts: FileFacts) -> None:
    """Write a file's facts to disk (atomically; a directory that cannot be written is
    said once, not raised: it is a cache)."""
    global _said_unwritable
    directory = _persisted
    if directory is None:
        return
    content = json.dumps({
        "format": FORMAT, "path": key[0], "size": key[1], "footer_crc": facts.footer_crc,
        "offsets": {f"{g},{leaf}": _raw(offsets)
                    for (g, leaf), offsets in list(facts.offsets.items())},
        "checked": {f"{g},{leaf}": sorted(pages)
                    for (g, leaf), pages in list(facts.checked.items())}},
        separators=(",", ":")).encode()
    path = directory / _name(key)
    temporary = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(b"%d\n" % zlib.crc32(content) + content)
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if not _said_unwritable:
            _said_unwritable = True
            log.warning("page facts not kept in %s: %s", directory, error)


def _raw(offsets: Any) -> list[list[int]]:
    """An OffsetIndex's pages as saved: as read back, or from the decoded Thrift."""
    if isinstance(offsets, StoredOffsets):
        return offsets.raw
    return [[p.offset, p.compressed_page_size, p.first_row_index]
            for p in offsets.page_locations]


def _name(key: tuple[str, int]) -> str:
    return hashlib.sha256(f"{key[0]}\0{key[1]}".encode()).hexdigest()[:32] + ".json"


def _chunk(name: str) -> tuple[int, int]:
    group, leaf = name.split(",")
    return int(group), int(leaf)
