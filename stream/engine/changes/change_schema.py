"""What change rows are called and how they are shaped: metadata columns, change type
vocabularies, v3 lineage fields, and the row-level options of a change read (`RowOptions`
as callers give them, `ChangeOptions` resolved for a table).

Kept apart from the modules that build change rows (`reconstruction`, `updates`), which
import `pyarrow.compute` and the data readers: Spark starts a fresh Python process for the
driver side of every streaming query, and that process plans micro-batches without reading
a row, importing only this, the planner and the offsets (`bench/streaming.py` measures
what that saves per query).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from meltwater.planner.errors import SchemaError
from meltwater.planner.expressions.tree import TRUE, Expression
from meltwater.planner.spec.reserved_field_ids import LAST_UPDATED_SEQUENCE_NUMBER_ID, ROW_ID_ID
from meltwater.planner.spec.types import LONG, NestedField, Schema, StructType
from meltwater.planner.str_enum import StrEnum
from meltwater.stream.engine.changes.change_modes import (
    BeforeImages,
    ChangeTypeNames,
    EqualityDeletes,
)
from meltwater.stream.errors import ChangeOptionError

CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
COMMIT_SEQUENCE_NUMBER = "_commit_sequence_number"
COMMIT_TIMESTAMP = "_commit_timestamp"
METADATA_COLUMNS = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_SEQUENCE_NUMBER,
                    COMMIT_TIMESTAMP)

INSERT = "INSERT"
DELETE = "DELETE"
UPDATE_BEFORE = "UPDATE_BEFORE"
UPDATE_AFTER = "UPDATE_AFTER"



# Change type names by vocabulary, keyed by the Iceberg name.
CHANGE_TYPE_NAMES: dict[ChangeTypeNames, dict[str, str]] = {
    ChangeTypeNames.ICEBERG: {INSERT: INSERT, DELETE: DELETE, UPDATE_BEFORE: UPDATE_BEFORE,
                              UPDATE_AFTER: UPDATE_AFTER},
    ChangeTypeNames.DELTA: {INSERT: "insert", DELETE: "delete",
                            UPDATE_BEFORE: "update_preimage", UPDATE_AFTER: "update_postimage"},
}
# Every accepted name -> its Iceberg name, so inputs in either vocabulary are understood.
CANONICAL_NAMES: dict[str, str] = {
    name: iceberg for names in CHANGE_TYPE_NAMES.values() for iceberg, name in names.items()}

# v3 row lineage, as the spec reserves it: each change row can say which row it is.
LINEAGE_FIELDS = (NestedField(ROW_ID_ID, "_row_id", LONG, False),
                  NestedField(LAST_UPDATED_SEQUENCE_NUMBER_ID, "_last_updated_sequence_number",
                              LONG, False))
LINEAGE_IDS = frozenset({ROW_ID_ID, LAST_UPDATED_SEQUENCE_NUMBER_ID})
LINEAGE_COLUMNS = tuple(f.name for f in LINEAGE_FIELDS)

_Mode = TypeVar("_Mode", bound=StrEnum)


def change_mode(kind: type[_Mode], value: str, what: str) -> _Mode:
    """`value` (a member, or the text a caller gave) as a member of `kind`; an unknown one
    is a ChangeOptionError naming `what` and the choices."""
    member = kind.named(value)
    if member is None:
        raise ChangeOptionError(f"unknown {what} {value!r} (choose from "
                                f"{', '.join(kind.texts())})")
    return member


def _set_modes(options: RowOptions | ChangeOptions) -> None:
    """Take the modes given as text (by the Python API, the CLI) as members."""
    object.__setattr__(options, "equality_deletes", change_mode(
        EqualityDeletes, options.equality_deletes, "equality-deletes mode"))
    object.__setattr__(options, "change_type_names", change_mode(
        ChangeTypeNames, options.change_type_names, "change type names"))
    object.__setattr__(options, "before_images", change_mode(
        BeforeImages, options.before_images, "before-images mode"))


@dataclass(frozen=True)
class RowOptions:
    """The row-level choices of a change read, as a caller gives them: which rows and
    columns, and how changes are shaped. Column names, not field ids, and None where the
    table decides: `change_options` resolves them against the schema of the range's end,
    so each default is decided in one place for the CLI, the Python API, the Spark
    options and the stream.
    """

    filter: Expression | str = TRUE  # SQL-like text is parsed against the range end's schema
    # Any sequence of names, kept as a tuple (__post_init__); None: every column.
    columns: Sequence[str] | None = None
    net: bool = False
    compute_updates: bool | None = None  # None: pair updates when there are identifiers
    # As `columns`; None: the table's identifier fields.
    identifier_columns: Sequence[str] | None = None
    keep_carryover: bool = False
    appends_only: bool = False  # inserts of append commits only (Iceberg's append scan)
    equality_deletes: EqualityDeletes = EqualityDeletes.RESOLVE
    change_type_names: ChangeTypeNames = ChangeTypeNames.ICEBERG
    before_images: BeforeImages = BeforeImages.FULL
    # What the caller calls the two pairing options (`--compute-updates`, the Spark option
    # `compute-updates`, ...), for a refusal to name them as the user wrote them.
    updates_option: str = field(default="compute_updates", compare=False)
    identifiers_option: str = field(default="identifier_columns", compare=False)

    def __post_init__(self) -> None:
        _set_modes(self)
        for name in ("columns", "identifier_columns"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))

    def change_options(self, schema: Schema) -> ChangeOptions:
        """The `ChangeOptions` of these choices on a schema (with v3's lineage fields when
        the table has row lineage). Updates pair by the identifier columns given, else the
        table's identifier fields, else v3's `_row_id`; `compute_updates=None` pairs them
        when there are any, `True` refuses a table without."""
        if self.identifier_columns:
            try:
                identifiers = tuple(schema.field_id(name) for name in self.identifier_columns)
            except SchemaError as error:
                raise ChangeOptionError(f"{self.identifiers_option}: {error}") from None
        else:
            identifiers = tuple(schema.identifier_field_ids)
        if not identifiers and self.compute_updates is not False and schema.has_field(
                ROW_ID_ID):
            identifiers = (ROW_ID_ID,)
        if self.compute_updates and not identifiers:
            raise ChangeOptionError(f"{self.updates_option} needs identifier columns to pair "
                                    "updates by: the table has no identifier fields, so give "
                                    f"them with {self.identifiers_option}")
        updates = bool(identifiers) if self.compute_updates is None else self.compute_updates
        key_images = self.before_images == BeforeImages.KEY
        if key_images and not identifiers:
            raise ChangeOptionError("before-images=key needs identifier columns to keep: the "
                                    "table has no identifier fields, so give them with "
                                    f"{self.identifiers_option}")
        if key_images and self.columns is not None:
            wanted = set(identifiers) - LINEAGE_IDS  # lineage columns always come
            missing = [f.name for f in key_schema(schema, wanted).fields
                       if f.name not in self.columns]
            if missing:
                raise ChangeOptionError("before-images=key keeps departing rows' identifier "
                                        f"columns only: select {', '.join(missing)} too")
        if key_images and self.net:
            raise ChangeOptionError("before-images=key does not combine with net changes, "
                                    "which compare whole rows across commits")
        return ChangeOptions(net=self.net, compute_updates=updates,
                             identifier_field_ids=identifiers or None,
                             # a departing row without its values cannot be told from the
                             # same row arriving again: every such pair is kept
                             keep_carryover=self.keep_carryover or key_images,
                             equality_deletes=self.equality_deletes,
                             change_type_names=self.change_type_names,
                             before_images=self.before_images)


@dataclass(frozen=True)
class ChangeOptions:
    """How change rows are shaped, resolved for one table (`RowOptions.change_options`).

    `identifier_field_ids` is resolved by the caller (the table's identifier fields, or
    the user's columns); update pairing needs it and `compute_updates`.
    """

    net: bool = False  # collapse a range to each row's net effect (see `reconstruct_range`)
    compute_updates: bool = False  # DELETE + INSERT of one key -> UPDATE_BEFORE/UPDATE_AFTER
    identifier_field_ids: tuple[int, ...] | None = None
    keep_carryover: bool = False  # keep rows deleted and re-inserted unchanged in a commit
    equality_deletes: EqualityDeletes = EqualityDeletes.RESOLVE
    change_type_names: ChangeTypeNames = ChangeTypeNames.ICEBERG
    before_images: BeforeImages = BeforeImages.FULL

    def __post_init__(self) -> None:
        _set_modes(self)
        if self.identifier_field_ids is not None:
            object.__setattr__(self, "identifier_field_ids", tuple(self.identifier_field_ids))

    @property
    def pairs_updates(self) -> bool:
        """Whether DELETE + INSERT of one key become an update pair: asked for, and there are
        identifier fields to key by."""
        return self.compute_updates and bool(self.identifier_field_ids)


def key_schema(projection: Schema, ids: Collection[int]) -> Schema:
    """The projection's columns that hold one of the fields `ids` (whole top-level columns:
    a struct holding a nested key field is taken whole)."""
    def holds(field: NestedField) -> bool:
        if field.field_id in ids:
            return True
        return isinstance(field.type, StructType) and any(holds(f) for f in field.type.fields)

    fields = tuple(f for f in projection.fields if holds(f))
    return Schema(fields, projection.schema_id, projection.identifier_field_ids)


def key_image_columns(schema: Schema, options: ChangeOptions) -> frozenset[str] | None:
    """The top-level columns of `schema` a departing row keeps its values in (None: all of
    them): with `before-images=key`, those holding an identifier field and v3's lineage
    columns."""
    if options.before_images != BeforeImages.KEY:
        return None
    ids = set(options.identifier_field_ids or ()) | LINEAGE_IDS
    return frozenset(f.name for f in key_schema(schema, ids).fields)
