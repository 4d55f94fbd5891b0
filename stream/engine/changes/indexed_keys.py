"""Finding the rows a commit's equality deletes reach through the table's key index.

Used by `equality_changes` when its reader was given the table's indexes
(`DeleteLoader.key_indexes`) and the commit's changed deletes, and every delete that judges
liveness, key on one field of a type runs can be sorted by (`key_runs.indexable`), read
under that type at the top level of the projection. Then each candidate data file the index
covers gives the positions of the rows holding a changed key by binary search; the files it
does not cover (never seen, or their run damaged) have their key column read as before, and
their runs are added, so the next commit finds them. Anything else (keys on several fields,
a null key, a key a delete holds that the column's type cannot hold) reads key columns as
before: the index only ever narrows where rows are looked for, never decides liveness.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.scans.tasks import DataFileRef
from meltwater.planner.spec.types import Schema
from meltwater.stream.engine.decode.arrow_schema import to_arrow_schema
from meltwater.stream.engine.deletes.equality_keys import EqualityKeySet
from meltwater.stream.engine.deletes.loader import DeleteLoader
from meltwater.stream.engine.keys.key_index import Coverage, KeyIndex
from meltwater.stream.engine.keys.key_runs import indexable, sorted_run

ADD_EVERY_ROWS = 8_000_000  # runs of new files written a segment at a time (12 bytes a row)


@dataclass(frozen=True)
class IndexedKeys:
    """A commit's changed keys, ready to be looked up in the index of their field."""

    index: KeyIndex
    name: str  # the key column's name in the projection
    needles: pa.Array  # the changed keys: distinct, sorted, of the column's type

    @property
    def key_type(self) -> pa.DataType:
        """The key column's type, which the index was built under."""
        return self.needles.type

    def empty_keys(self) -> pa.Table:
        """No rows of the key column: what gives the liveness lookups their key type."""
        return pa.table({self.name: pa.array([], self.key_type)})

    def covering(self, candidates: Sequence[DataFileRef]) -> Coverage:
        """Which candidates the index covers (cheap: each is then searched by `find`)."""
        return self.index.covering([ref.file for ref in candidates])

    def find(self, coverage: Coverage, ref: DataFileRef) -> tuple[pa.Array, pa.Array] | None:
        """(positions, keys) of a covered candidate's rows holding a changed key; None when
        it is not covered after all (a damaged block), so its keys are read instead."""
        if ref.file.file_path not in coverage.runs:
            return None
        return self.index.find(coverage, ref.file, self.needles)

    def keys_at(self, keys: pa.Array) -> pa.Table:
        """Found keys as the key columns of the rows at their positions."""
        return pa.table({self.name: keys})

    def run_of(self, keys: pa.Table) -> pa.RecordBatch:
        """The run of a file whose key columns were read (every row, in position order)."""
        return sorted_run(keys.column(self.name))

    def add(self, runs: dict[str, tuple[DataFileRef, pa.RecordBatch]],
            reached: Sequence[DataFileRef]) -> None:
        """Add the runs of files the index lacked (path -> (file, run)), as one segment
        (failing to write it is said once, not raised: `KeyIndex.add`)."""
        self.index.add({path: (ref.file, run) for path, (ref, run) in runs.items()},
                       used=[ref.file.file_path for ref in reached])


class BackgroundAdds:
    """Runs added to the index on a thread of its own, a segment at a time, so the reading
    threads go on reading key columns while a segment is summed and written (serial, a
    cold build at 200M rows waited 25 times for 96 MB to be written). One add is written
    while the next segment's runs gather: at most two segments' runs in memory."""

    def __init__(self, keys: IndexedKeys) -> None:
        self._keys = keys
        self._pool: ThreadPoolExecutor | None = None
        self._writing: Future[None] | None = None

    def add(self, runs: dict[str, tuple[DataFileRef, pa.RecordBatch]],
            reached: Sequence[DataFileRef]) -> None:
        """Add these runs once the add before them is written."""
        self._wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="meltwater-key-index")
        self._writing = self._pool.submit(self._keys.add, runs, reached)

    def settle(self) -> None:
        """Wait for the last add (its errors are raised here) and let the thread go."""
        try:
            self._wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None

    def _wait(self) -> None:
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()


def indexed_keys(loader: DeleteLoader, projection: Schema, key_ids: Sequence[int],
                 names: dict[int, str], changed: Sequence[EqualityKeySet]
                 ) -> IndexedKeys | None:
    """The commit's changed keys for its index, or None when the index cannot serve the
    commit (see the module doc)."""
    indexes = loader.key_indexes
    if indexes is None or len(key_ids) != 1 or len(changed) != 1:
        return None
    (field_id,) = key_ids
    key_set = changed[0]
    if key_set.field_ids != (field_id,) or not key_set.sorted:
        return None
    if field_id not in {f.field_id for f in projection.fields}:
        return None
    name = names[field_id]
    key_type = to_arrow_schema(projection).field(name).type
    if not indexable(key_type):
        return None
    values = key_set.values[0]  # distinct, sorted, a null last
    if values.null_count:
        return None
    try:
        needles = values.cast(key_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a key the column cannot hold: matched the slow way, as a key set does
    if needles.type != values.type:  # a widening keeps the order; re-sort to be sure
        needles = needles.take(pc.array_sort_indices(needles))
    return IndexedKeys(indexes.index(field_id, key_type), name, needles)
