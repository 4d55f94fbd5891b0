"""What page reads decoded and checked of a Parquet file's metadata, kept per process.

`parquet_pages` decodes a file's footer and OffsetIndexes with thriftpy2's pure-Python
compact protocol, and checks page headers against them: 2.3 s of 7.4 s for one upsert
commit's before-images at 200M rows. Data files never change, so what was decoded and
found to agree is kept, by the file's path and size, for the last `KEPT_FILES` files: a
reader that comes back to a file (each upsert of a stream or the service reaches the same
older files) decodes no Thrift for it again.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

KEPT_FILES = 4096  # files whose decoded page metadata a process keeps (a few KiB a column)


@dataclass
class FileFacts:
    """What was decoded and checked of one file's page metadata."""

    footer: Any
    leaves: dict[int, int]  # top-level field index -> leaf index
    offsets: dict[tuple[int, int], Any] = dataclasses.field(default_factory=dict)
    # (group, leaf) -> the pages whose headers agreed with the OffsetIndex
    checked: dict[tuple[int, int], set[int]] = dataclasses.field(default_factory=dict)


_kept: OrderedDict[tuple[str, int], FileFacts] = OrderedDict()
_kept_lock = threading.Lock()


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
