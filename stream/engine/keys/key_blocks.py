"""A run cut into blocks of `BLOCK_ROWS` rows, each with its first key (the fence) and a
CRC-32 of its keys and positions: so a lookup reads and checks only the blocks its keys
can be in, not the whole run.

Why blocks: a run on disk is a cache, and a damaged one must never answer (a flipped bit
in a key would hide a row the commit replaced). Checking a whole segment's CRC-32 before
its first lookup reads every byte of the index: 2.3 GB at 200M rows, over a second of a
command that wants a thousand keys, and a cost that grows with the table. With blocks, a
lookup binary-searches the fences (kept beside the run, small, and checked whole), checks
the CRC-32 of the blocks that can hold its keys, and searches only those. What an answer
rests on is checked; what it does not read is not.

Which blocks can hold key x: with fences f (f[k] = key of row k * BLOCK_ROWS, ascending),
l = #{k: f[k] < x} and r = #{k: f[k] <= x}, every row holding x is in blocks
[max(l - 1, 0), r): a block k >= r starts above x, and a block k < l - 1 is followed by
a block starting below x, so it ends below x. Example (BLOCK_ROWS 2): keys [1, 3, 3, 3, 8]
have fences [1, 3, 8]; x = 3 gives l = 1, r = 2: blocks [0, 2), rows 0-3, which hold
every 3.

A block's CRC-32 covers its key bytes (for strings and binaries: the offsets, then the
bytes they delimit) and its positions, as the segment file holds them: sums are taken
from the run read back from the file written, never from the batch in memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import pyarrow as pa

from meltwater.stream.engine.decode.arrow_constants import int64_range

BLOCK_ROWS = 512
FENCE = "fence"
CRC = "crc32"


def blocks_schema(key_type: pa.DataType) -> pa.Schema:
    """The schema of a run's blocks: one row a block."""
    return pa.schema([pa.field(FENCE, key_type, nullable=False),
                      pa.field(CRC, pa.uint32(), nullable=False)])


def block_count(rows: int) -> int:
    """How many blocks a run of `rows` rows has."""
    return -(-rows // BLOCK_ROWS)


def run_blocks(run: pa.RecordBatch) -> pa.RecordBatch:
    """The fences and CRC-32s of a run, as the segment file will hold it: the IPC writer
    writes a fixed-width column's values as they are, and a string or binary column's
    offsets from 0 (which `key_runs` gives every run), so these are the sums of the
    bytes a reader will read back."""
    count = block_count(run.num_rows)
    fences = run.column(0).take(_block_starts(count))
    sums = pa.array(_block_sums(run), pa.uint32())
    return pa.RecordBatch.from_arrays([fences, sums], schema=blocks_schema(run.schema[0].type))


def _block_starts(count: int) -> pa.Array:
    import pyarrow.compute as pc

    return pc.multiply(int64_range(0, count), BLOCK_ROWS)


def _block_sums(run: pa.RecordBatch) -> list[int]:
    """Every block's CRC-32 (`block_crc`'s), in one pass: a build sums every block of
    every run, 390,000 blocks at 200M rows."""
    keys, positions = run.column(0), run.column(1)
    if is_binary_like(keys.type):
        return [block_crc(run, block) for block in range(block_count(run.num_rows))]
    crc32 = zlib.crc32
    width = keys.type.bit_width // 8
    key_view = memoryview(keys.buffers()[1])[keys.offset * width:]
    position_view = memoryview(positions.buffers()[1])[positions.offset * 4:]
    n = run.num_rows
    sums = []
    for block in range(block_count(n)):
        first = block * BLOCK_ROWS
        rows = min(BLOCK_ROWS, n - first)
        crc = crc32(key_view[first * width:(first + rows) * width])
        sums.append(crc32(position_view[first * 4:(first + rows) * 4], crc))
    return sums


def block_crc(run: pa.RecordBatch, block: int) -> int:
    """The CRC-32 of one block's keys and positions."""
    start = block * BLOCK_ROWS
    stop = min(start + BLOCK_ROWS, run.num_rows)
    crc = 0
    for view in (*_key_bytes(run.column(0), start, stop),
                 _fixed_bytes(run.column(1), start, stop)):
        crc = zlib.crc32(view, crc)
    return crc


def is_binary_like(key_type: pa.DataType) -> bool:
    """Whether keys of this type are strings or binaries (offsets and bytes)."""
    return bool(pa.types.is_string(key_type) or pa.types.is_binary(key_type)
                or pa.types.is_large_string(key_type) or pa.types.is_large_binary(key_type))


def offset_width(key_type: pa.DataType) -> int:
    """Bytes of one offset of a string or binary key column (large types: 8)."""
    return 8 if pa.types.is_large_string(key_type) or pa.types.is_large_binary(key_type) else 4


def candidate_blocks(fences: pa.Array, needles: pa.Array) -> list[int]:
    """The blocks (ascending) that can hold a row whose key is one of `needles` (module
    doc); none for a needle below the first fence. Computed by Arrow's kernels: a lookup
    asks this of every run, for every key of the commit."""
    import pyarrow.compute as pc

    below = pc.search_sorted(fences, needles, side="left").cast(pa.int64())
    through = pc.search_sorted(fences, needles, side="right").cast(pa.int64())
    first = pc.max_element_wise(pc.subtract(below, 1), 0)
    span = pc.subtract(through, first)  # blocks a needle can be in: 0, 1 or 2 but for
    found = [first.filter(pc.greater(span, 0)),  # keys repeated over whole blocks
             pc.add(first, 1).filter(pc.greater(span, 1))]
    wide = pc.indices_nonzero(pc.greater(span, 2)).to_pylist()
    blocks = set(pc.unique(pa.chunked_array(found, pa.int64())).to_pylist())
    for i in wide:
        blocks.update(range(first[i].as_py() + 2, through[i].as_py()))
    return sorted(blocks)


def spans(blocks: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending blocks as (first row, rows) of their runs of neighbours."""
    out: list[tuple[int, int]] = []
    for block in blocks:
        if out and out[-1][0] + out[-1][1] == block * BLOCK_ROWS:
            out[-1] = (out[-1][0], out[-1][1] + BLOCK_ROWS)
        else:
            out.append((block * BLOCK_ROWS, BLOCK_ROWS))
    return out


def _fixed_bytes(array: pa.Array, start: int, stop: int) -> memoryview:
    width = array.type.bit_width // 8
    data = array.buffers()[1]
    first = (array.offset + start) * width
    return memoryview(data)[first:first + (stop - start) * width]


def _key_bytes(array: pa.Array, start: int, stop: int) -> tuple[memoryview, ...]:
    if not is_binary_like(array.type):
        return (_fixed_bytes(array, start, stop),)
    width = offset_width(array.type)
    offsets = memoryview(array.buffers()[1])
    first = (array.offset + start) * width
    bounds = offsets[first:first + (stop - start + 1) * width]
    if len(bounds) < 2 * width:
        return (bounds,)  # too short: the CRC-32 disagrees
    low = int.from_bytes(bounds[:width], "little", signed=True)
    high = int.from_bytes(bounds[-width:], "little", signed=True)
    if not 0 <= low <= high:
        return (bounds,)
    return bounds, memoryview(array.buffers()[2])[low:high]
