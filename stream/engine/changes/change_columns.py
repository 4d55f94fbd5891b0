"""The change metadata columns of change rows: their schema, and how a commit's rows get
them (`ChangeColumns`).

Every row of a commit carries the commit's ordinal, snapshot id, sequence number and
timestamp, and its change type in the chosen vocabulary. Net changes of a range are the
exception: each row carries the commit that made its change, tagged on the row while the
range is read (`tagged`) and resolved when the columns are added (`finish`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from meltwater.planner.changes.change_tasks import ChangeCommit, CommitChanges
from meltwater.planner.spec.reserved_field_ids import (
    CHANGE_ORDINAL_ID,
    CHANGE_TYPE_ID,
    COMMIT_SNAPSHOT_ID_ID,
)
from meltwater.planner.spec.types import Schema
from meltwater.stream.engine.changes.change_modes import ChangeTypeNames
from meltwater.stream.engine.changes.change_schema import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    CHANGE_TYPE_NAMES,
    COMMIT_SEQUENCE_NUMBER,
    COMMIT_SNAPSHOT_ID,
    COMMIT_TIMESTAMP,
)
from meltwater.stream.engine.decode.arrow_constants import constant_array
from meltwater.stream.engine.decode.arrow_schema import FIELD_ID_KEY, to_arrow_schema

COMMIT_TAG = "__meltwater_commit"  # net changes: a row's commit ordinal, while it is read


def _meta_field(name: str, type_: pa.DataType, fid: int | None) -> pa.Field:
    metadata = {FIELD_ID_KEY: str(fid).encode()} if fid is not None else None
    return pa.field(name, type_, nullable=False, metadata=metadata)


METADATA_FIELDS = (
    _meta_field(CHANGE_TYPE, pa.string(), CHANGE_TYPE_ID),
    _meta_field(CHANGE_ORDINAL, pa.int32(), CHANGE_ORDINAL_ID),
    _meta_field(COMMIT_SNAPSHOT_ID, pa.int64(), COMMIT_SNAPSHOT_ID_ID),
    _meta_field(COMMIT_SEQUENCE_NUMBER, pa.int64(), None),
    _meta_field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), None),
)


def change_schema(projection: Schema) -> pa.Schema:
    """The Arrow schema of change batches: the projected table columns, then the change
    metadata columns (with Iceberg's reserved field ids where it has them)."""
    return pa.schema(list(to_arrow_schema(projection)) + list(METADATA_FIELDS))


def metadata_fields() -> list[pa.Field]:
    """The change metadata fields, in output order (a fresh list for callers to extend)."""
    return list(METADATA_FIELDS)


class ChangeColumns:
    """Adds the metadata columns to one commit's (or one net range's) change rows, whose
    table columns are `schema`'s first ones."""

    def __init__(self, commit: CommitChanges, names: ChangeTypeNames, schema: pa.Schema
                 ) -> None:
        self.commit = commit
        self.names = names
        self.schema = schema
        # net changes of a range (`CommitChanges.spanned`): each row tagged with the
        # ordinal of the commit that made it, for its metadata columns
        self.net = bool(commit.spanned)
        spanned = commit.spanned
        self._ordinals = (pa.array([c.sequence_number for c in spanned], pa.int64()),
                          pa.array([c.ordinal for c in spanned], pa.int32()))
        self._spanned_columns = (
            pa.array([c.ordinal for c in spanned], pa.int32()),
            pa.array([c.snapshot_id for c in spanned], pa.int64()),
            pa.array([c.sequence_number for c in spanned], pa.int64()),
            pa.array([c.timestamp_ms * 1000 for c in spanned], pa.timestamp("us", tz="UTC")))

    def tagged(self, batch: pa.RecordBatch, commits: int | pa.Array) -> pa.RecordBatch:
        """Net changes: the batch with each row's commit ordinal (`commits` an ordinal, or
        per row the sequence number of the delete that removed it, null for the range's
        last commit); otherwise the batch as it is."""
        if not self.net:
            return batch
        if isinstance(commits, int):
            ordinals = constant_array(pa.scalar(commits, pa.int32()), batch.num_rows)
        else:
            seqs, found = self._ordinals
            ordinals = pc.fill_null(pc.take(found, pc.index_in(commits, value_set=seqs)),
                                    pa.scalar(self.commit.commit.ordinal, pa.int32()))
        return batch.append_column(pa.field(COMMIT_TAG, pa.int32(), nullable=False),
                                   ordinals)

    def finish(self, batch: pa.RecordBatch, change_type: str | pa.Array) -> pa.RecordBatch:
        """Append the metadata columns, change types in the chosen vocabulary."""
        n = batch.num_rows
        names = CHANGE_TYPE_NAMES[self.names]
        if isinstance(change_type, str):
            types = constant_array(pa.scalar(names[change_type]), n)
        elif self.names == ChangeTypeNames.ICEBERG:
            types = change_type
        else:
            known = list(names)
            index = pc.index_in(change_type, value_set=pa.array(known))
            types = pc.take(pa.array([names[k] for k in known]), index)
        if self.net:  # each row's commit, by its ordinal among the range's
            ordinals = batch.column(COMMIT_TAG)
            meta = [pc.take(column, ordinals) for column in self._spanned_columns]
            columns = [*batch.drop_columns([COMMIT_TAG]).columns, types, *meta]
            return pa.RecordBatch.from_arrays(columns, schema=self.schema)
        commit: ChangeCommit = self.commit.commit
        columns = [
            *batch.columns, types,
            constant_array(pa.scalar(commit.ordinal, pa.int32()), n),
            constant_array(pa.scalar(commit.snapshot_id, pa.int64()), n),
            constant_array(pa.scalar(commit.sequence_number, pa.int64()), n),
            constant_array(pa.scalar(commit.timestamp_ms * 1000, pa.timestamp("us", tz="UTC")), n),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
