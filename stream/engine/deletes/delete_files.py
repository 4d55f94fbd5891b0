"""Delete files read into Arrow: position delete files, deletion vectors, equality keys.

Each function reads one delete file whole and checks it against the spec; the loader
(`meltwater.stream.engine.deletes.loader`) decides when, and keeps what they return.

A deletion-vector blob, as the Puffin spec lays it out::

    [length: u32 big-endian = 4 + len(bitmap)] [magic D1 D3 39 64] [bitmap] [CRC-32: u32 BE]

where the CRC covers magic and bitmap, and the bitmap is a 64-bit Roaring bitmap in the
"portable" serialization (u64 LE count of 32-bit bitmaps, then per bitmap its u32 LE key,
the high 32 bits, followed by a portable 32-bit Roaring bitmap): exactly what CRoaring's
`roaring64_bitmap_portable_deserialize`, i.e. `pyroaring.BitMap64.deserialize`, reads.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.scans.delete_index import referenced_data_file
from meltwater.planner.spec.files import DataFile
from meltwater.planner.spec.reserved_field_ids import DELETE_FILE_PATH_ID, DELETE_POS_ID
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode.arrow_schema import field_id
from meltwater.stream.engine.decode.formats import open_source
from meltwater.stream.engine.decode.projection import FileProjection, has_field_ids
from meltwater.stream.errors import CorruptDeleteFileError, UnreadableFileError

DV_MAGIC = b"\xd1\xd3\x39\x64"
_READ_BATCH = 1 << 20


def sorted_positions(chunks: Sequence[pa.Array]) -> pa.Array:
    """Positions from several arrays as one sorted int64 array, nulls dropped."""
    arrays = [c.cast(pa.int64()) for c in chunks if len(c)]
    if not arrays:
        return pa.array([], pa.int64())
    merged = pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
    if merged.null_count:
        merged = merged.drop_null()
    return pc.take(merged, pc.sort_indices(merged))


def _read_columns(io: FileIO, file: DataFile, field_ids: dict[int, str]) -> pa.Table:
    """Columns of a delete file by field id (any nesting through structs), named by id.

    `field_ids` maps each id to the column name to use when the file has no field ids. A
    file that cannot be read this way is a corrupt delete file.
    """
    try:
        return _read_columns_of(io, file, field_ids)
    except CorruptDeleteFileError:
        raise
    except UnreadableFileError as error:
        raise CorruptDeleteFileError(str(error)) from None


def _read_columns_of(io: FileIO, file: DataFile, field_ids: dict[int, str]) -> pa.Table:
    source = open_source(file.file_path, file.file_format, io)
    projection = FileProjection(source, Schema(()), dict.fromkeys(field_ids), names=field_ids)
    for extra in projection.extras:
        if extra.path is None:
            raise CorruptDeleteFileError(f"{file.file_path}: delete file has no column with "
                                    f"field id {extra.field_id}")
    batches = [projection.project(b)
               for _, b in source.batches(projection.selection, _READ_BATCH)]
    names = [e.name for e in projection.extras]
    if not batches:
        schema = pa.schema([pa.field(str(e.field_id), projection.extra_type(e))
                            for e in projection.extras])
        return schema.empty_table()
    table = pa.Table.from_batches(batches).select(names)
    return table.rename_columns([str(e.field_id) for e in projection.extras])


def read_position_deletes(io: FileIO, file: DataFile) -> dict[str, pa.Array]:
    """Data file path -> sorted deleted positions, for one position delete file."""
    found = _read_parquet_positions(io, file)
    if found is not None:
        return found
    table = _read_columns(io, file, {DELETE_FILE_PATH_ID: "file_path", DELETE_POS_ID: "pos"})
    paths = table.column(str(DELETE_FILE_PATH_ID))
    positions = table.column(str(DELETE_POS_ID))
    if paths.null_count or positions.null_count:
        raise CorruptDeleteFileError(f"{file.file_path}: position delete file has null file_path "
                                "or pos values")
    if table.num_rows == 0:
        return {}
    by_run = _split_sorted_runs(paths.combine_chunks(), positions.combine_chunks())
    if by_run is not None:
        return by_run
    grouped = pa.table({"path": paths, "pos": positions}).group_by(
        "path", use_threads=False).aggregate([("pos", "list")]).combine_chunks()
    lists = grouped.column("pos_list").chunk(0)
    return {path: sorted_positions([lists[i].values])
            for i, path in enumerate(grouped.column("path").to_pylist())}


def _read_parquet_positions(io: FileIO, file: DataFile) -> dict[str, pa.Array] | None:
    """`read_position_deletes` for a Parquet file laid out as the spec says, with as little
    work as possible, or None to leave the file to the general reader.

    A scan reads hundreds of small delete files, so their per-file cost counts: one footer
    read without pre-buffering (a file this small gains nothing from coalesced reads on
    the I/O pool), two top-level columns found by name and checked by field id, no
    projection machinery. A file scoped to one data file by its manifest entry (its
    `referenced_data_file`, or equal `file_path` bounds, which the planner already trusts
    to match it to that one data file) has only `pos` read: half the cost of a file.
    Otherwise `file_path` is read dictionary-encoded, so a file naming one data file
    decodes no strings. Anything unusual, errors included, goes to the general reader,
    which names the file in its errors.
    """
    import pyarrow.parquet as pq

    if file.file_format.upper() != "PARQUET":
        return None
    scoped = referenced_data_file(file)
    try:
        resolved = io.resolve(file.file_path)
        if resolved is None:
            return None
        filesystem, path = resolved
        with filesystem.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=False,
                                     read_dictionary=None if scoped else ["file_path"])
            if not _reserved_ids(parquet.schema_arrow):
                return None
            table = parquet.read(columns=["pos"] if scoped else ["file_path", "pos"],
                                 use_threads=False)
        if table.num_rows == 0:
            return {}
        if scoped is None:
            return _by_data_file(table)
        positions = _int64_positions(table.column("pos"))
        return None if positions is None else {scoped: _ascending(positions)}
    except (OSError, pa.ArrowException, ValueError):
        return None


def _int64_positions(positions: pa.ChunkedArray) -> pa.Array | None:
    """A `pos` column as one int64 array, or None when it has nulls or is not integers."""
    if positions.null_count or not pa.types.is_integer(positions.type):
        return None
    positions = positions.chunk(0) if positions.num_chunks == 1 else positions.combine_chunks()
    return positions if positions.type == pa.int64() else positions.cast(pa.int64())


def _by_data_file(table: pa.Table) -> dict[str, pa.Array] | None:
    """Data file path -> sorted positions, from one delete file's `file_path` (dictionary-
    encoded) and `pos` columns; None when they cannot be used as read."""
    paths = table.column("file_path")
    positions = _int64_positions(table.column("pos"))
    if positions is None or paths.null_count or not pa.types.is_dictionary(paths.type):
        return None
    names = {d.as_py() for chunk in paths.chunks for d in chunk.dictionary}
    if len(names) == 1 and all(len(chunk.dictionary) == 1 for chunk in paths.chunks):
        return {names.pop(): _ascending(positions)}
    decoded = pa.concat_arrays([chunk.dictionary_decode() for chunk in paths.chunks])
    return _split_sorted_runs(decoded, positions)


def _ascending(positions: pa.Array) -> pa.Array:
    """Positions sorted, as the spec requires them to be already (then returned as is)."""
    n = len(positions)
    if n > 1 and not pc.all(pc.greater_equal(positions.slice(1),
                                             positions.slice(0, n - 1))).as_py():
        return sorted_positions([positions])
    return positions


def _reserved_ids(schema: pa.Schema) -> bool:
    """Whether a position delete file's `file_path` and `pos` carry the spec's field ids,
    or the file has no field ids at all (both matched by name, as the general reader
    does)."""
    ids = {name: field_id(schema.field(name)) for name in ("file_path", "pos")
           if schema.get_field_index(name) >= 0}
    if len(ids) != 2:
        return False
    return (ids == {"file_path": DELETE_FILE_PATH_ID, "pos": DELETE_POS_ID}
            or not has_field_ids(schema))


def _split_sorted_runs(paths: pa.Array, positions: pa.Array) -> dict[str, pa.Array] | None:
    """Positions per data file for a file sorted as the spec requires (by path, then pos):
    one run per path, no grouping or sorting needed. None if the file is not so sorted."""
    runs = pc.run_end_encode(paths)
    values, ends = runs.values, runs.run_ends.to_pylist()
    names = values.to_pylist()
    if len(set(names)) != len(names):
        return None  # a path appears in two runs: not sorted by path
    positions = positions.cast(pa.int64())
    result: dict[str, pa.Array] = {}
    start = 0
    for name, end in zip(names, ends, strict=True):
        result[name] = _ascending(positions.slice(start, end - start))
        start = end
    return result


def read_deletion_vector(io: FileIO, file: DataFile) -> pa.Array:
    """The sorted positions of a `deletion-vector-v1` blob, its length and CRC verified."""
    from pyroaring import BitMap64

    where = f"{file.file_path} (DV at offset {file.content_offset})"
    if file.content_offset is None or file.content_size_in_bytes is None:
        raise CorruptDeleteFileError(f"{file.file_path}: deletion vector without content_offset "
                                "and content_size_in_bytes")
    size = file.content_size_in_bytes
    blob = io.read_bytes(file.file_path, file.content_offset, size)
    if len(blob) != size or size < 12:
        raise CorruptDeleteFileError(f"{where}: truncated, {len(blob)} of {size} bytes")
    length = int.from_bytes(blob[:4], "big")
    if length != size - 8:
        raise CorruptDeleteFileError(f"{where}: length prefix {length} does not match blob size "
                                f"{size} (expected {size - 8})")
    if blob[4:8] != DV_MAGIC:
        raise CorruptDeleteFileError(f"{where}: bad magic {blob[4:8].hex()}, expected d1d33964")
    expected_crc = int.from_bytes(blob[4 + length:8 + length], "big")
    if zlib.crc32(blob[4:4 + length]) != expected_crc:
        raise CorruptDeleteFileError(f"{where}: CRC-32 mismatch")
    try:
        bitmap = BitMap64.deserialize(blob[8:4 + length])
    except (ValueError, MemoryError) as error:
        raise CorruptDeleteFileError(f"{where}: invalid Roaring bitmap ({error})") from error
    if file.record_count is not None and len(bitmap) != file.record_count:
        raise CorruptDeleteFileError(f"{where}: {len(bitmap)} positions, manifest says "
                                f"{file.record_count}")
    values = bitmap.to_array()  # array('Q'), sorted and distinct
    if len(values) and values[-1] >= 1 << 63:
        raise CorruptDeleteFileError(f"{where}: position {values[-1]} out of range")
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def read_equality_keys(io: FileIO, file: DataFile) -> pa.Table:
    """The equality keys of one equality delete file, columns named by field id (repeats
    kept: every use of them dedupes, and a backlog's files are read by the hundred)."""
    ids = file.equality_ids or ()
    return _read_columns(io, file, {fid: str(fid) for fid in ids}).combine_chunks()
