"""A change stream driven as the Spark source's driver drives it (initial_offset,
latest_offset, offsets through JSON, parts, pack_parts, forget), each partition read with
`read_parts`, the function the source's executors call; no Spark. For the tests of rate
limits and of the streams of branches."""

from __future__ import annotations

import json
from collections import Counter

from corpus.compare import _canonical
from meltwater.planner.changes.micro_batch import Budget, pack_parts
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.changes.change_schema import LINEAGE_COLUMNS, METADATA_COLUMNS
from meltwater.stream.engine.changes.held_changes import read_parts
from meltwater.stream.spark.options import stream_read
from meltwater.stream.watch.change_stream import ChangeStream
from meltwater.stream.watch.stream_offsets import StreamOffset


def stream_of(location: str, options: dict[str, str]) -> ChangeStream:
    read = stream_read({"path": location, "starting": "earliest", **options})
    metadata = load_table(location).metadata
    columns = [f.name for f in metadata.schema.fields]
    if metadata.format_version >= 3:
        columns += list(LINEAGE_COLUMNS)
    return ChangeStream(read, columns + list(METADATA_COLUMNS), watch=False)


def rows_of(batches) -> Counter:
    """Rows as a multiset of canonical (column, value) tuples: commits of different
    schemas compare without a common one."""
    rows: Counter = Counter()
    for batch in batches:
        for row in batch.to_pylist():
            rows[tuple(sorted((k, _canonical(v)) for k, v in row.items()))] += 1
    return rows


def through_json(offset: StreamOffset) -> StreamOffset:
    """Through JSON, as Spark's offset log stores it."""
    return StreamOffset.from_json(json.loads(json.dumps(offset.to_json())))


class Feed:
    """Drains a stream under a budget, reading each micro-batch once across budgets."""

    def __init__(self, location: str, options: dict[str, str]) -> None:
        self.location = location
        self.options = options
        self.io = PyArrowFileIO()
        self.read_cache: dict[tuple, Counter] = {}

    def batches(self, budget: Budget) -> list[tuple[StreamOffset, StreamOffset, list]]:
        stream = stream_of(self.location, self.options)
        start = through_json(stream.initial_offset())
        found = []
        for _ in range(1000):
            end = through_json(stream.latest_offset(start, budget))
            if end == start:
                return found
            found.append((start, end, stream.parts(start, end)))
            stream.forget(end)
            start = end
        raise AssertionError("the stream did not settle")

    def batch_rows(self, budget: Budget) -> list[tuple[StreamOffset, StreamOffset, Counter]]:
        """Each micro-batch's offsets and rows, in order."""
        stream = stream_of(self.location, self.options)
        found = []
        for start, end, parts in self.batches(budget):
            key = (json.dumps(start.to_json()), json.dumps(end.to_json()))
            if key not in self.read_cache:
                groups = pack_parts(parts, stream.split_target())
                self.read_cache[key] = rows_of(
                    b for group in groups for b in read_parts(group, self.io, stream.options))
            found.append((start, end, self.read_cache[key]))
        return found

    def rows(self, budget: Budget) -> tuple[Counter, int]:
        """The union of the micro-batches' rows, and how many micro-batches there were."""
        batches = self.batch_rows(budget)
        total: Counter = Counter()
        for _, _, rows in batches:
            total += rows
        return total, len(batches)
