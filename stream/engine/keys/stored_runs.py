"""A run as a segment file holds it, read a few blocks at a time (`key_blocks`).

Why reads and not the memory map the segment is opened with: a lookup wants a few blocks
of kilobytes from each run, and a kernel with large page-cache folios maps a whole folio
(up to megabytes) into the process on each touch, so searching a 200M-row index through
its map made 1.7 GB of it the process's resident memory for one commit's thousand keys.
The map is used only to learn where each run's buffers are (Arrow's reader of the IPC
framing; their bytes are never touched through it); blocks are read with `os.pread`, and
each block read is checked against its CRC-32 every time, so no answer rests on bytes
that were not checked.
"""

from __future__ import annotations

import contextlib
import os
import zlib

import pyarrow as pa

from meltwater.stream.engine.keys import key_blocks
from meltwater.stream.engine.keys.key_blocks import (
    CRC,
    FENCE,
    block_count,
    candidate_blocks,
    is_binary_like,
    offset_width,
    spans,
)
from meltwater.stream.engine.keys.key_runs import find, run_schema
from meltwater.stream.errors import KeyIndexDamagedError


class SegmentFile:
    """A segment file open for reads, closed when nothing holds it any more: a run being
    searched on a reading thread keeps its file open while a writer on another thread
    replaces the segment (a closed descriptor's number could name another file by then)."""

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


class StoredRun:
    """One run of a segment: where its buffers are in the file, and its blocks' fences and
    CRC-32s (from the blocks file, checked whole when it was read)."""

    def __init__(self, name: str, file: SegmentFile, base: int, run: pa.RecordBatch,
                 blocks: pa.RecordBatch) -> None:
        self.name = name
        self._file = file
        self.rows = run.num_rows
        self.key_type = run.schema.field(0).type
        keys, positions = run.column(0), run.column(1)
        if keys.offset or positions.offset:
            raise KeyIndexDamagedError(f"{name}: a run that is a slice")
        # where each buffer starts in the file, and how long the file says it is
        self._buffers = [(b.address - base, b.size) for b in
                         (*keys.buffers()[1:], positions.buffers()[1])]
        self.fences = blocks.column(FENCE)
        self._sums: list[int] = blocks.column(CRC).to_pylist()
        if len(self.fences) != block_count(self.rows):
            raise KeyIndexDamagedError(f"{name}: blocks and run disagree")

    def find(self, needles: pa.Array) -> tuple[pa.Array, pa.Array]:
        """`key_runs.find` over the blocks that can hold the needles, each read and checked
        (KeyIndexDamagedError when one is not what its CRC-32 says)."""
        blocks = candidate_blocks(self.fences, needles)
        parts = [self._read(start, rows) for start, rows in spans(blocks)]
        if not parts:
            return find(pa.RecordBatch.from_arrays(
                [pa.array([], self.key_type), pa.array([], pa.int32())],
                schema=run_schema(self.key_type)), needles)
        return find(pa.concat_batches(parts), needles)

    def whole(self) -> pa.RecordBatch:
        """Every block, read and checked (a run copied into a new segment gets new CRC-32s,
        which must not cover damage)."""
        return self._read(0, self.rows)

    def _read(self, start: int, rows: int) -> pa.RecordBatch:
        """Rows [start, start + rows) (whole blocks, clipped at the run's end), checked."""
        rows = min(rows, self.rows - start)
        if is_binary_like(self.key_type):
            width = offset_width(self.key_type)
            offsets = self._range(0, start * width, (rows + 1) * width)
            low = int.from_bytes(offsets[:width], "little", signed=True)
            high = int.from_bytes(offsets[-width:], "little", signed=True)
            if not 0 <= low <= high:
                raise KeyIndexDamagedError(f"{self.name}: key offsets out of order")
            data = self._range(1, low, high - low)
            positions = self._range(2, start * 4, rows * 4)
            self._check_binary(start, rows, width, offsets, data, low, positions)
            bounds = pa.Array.from_buffers(pa.int64() if width == 8 else pa.int32(), rows + 1,
                                           [None, pa.py_buffer(offsets)])
            import pyarrow.compute as pc

            rebased = pc.subtract(bounds, pa.scalar(low, bounds.type))
            keys = pa.Array.from_buffers(self.key_type, rows,
                                         [None, rebased.buffers()[1], pa.py_buffer(data)])
        else:
            width = self.key_type.bit_width // 8
            key_bytes = self._range(0, start * width, rows * width)
            positions = self._range(1, start * 4, rows * 4)
            self._check_fixed(start, rows, width, key_bytes, positions)
            keys = pa.Array.from_buffers(self.key_type, rows, [None, pa.py_buffer(key_bytes)])
        return pa.RecordBatch.from_arrays(
            [keys, pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(positions)])],
            schema=run_schema(self.key_type))

    def _range(self, buffer: int, offset: int, length: int) -> bytes:
        where, size = self._buffers[buffer]
        if offset < 0 or length < 0 or offset + length > size:
            raise KeyIndexDamagedError(f"{self.name}: a block beyond its buffer")
        try:
            data = os.pread(self._file.fd, length, where + offset)
        except OSError as error:  # the cache unreadable: read as if absent
            raise KeyIndexDamagedError(f"{self.name}: {error}") from error
        if len(data) != length:
            raise KeyIndexDamagedError(f"{self.name}: short read")
        return data

    def _check_fixed(self, start: int, rows: int, width: int, keys: bytes,
                     positions: bytes) -> None:
        first = start // key_blocks.BLOCK_ROWS
        for block in range(first, block_count(start + rows)):
            lo = block * key_blocks.BLOCK_ROWS - start
            hi = min(lo + key_blocks.BLOCK_ROWS, rows)
            crc = zlib.crc32(memoryview(positions)[lo * 4:hi * 4],
                             zlib.crc32(memoryview(keys)[lo * width:hi * width]))
            self._agree(block, crc)

    def _check_binary(self, start: int, rows: int, width: int, offsets: bytes, data: bytes,
                      low: int, positions: bytes) -> None:
        view = memoryview(offsets)
        first = start // key_blocks.BLOCK_ROWS
        for block in range(first, block_count(start + rows)):
            lo = block * key_blocks.BLOCK_ROWS - start
            hi = min(lo + key_blocks.BLOCK_ROWS, rows)
            bounds = view[lo * width:(hi + 1) * width]
            begin = int.from_bytes(bounds[:width], "little", signed=True) - low
            end = int.from_bytes(bounds[-width:], "little", signed=True) - low
            if not 0 <= begin <= end <= len(data):
                raise KeyIndexDamagedError(f"{self.name}: block {block}'s offsets are damaged")
            crc = zlib.crc32(bounds)
            crc = zlib.crc32(memoryview(data)[begin:end], crc)
            crc = zlib.crc32(memoryview(positions)[lo * 4:hi * 4], crc)
            self._agree(block, crc)

    def _agree(self, block: int, crc: int) -> None:
        if crc != self._sums[block]:
            raise KeyIndexDamagedError(f"{self.name}: block {block} does not match its CRC-32")

