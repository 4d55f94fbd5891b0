"""Decoding data and delete files into Arrow record batches: Parquet, ORC and Avro.

A `FileSource` reads a selection of a file's columns (`Selection`, which mirrors the
file's Arrow schema) batch by batch, each batch with the file position of its first row,
so deletes can be applied by position whether or not the file is read from its start.

Formats: Parquet is the fast path. ORC is read stripe by stripe (pyarrow exposes Iceberg's
`iceberg.id` type attributes as field metadata; files without them are matched by column
name, a documented fallback, like Iceberg's name mapping). Avro data files are decoded with
fastavro record by record (field ids from the Avro schema's `field-id` properties): correct
but slow, which is acceptable for the rare Avro data file. A file without any field ids is
matched by name.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from meltwater.planner.errors import UnsupportedFeatureError
from meltwater.planner.table.fileio import FileIO
from meltwater.stream.engine.decode import parquet_layout
from meltwater.stream.engine.decode.arrow_schema import (
    FIELD_ID_KEY,
)
from meltwater.stream.engine.decode.parquet_layout import (
    Selection,
    parquet_leaf_paths,
    row_group_runs,
)
from meltwater.stream.errors import UnreadableFileError

if TYPE_CHECKING:
    from meltwater.stream.engine.decode.parquet_pages import PageReader



# -- reading files ------------------------------------------------------------------------


class FileSource:
    """A data or delete file of one format, read as Arrow batches with their file positions."""

    path: str
    schema: pa.Schema  # the file's own Arrow schema, field ids in field metadata

    def batches(self, selection: Selection, batch_size: int, start: int = 0,
                length: int | None = None, rows: Sequence[int] | None = None,
                ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(position of the batch's first row in the file, batch of the selected columns).

        `rows`, sorted file positions, is a hint: a source may skip the parts of the file
        (Parquet row groups) holding none of them; callers still check each batch.
        """
        raise NotImplementedError


class ParquetSource(FileSource):
    """A Parquet file: reads only the row groups a split (or a row hint) needs, and the selected
    leaf columns."""

    def __init__(self, path: str, io: FileIO) -> None:
        import pyarrow.parquet as pq

        self.path = path
        try:
            handle = io.open_input(path)
            self._handle = handle
            self._file = pq.ParquetFile(handle)
            self.schema = without_extensions(self._file.schema_arrow)
            self._dictionary_columns = _dictionary_encoded_strings(self._file, self.schema)
            # The same handle and footer, reading those columns as dictionaries.
            self._dictionary_file = (pq.ParquetFile(handle, metadata=self._file.metadata,
                                                    read_dictionary=self._dictionary_columns)
                                     if self._dictionary_columns else None)
        except (OSError, pa.ArrowException) as error:
            raise UnreadableFileError(f"{path}: not a readable Parquet file ({error})") from error
        self._pages: PageReader | None = None  # made at the first read by position

    def batches(self, selection: Selection, batch_size: int, start: int = 0,
                length: int | None = None, rows: Sequence[int] | None = None,
                ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Batches of the selected columns of the row groups in the split, each with its first
        row's position. Given `rows`, a row group whose rows among them sit in few of its
        pages is read by page (`parquet_pages`)."""
        runs = row_group_runs(self._file.metadata, start, length, rows)
        if rows is None:
            yield from self._whole_groups(selection, batch_size, runs)
        else:
            yield from self._by_page(selection, batch_size, runs, rows)

    def _whole_groups(self, selection: Selection, batch_size: int,
                      runs: list[tuple[int, list[int]]]) -> Iterator[tuple[int, pa.RecordBatch]]:
        metadata = self._file.metadata
        columns = parquet_leaf_paths(self._file, self.schema, selection)
        file = self._file
        if self._dictionary_file is not None:
            selected = [g for _, run in runs for g in run]
            selected_rows = sum(metadata.row_group(g).num_rows for g in selected)
            if selected and selected_rows >= _DICTIONARY_MIN_GROUP_ROWS * len(selected):
                file = self._dictionary_file
        try:
            for first, groups in runs:
                for batch in file.iter_batches(batch_size, row_groups=groups, columns=columns):
                    if file is self._dictionary_file:
                        batch = _dictionaries_decoded(batch)
                    yield first, batch
                    first += batch.num_rows
        except (OSError, pa.ArrowException) as error:
            raise UnreadableFileError(f"{self.path}: cannot read Parquet data ({error})") from error

    def _by_page(self, selection: Selection, batch_size: int,
                 runs: list[tuple[int, list[int]]], rows: Sequence[int],
                 ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Each row group of `runs` by page where `PageReader` can, else whole; runs of
        row groups too small to look at (`parquet_layout.MIN_PAGED_GROUP_ROWS`) are read
        as before."""
        metadata = self._file.metadata
        least = parquet_layout.MIN_PAGED_GROUP_ROWS
        if all(metadata.row_group(g).num_rows < least for _, groups in runs for g in groups):
            yield from self._whole_groups(selection, batch_size, runs)
            return
        if self._pages is None:  # loaded here: small commits of small row groups never do
            from meltwater.stream.engine.decode.parquet_pages import (
                PageReader,
                file_size_of,
                read_range_of,
            )

            self._pages = PageReader(read_range_of(self._handle), file_size_of(self._handle),
                                     self._file, self.path)
        fields = sorted(selection)

        def whole_paths(index: int) -> list[str]:
            return parquet_leaf_paths(self._file, self.schema, {index: selection[index]})

        for first, groups in runs:
            for group in groups:
                count = metadata.row_group(group).num_rows
                lo = bisect.bisect_left(rows, first)
                hi = bisect.bisect_left(rows, first + count, lo)
                paged = self._pages.read(group, first, fields, whole_paths, rows[lo:hi],
                                         batch_size) \
                    if count >= least else None
                if paged is not None:
                    yield from paged
                else:
                    yield from self._whole_groups(selection, batch_size, [(first, [group])])
                first += count


# Dictionary reads end a batch at every row group (each has its own dictionary), so they are
# used where row groups average at least this many rows: smaller batches would cost the
# JVM and the change pipeline more per row than the dictionary saves.
_DICTIONARY_MIN_GROUP_ROWS = 16_384


def _dictionary_encoded_strings(file: Any, schema: pa.Schema) -> list[str]:
    """Top-level string and binary columns with a dictionary page in every row group.

    Arrow decodes such a column to plain strings value by value; reading it as a
    dictionary and expanding that with one `take` costs about half as much. Pages that fell
    back to plain encoding
    are still read correctly, only slower, so a dictionary page in every row group is
    enough to choose it."""
    metadata = file.metadata
    if metadata.num_row_groups == 0:
        return []
    parquet_schema = file.schema
    leaves = {parquet_schema.column(i).path: i for i in range(metadata.num_columns)}
    chosen = []
    for field in schema:
        if not (pa.types.is_string(field.type) or pa.types.is_binary(field.type)
                or pa.types.is_large_string(field.type)
                or pa.types.is_large_binary(field.type)):
            continue
        leaf = None if "." in field.name else leaves.get(field.name)  # dots: paths
        if leaf is not None and all(metadata.row_group(g).column(leaf).has_dictionary_page
                                    for g in range(metadata.num_row_groups)):
            chosen.append(field.name)
    return chosen


def _dictionaries_decoded(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its dictionary columns expanded to the file's plain types."""
    columns = list(batch.columns)
    fields = list(batch.schema)
    for i, column in enumerate(columns):
        if pa.types.is_dictionary(column.type):
            columns[i] = column.dictionary.take(column.indices)
            fields[i] = fields[i].with_type(columns[i].type)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, batch.schema.metadata))


class OrcSource(FileSource):
    """An ORC file, read stripe by stripe; ORC tasks are never split."""

    def __init__(self, path: str, io: FileIO) -> None:
        import pyarrow.orc as orc

        self.path = path
        try:
            self._file = orc.ORCFile(io.open_input(path))
            self.schema = without_extensions(self._file.schema)
        except (OSError, pa.ArrowException) as error:
            raise UnreadableFileError(f"{path}: not a readable ORC file ({error})") from error

    # `rows` is FileSource.batches' hint, passed by keyword: an ORC file is read whole.
    def batches(self, selection: Selection, batch_size: int, start: int = 0,
                length: int | None = None, rows: Sequence[int] | None = None,  # noqa: ARG002
                ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Batches of the selected columns of every stripe, each with its first row's position."""
        if length is not None and start > 0:
            # pyarrow exposes no stripe offsets; the planner only splits Parquet files.
            raise UnsupportedFeatureError(f"{self.path}: split ORC tasks are not supported")
        names = [self.schema.field(i).name for i in sorted(selection)]
        position = 0
        try:
            for stripe in range(self._file.nstripes):
                data = self._file.read_stripe(stripe, columns=names)
                for batch in pa.Table.from_batches([data]).to_batches(batch_size):
                    yield position, batch
                    position += batch.num_rows
        except (OSError, pa.ArrowException) as error:
            raise UnreadableFileError(f"{self.path}: cannot read ORC data ({error})") from error


class AvroSource(FileSource):
    """An Avro data file, decoded by fastavro: correct, slow, and rare in Iceberg tables."""

    def __init__(self, path: str, io: FileIO) -> None:
        import fastavro

        self.path = path
        self._io = io
        try:
            with io.open_input(path) as handle:
                header = fastavro.reader(handle)
                schema = header.writer_schema
        except (OSError, ValueError, EOFError) as error:
            raise UnreadableFileError(f"{path}: not a readable Avro file ({error})") from error
        if not isinstance(schema, dict) or "fields" not in schema:
            raise UnreadableFileError(f"{path}: the Avro schema is not a record of columns")
        self._avro_schema = schema
        self.schema = pa.schema(_avro_fields(self._avro_schema))

    # `rows` is FileSource.batches' hint, passed by keyword: an Avro file is read whole.
    def batches(self, selection: Selection, batch_size: int, start: int = 0,
                length: int | None = None, rows: Sequence[int] | None = None,  # noqa: ARG002
                ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Batches of the selected columns of every record, each with its first row's position."""
        import fastavro

        if length is not None and start > 0:
            raise UnsupportedFeatureError(f"{self.path}: split Avro tasks are not supported")
        schema = pa.schema([self.schema.field(i) for i in sorted(selection)])
        convert = _avro_converter(pa.struct(list(schema)))
        position = 0
        chunk: list[dict[str, Any]] = []
        try:
            with self._io.open_input(self.path) as handle:
                for record in fastavro.reader(handle):
                    chunk.append(cast(dict[str, Any], record))  # the schema is a record
                    if len(chunk) == batch_size:
                        yield position, _avro_batch(chunk, schema, convert)
                        position += len(chunk)
                        chunk = []
            if chunk:
                yield position, _avro_batch(chunk, schema, convert)
        except (OSError, ValueError, EOFError) as error:
            raise UnreadableFileError(f"{self.path}: cannot read Avro data ({error})") from error


def _avro_batch(records: list[dict[str, Any]], schema: pa.Schema,
                convert: Callable[[Any], Any] | None) -> pa.RecordBatch:
    if convert is not None:
        records = [convert(r) for r in records]
    return pa.RecordBatch.from_pylist(records, schema=schema)


def _avro_fields(record: dict[str, Any]) -> list[pa.Field]:
    return [_avro_field(f["name"], f["type"], f.get("field-id")) for f in record["fields"]]


def _avro_field(name: str, avro_type: Any, fid: Any, nullable: bool = False) -> pa.Field:
    if isinstance(avro_type, list):  # a union: Iceberg writes ["null", T] for optional
        branches = [t for t in avro_type if t != "null"]
        if len(branches) != 1:
            raise UnsupportedFeatureError(f"Avro union {avro_type} is not an Iceberg type")
        return _avro_field(name, branches[0], fid, nullable=len(branches) < len(avro_type))
    metadata = {FIELD_ID_KEY: str(fid).encode()} if fid is not None else None
    return pa.field(name, _avro_type(avro_type), nullable=nullable, metadata=metadata)


_AVRO_PRIMITIVES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                    "float": pa.float32(), "double": pa.float64(), "string": pa.string(),
                    "bytes": pa.binary()}


def _avro_type(avro_type: Any) -> pa.DataType:
    if isinstance(avro_type, str):
        if avro_type in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[avro_type]
        raise UnsupportedFeatureError(f"Avro type {avro_type!r} (named type references)")
    kind, logical = avro_type["type"], avro_type.get("logicalType")
    if isinstance(kind, dict):
        return _avro_type({**kind, **{k: v for k, v in avro_type.items() if k != "type"}})
    if logical == "decimal":
        return pa.decimal128(avro_type["precision"], avro_type.get("scale", 0))
    if logical == "date":
        return pa.date32()
    if logical == "time-micros":
        return pa.time64("us")
    if logical in ("timestamp-micros", "timestamp-nanos"):
        unit = "us" if logical == "timestamp-micros" else "ns"
        return pa.timestamp(unit, tz="UTC" if avro_type.get("adjust-to-utc") else None)
    if logical == "uuid":
        return pa.binary(16)
    if kind == "fixed":
        return pa.binary(avro_type["size"])
    if kind == "record":
        return pa.struct(_avro_fields(avro_type))
    if kind == "array":
        items = avro_type["items"]
        if logical == "map":  # a map with non-string keys: array<record<key, value>>
            key, value = _avro_fields(items)
            return pa.map_(key.with_nullable(False), value)
        return pa.list_(_avro_field("element", items, avro_type.get("element-id")))
    if kind == "map":
        key = pa.field("key", pa.string(), nullable=False,
                       metadata={FIELD_ID_KEY: str(avro_type.get("key-id")).encode()})
        return pa.map_(key, _avro_field("value", avro_type["values"], avro_type.get("value-id")))
    return _avro_type(kind)


def _avro_converter(type_: pa.DataType) -> Callable[[Any], Any] | None:
    """A function turning fastavro's decoded values into what pyarrow accepts for `type_`,
    or None when nothing needs converting (most schemas): UUIDs decode to `uuid.UUID`,
    non-string-keyed maps to lists of {key, value} records."""
    if pa.types.is_struct(type_):
        converters = [(type_.field(i).name, _avro_converter(type_.field(i).type))
                      for i in range(type_.num_fields)]
        children = [(n, c) for n, c in converters if c is not None]
        if not children:
            return None

        def struct(value: Any) -> Any:
            if value is None:
                return None
            value = dict(value)
            for name, convert in children:
                value[name] = convert(value.get(name))
            return value
        return struct
    if pa.types.is_map(type_):
        key, item = _avro_converter(type_.key_type), _avro_converter(type_.item_type)

        def entries(value: Any) -> Any:
            if value is None:
                return None
            pairs = value.items() if isinstance(value, dict) else (
                (e["key"], e["value"]) for e in value)
            return [(key(k) if key else k, item(v) if item else v) for k, v in pairs]
        return entries
    if pa.types.is_list(type_):
        element = _avro_converter(type_.value_type)
        if element is None:
            return None
        return lambda value: None if value is None else [element(v) for v in value]
    if pa.types.is_fixed_size_binary(type_):
        return lambda value: getattr(value, "bytes", value)
    return None


def without_extensions(schema: pa.Schema) -> pa.Schema:
    """Arrow extension types (pyarrow reads Parquet UUIDs as `arrow.uuid`) as their storage."""
    def plain(field: pa.Field) -> pa.Field:
        type_ = field.type
        if isinstance(type_, pa.ExtensionType):
            return field.with_type(type_.storage_type)
        if pa.types.is_struct(type_):
            return field.with_type(pa.struct([plain(type_.field(i))
                                              for i in range(type_.num_fields)]))
        if pa.types.is_map(type_):
            return field.with_type(pa.map_(plain(type_.key_field), plain(type_.item_field)))
        if pa.types.is_list(type_) or pa.types.is_large_list(type_):
            return field.with_type(pa.list_(plain(type_.value_field)))
        return field
    return pa.schema([plain(f) for f in schema], metadata=schema.metadata)


# Each opens a file as `(path, io)`; FileSource subclasses built otherwise (bulk_scan's) are
# not openers.
_SOURCES: dict[str, Callable[[str, FileIO], FileSource]] = {
    "PARQUET": ParquetSource, "ORC": OrcSource, "AVRO": AvroSource,
}


def open_source(path: str, file_format: str, io: FileIO) -> FileSource:
    """The reader for one data or delete file of a given format (PARQUET, ORC, AVRO)."""
    source = _SOURCES.get(file_format.upper())
    if source is None:
        raise UnsupportedFeatureError(f"{path}: cannot read {file_format} files")
    return source(path, io)
