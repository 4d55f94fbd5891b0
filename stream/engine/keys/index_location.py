"""Where a table's key indexes live: what readers are given, before any index is opened.

Cheap to import (no Arrow, no index code): every `changes` command and every Spark change
partition carries a `TableIndexes`, and most commits (appends, position deletes, deletion
vectors) never open an index; `TableIndexes.index` loads `key_index` when one is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from meltwater.stream.engine.local_cache import cache_root

if TYPE_CHECKING:
    import pyarrow as pa

    from meltwater.planner.table.table_loading import Table
    from meltwater.stream.engine.keys.key_index import KeyIndex


def default_index_root() -> Path:
    """Where key indexes are kept unless a reader is told: $MELTWATER_KEY_INDEX_DIR, else
    `key-index/` under meltwater's cache ($MELTWATER_CACHE, else ~/.cache/meltwater)."""
    given = os.environ.get("MELTWATER_KEY_INDEX_DIR")
    return Path(given) if given else cache_root() / "key-index"


@dataclass(frozen=True)
class TableIndexes:
    """Where one table's key indexes live (picklable: Spark partitions carry it to
    executors, which open the same directory on their machine)."""

    root: Path
    table_uuid: str

    @property
    def pages_directory(self) -> Path:
        """Where readers with these indexes keep the page facts of the data files they read
        (`decode.page_metadata`): one directory under the root, for every table."""
        return self.root / "pages"

    def index(self, field_id: int, key_type: pa.DataType) -> KeyIndex:
        """The process's index of one key field, read as `key_type`."""
        from meltwater.stream.engine.keys.key_index import key_index

        return key_index(self.root, self.table_uuid, field_id, key_type)


def table_indexes(root: str | os.PathLike[str] | None, table: Table) -> TableIndexes | None:
    """Where a reader of `table` keeps its key indexes, given `root`; None without a root,
    or for a table without a uuid (format v1 may have none), which gets no index."""
    uuid = table.metadata.table_uuid
    return TableIndexes(Path(root), uuid) if root and uuid else None
