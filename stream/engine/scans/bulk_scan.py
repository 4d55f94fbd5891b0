"""The full-scan fast path: many Parquet tasks read by one Arrow dataset scan.

`read_task` reads one file at a time from Python: it opens the file, reads its footer,
iterates its batches and masks them, all under the GIL. For a table of hundreds of small
files that per-task Python work, not decoding, sets the pace (two reader threads measured
no faster than one). Here the tasks whose files can be read alike become fragments of one
`pyarrow.dataset` scan, so Arrow's C++ threads open, read ahead and decode the files while
Python only masks the batches that come out.

What makes it exact, and what sends a task back to `read_task`:

- **Same mapping** (`bulk_groups`). Each file's footer is read once (`physical_schema`) and
  its columns are matched to the projection by field id with `FileProjection`, exactly as
  `read_task` does. Tasks are grouped by the file fields they need (names, types and field
  ids, nested ones included), so one dataset schema fits every fragment of a group and Arrow
  never matches a column by name where the ids would disagree. When those fields *are* the
  projection's (same names, types and ids) the batches are used as they come; otherwise
  `FileProjection.project` reshapes them (renames, added and promoted columns).
- **Row positions.** Position deletes count from the file's first row. `scan_batches`
  tags each batch with its fragment and yields every fragment's batches in order, one
  fragment after the other, so a running count per fragment gives each batch's first file
  position. A split task becomes one fragment per contiguous run of the row groups whose
  first byte lies in its range (as `ParquetSource.batches` selects them), starting at the
  summed row counts of the row groups before it.
- **Deletes and residual.** Position deletes and deletion vectors are applied with
  `DeleteLoader.deletion_mask(...).keep`, equality deletes with the scan's one
  `EqualityLookup` (their key columns read as extra columns where the projection lacks
  them), the residual with `to_arrow_filter`, as in `read_task`.
- **Fallback.** Other formats, files a `FileIO` reads through no filesystem Arrow
  can open, footers that cannot be read, duplicate top-level names: the per-task path,
  which also names the file in its errors. If the Arrow scan fails midway, the tasks not yet
  started are handed to `read_task`, so a broken file still raises its typed one-line error.

Memory stays bounded whatever the consumer's pace. Arrow's scanner does not bound it by
itself: `fragment_readahead` and `batch_readahead` say how many files it decodes at once,
not how many decoded batches it holds, and behind a slower consumer (a Parquet encoder, a
slow pipe) it decoded the whole 5M-row bench table, 225 MB, ahead of it. So a group is
scanned in windows of consecutive pieces of about `WINDOW_BYTES` of Parquet each, every
window a scan of its own, and the next window's scan is opened only when the consumer
takes the first batch of the one before: at most two windows are decoded ahead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.scans.tasks import FileScanTask
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.arrow_filter import field_paths
from meltwater.stream.engine.decode.projection import FileProjection
from meltwater.stream.engine.deletes.equality_lookup import (
    EqualityLookup,
    equality_lookup,
)
from meltwater.stream.engine.deletes.loader import DeleteLoader, DeletionMask
from meltwater.stream.engine.scans.bulk_groups import BulkGroup, Piece, partition, task_key_ids
from meltwater.stream.engine.scans.reader import (
    key_columns,
    read_task,
    residual_filter,
)
from meltwater.stream.errors import UnreadableFileError

FRAGMENT_READAHEAD = 8  # files an Arrow scan opens and decodes at once
BATCH_READAHEAD = 4  # batches per file an Arrow scan reads ahead
# Parquet bytes per Arrow scan of a group (see the module doc): at most two windows are
# decoded ahead of the consumer, each about twice its Parquet size in Arrow memory. Large
# enough that a window keeps Arrow's threads busy while the consumer takes the one before.
WINDOW_BYTES = 16 << 20


@dataclass
class _TaskState:
    """What a task needs to turn its raw batches into output, resolved on first use."""

    plan: FileProjection
    mask: DeletionMask | None
    row_filter: Any  # pyarrow.compute.Expression | None
    equality: EqualityLookup | None = None


def read_chunk(tasks: Sequence[FileScanTask], read_schema: Schema, io: FileIO,
               deletes: DeleteLoader, *, batch_size: int) -> Iterator[pa.RecordBatch]:
    """One reader thread's share of a scan: its footers and position deletes, then its rows.

    Each reader thread owns its tasks from footer to batch, so no thread waits on work
    queued for another. The first data scan is opened before the position delete files
    are read: Arrow decodes the first files on its own threads meanwhile, so the cores do
    not idle while the reader threads take turns on the GIL for the small files.
    """
    groups, rest = partition(tasks, read_schema, io)
    first = None
    if groups:  # on error, read_group opens it again and recovers
        with contextlib.suppress(OSError, pa.ArrowException):
            first = _open_scan(groups[0], batch_size)
    deletes.read_positions([d.file for task in tasks for d in task.deletes if d.is_position])
    for index, group in enumerate(groups):
        yield from read_group(group, read_schema, io, deletes, batch_size=batch_size,
                              scan=first if index == 0 else None)
    for task in rest:
        yield from read_task(task, read_schema, io, batch_size=batch_size, deletes=deletes)


def _open_scan(group: BulkGroup, batch_size: int) -> Iterator[Any]:
    """The group's Arrow scan, tagged batches in dataset order, window after window (see
    the module doc). The first window's scan is opened here, so Arrow starts decoding at
    once; each later one when the consumer takes the first batch of the window before."""
    windows = scan_windows(group.pieces, WINDOW_BYTES)
    return _windowed(group, windows, _window_scan(group, windows[0], batch_size), batch_size)


def scan_windows(pieces: Sequence[Piece], size: int) -> list[list[Piece]]:
    """Consecutive pieces in runs of about `size` bytes: each run closed once it holds
    `size` or more, so a piece larger than that is a window of its own; at least one."""
    windows: list[list[Piece]] = [[]]
    held = 0
    for piece in pieces:
        if windows[-1] and held >= size:
            windows.append([])
            held = 0
        windows[-1].append(piece)
        held += piece.size
    return windows


def _window_scan(group: BulkGroup, pieces: list[Piece], batch_size: int) -> Iterator[Any]:
    import pyarrow.dataset as ds

    dataset = ds.FileSystemDataset([p.fragment for p in pieces], group.schema,
                                   ds.ParquetFileFormat(), group.filesystem)
    scanner = dataset.scanner(columns=group.schema.names, batch_size=batch_size,
                              use_threads=True, fragment_readahead=FRAGMENT_READAHEAD,
                              batch_readahead=BATCH_READAHEAD)
    return scanner.scan_batches()


def _windowed(group: BulkGroup, windows: list[list[Piece]], scan: Iterator[Any],
              batch_size: int) -> Iterator[Any]:
    """The windows' scans one after the other, the first already open as `scan`."""
    for number in range(len(windows)):
        following = None
        last = number + 1 == len(windows)
        for tagged in scan:
            if following is None and not last:
                following = _window_scan(group, windows[number + 1], batch_size)
            yield tagged
        if last:
            return
        scan = following or _window_scan(group, windows[number + 1], batch_size)


def read_group(group: BulkGroup, read_schema: Schema, io: FileIO, deletes: DeleteLoader, *,
               batch_size: int, scan: Iterator[Any] | None = None
               ) -> Iterator[pa.RecordBatch]:
    """The rows of a group's tasks, deletes and residual applied, in `read_schema` columns
    (as `read_task` yields them). Arrow reads the files; Python only masks and filters.
    `scan` is the group's scan if already opened (`_open_scan`)."""
    if not group.pieces:
        return
    output_names = [f.name for f in read_schema.fields]
    # Files read as more than one fragment (splits): only for these do the tags' row
    # groups need looking at to tell fragments apart.
    paths = [p.key[0] for p in group.pieces]
    shared = ({path for path in paths if paths.count(path) > 1}
              if len(set(paths)) < len(paths) else set())
    states: dict[int, _TaskState] = {}
    filters: dict[Any, Any] = {}
    current = -1  # the piece being read
    position = 0  # file position of its next row
    yielded: set[int] = set()  # tasks some of whose rows went out
    try:
        for tagged in scan if scan is not None else _open_scan(group, batch_size):
            fragment = tagged.fragment
            path = fragment.path
            if current < 0 or path != paths[current] or path in shared:
                key = (path, fragment.row_groups[0].id) if path in shared else None
                if (current < 0 or path != paths[current]
                        or (key is not None and key != group.pieces[current].key)):
                    current = _find_piece(group, path, key, current)
                    position = group.pieces[current].first
            piece = group.pieces[current]
            state = states.get(piece.task)
            if state is None:
                state = states[piece.task] = _state(group, piece.task, read_schema, deletes,
                                                    filters)
            batch = tagged.record_batch
            n = batch.num_rows
            first, position = position, position + n
            if n == 0:
                continue
            if group.direct:
                batch = pa.RecordBatch.from_arrays(batch.columns, schema=state.plan.target)
            else:
                batch = state.plan.project(batch)
            keep = state.mask.keep(first, n) if state.mask is not None else None
            if state.equality is not None:
                deleted = state.equality.deleted(batch, piece_file(group, piece),
                                                 group.tasks[piece.task].sequence_number)
                if deleted is not None:
                    keep = pc.invert(deleted) if keep is None else pc.and_not(keep, deleted)
            if keep is not None:
                batch = batch.filter(keep)
            if state.row_filter is not None and batch.num_rows:
                batch = batch.filter(state.row_filter)
            if state.plan.extras:
                batch = batch.select(output_names)
            if batch.num_rows:
                yielded.add(piece.task)
                yield batch
    except (OSError, pa.ArrowException) as error:
        yield from _recover(group, current, yielded, read_schema, io, deletes, batch_size,
                            error)


def _find_piece(group: BulkGroup, path: str, key: tuple[str, int] | None,
                current: int) -> int:
    """The next piece of `path` (with `key`, for a file read as several fragments).

    Fragments come in dataset order, so it lies ahead; pieces skipped on the way yielded no
    batches (an empty file or row group run).
    """
    for index in range(current + 1, len(group.pieces)):
        piece = group.pieces[index]
        if piece.key == key if key is not None else piece.key[0] == path:
            return index
    raise _out_of_order(path)


def _out_of_order(path: str) -> RuntimeError:
    return RuntimeError(f"{path}: Arrow's scan returned a fragment out of order; the bulk "
                        "reader relies on dataset order to count row positions")


def _state(group: BulkGroup, index: int, read_schema: Schema, deletes: DeleteLoader,
           filters: dict[Any, Any]) -> _TaskState:
    """A task's projection, position mask and residual filter, resolved when its first
    batch arrives, on the reader thread that needs them."""
    task = group.tasks[index]
    plan = group.plans[index]
    mask = deletes.deletion_mask([d.file for d in task.deletes if d.is_position],
                                 task.data_file.file_path)
    try:
        key: Any = (task.residual, id(plan))
        if key not in filters:
            filters[key] = residual_filter(task.residual, read_schema, plan)
        row_filter = filters[key]
    except TypeError:  # an unhashable literal: build it for this task only
        row_filter = residual_filter(task.residual, read_schema, plan)
    key_ids = task_key_ids(task)
    equality = None
    if key_ids and task.equality is not None:
        key_types, key_paths = key_columns(plan, key_ids, field_paths(read_schema))
        equality = equality_lookup(task.equality, deletes, key_types, key_paths)
    return _TaskState(plan, mask, row_filter, equality)


def piece_file(group: BulkGroup, piece: Piece) -> DataFile:
    """The data file a piece reads."""
    return group.tasks[piece.task].data_file




def _recover(group: BulkGroup, current: int, yielded: set[int], read_schema: Schema,
             io: FileIO, deletes: DeleteLoader, batch_size: int, error: BaseException
             ) -> Iterator[pa.RecordBatch]:
    """After the Arrow scan failed: read what is left task by task, so a broken file raises
    `read_task`'s typed error naming it, and a failure only the bulk scan hit still returns
    every row.

    A task some of whose rows already went out cannot be read again without repeating
    them: it is only checked (its typed error, if any, is raised first); if it reads fine
    the scan cannot be completed and fails naming it.
    """
    later = sorted({p.task for p in group.pieces[max(current, 0):]})
    partial = [index for index in later if index in yielded]
    for index in partial:
        for _ in read_task(group.tasks[index], read_schema, io, batch_size=batch_size,
                           deletes=deletes):
            pass
    for index in later:
        if index not in yielded:
            yield from read_task(group.tasks[index], read_schema, io, batch_size=batch_size,
                                 deletes=deletes)
    if partial:
        path = group.tasks[partial[0]].data_file.file_path
        raise UnreadableFileError(f"{path}: cannot read Parquet data ({error})") from None
