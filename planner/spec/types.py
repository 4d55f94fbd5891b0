"""Iceberg's type system: primitive and nested types, fields with ids, and schemas.

Everything in the planner identifies columns by field id, never by name, because names
change (renames) while ids do not. Values inside the planner use one *internal*
representation, the one the spec's binary serialization encodes:

| type                      | internal value                       |
| ------------------------- | ------------------------------------ |
| boolean / int / long      | bool / int                           |
| float / double            | float                                |
| decimal(P, S)             | decimal.Decimal                      |
| date                      | int, days since 1970-01-01           |
| time                      | int, microseconds since midnight     |
| timestamp[tz]             | int, microseconds since the epoch    |
| timestamp[tz]_ns          | int, nanoseconds since the epoch     |
| string                    | str                                  |
| uuid                      | uuid.UUID                            |
| fixed[L] / binary         | bytes                                |

Literals in filters, partition values and column bounds are all converted to it, so
comparisons never have to care where a value came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from meltwater.planner.errors import SchemaError


class IcebergType:
    """Base of all Iceberg types."""

    is_primitive = False


_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]")
PRIMITIVE_NAMES = frozenset({
    "boolean", "int", "long", "float", "double", "date", "time", "timestamp", "timestamptz",
    "timestamp_ns", "timestamptz_ns", "string", "uuid", "binary", "unknown", "variant",
    "geometry", "geography",
})


@dataclass(frozen=True)
class PrimitiveType(IcebergType):
    """A primitive type by its spec name: `long`, `decimal(9,2)`, `fixed[16]`, ..."""

    name: str
    is_primitive = True

    def __post_init__(self) -> None:
        if not (self.name in PRIMITIVE_NAMES or _DECIMAL.fullmatch(self.name)
                or _FIXED.fullmatch(self.name)):
            raise SchemaError(f"unknown Iceberg type {self.name!r}")

    @property
    def kind(self) -> str:
        """The type's family: `decimal` and `fixed` without their parameters."""
        if self.name.startswith("decimal"):
            return "decimal"
        if self.name.startswith("fixed"):
            return "fixed"
        return self.name

    @property
    def precision(self) -> int:
        """A decimal's total digits; SchemaError for other types."""
        return self._parameter(_DECIMAL, 1, "precision")

    @property
    def scale(self) -> int:
        """A decimal's digits after the point; SchemaError for other types."""
        return self._parameter(_DECIMAL, 2, "scale")

    @property
    def length(self) -> int:
        """A fixed type's byte length; SchemaError for other types."""
        return self._parameter(_FIXED, 1, "length")

    def _parameter(self, pattern: re.Pattern[str], group: int, what: str) -> int:
        match = pattern.fullmatch(self.name)
        if match is None:
            raise SchemaError(f"type {self.name} has no {what}")
        return int(match.group(group))

    def __str__(self) -> str:
        return self.name


def primitive(name: str) -> PrimitiveType:
    """A primitive type by name as users write it: spaces in `decimal(9, 2)` allowed."""
    return PrimitiveType(re.sub(r"\s+", "", name) if "(" in name else name)


BOOLEAN = PrimitiveType("boolean")
INT = PrimitiveType("int")
LONG = PrimitiveType("long")
FLOAT = PrimitiveType("float")
DOUBLE = PrimitiveType("double")
DATE = PrimitiveType("date")
TIME = PrimitiveType("time")
TIMESTAMP = PrimitiveType("timestamp")
TIMESTAMPTZ = PrimitiveType("timestamptz")
STRING = PrimitiveType("string")
UUID = PrimitiveType("uuid")
BINARY = PrimitiveType("binary")


@dataclass(frozen=True)
class NestedField:
    """A field of a struct (or a list element / map key / map value) with its id."""

    field_id: int
    name: str
    type: IcebergType
    required: bool = False
    doc: str | None = None
    initial_default: Any = None
    write_default: Any = None


@dataclass(frozen=True)
class StructType(IcebergType):
    """A struct: fields with ids, in order."""

    fields: tuple[NestedField, ...]

    def field(self, field_id: int) -> NestedField | None:
        """The child field with this id, if there is one."""
        return next((f for f in self.fields if f.field_id == field_id), None)

    def __str__(self) -> str:
        return "struct<" + ", ".join(f"{f.name}: {f.type}" for f in self.fields) + ">"


@dataclass(frozen=True)
class ListType(IcebergType):
    """A list, its element a field with its own id."""

    element_id: int
    element_type: IcebergType
    element_required: bool = False

    @property
    def element_field(self) -> NestedField:
        """The element as a field, for walking nested types uniformly."""
        return NestedField(self.element_id, "element", self.element_type, self.element_required)

    def __str__(self) -> str:
        return f"list<{self.element_type}>"


@dataclass(frozen=True)
class MapType(IcebergType):
    """A map, its key and value fields with their own ids."""

    key_id: int
    key_type: IcebergType
    value_id: int
    value_type: IcebergType
    value_required: bool = False

    @property
    def key_field(self) -> NestedField:
        """The key as a field (keys are always required)."""
        return NestedField(self.key_id, "key", self.key_type, True)

    @property
    def value_field(self) -> NestedField:
        """The value as a field."""
        return NestedField(self.value_id, "value", self.value_type, self.value_required)

    def __str__(self) -> str:
        return f"map<{self.key_type}, {self.value_type}>"


def child_fields(type_: IcebergType) -> tuple[NestedField, ...]:
    """The fields directly inside a nested type; none for a primitive."""
    if isinstance(type_, StructType):
        return type_.fields
    if isinstance(type_, ListType):
        return (type_.element_field,)
    if isinstance(type_, MapType):
        return (type_.key_field, type_.value_field)
    return ()


@dataclass(frozen=True)
class Schema:
    """A table schema: top-level fields, its id, and the identifier (row key) field ids."""

    fields: tuple[NestedField, ...]
    schema_id: int = 0
    identifier_field_ids: tuple[int, ...] = ()

    @property
    def struct(self) -> StructType:
        """The schema's top-level fields as a struct type."""
        return StructType(self.fields)

    @cached_property
    def _by_id(self) -> dict[int, NestedField]:
        index: dict[int, NestedField] = {}

        def visit(fields: tuple[NestedField, ...]) -> None:
            for f in fields:
                index[f.field_id] = f
                visit(child_fields(f.type))

        visit(self.fields)
        return index

    @cached_property
    def _by_name(self) -> dict[str, int]:
        """Dotted names of every field reachable through structs (`a.b`), lower-cased too."""
        names: dict[str, int] = {}

        def visit(prefix: str, fields: tuple[NestedField, ...]) -> None:
            for f in fields:
                name = f"{prefix}{f.name}"
                names[name] = f.field_id
                if isinstance(f.type, StructType):
                    visit(name + ".", f.type.fields)

        visit("", self.fields)
        return names

    @cached_property
    def _by_lower_name(self) -> dict[str, int]:
        return {name.lower(): fid for name, fid in self._by_name.items()}

    def find_field(self, field_id: int) -> NestedField:
        """The field with this id at any depth; SchemaError if the schema has none."""
        try:
            return self._by_id[field_id]
        except KeyError:
            raise SchemaError(f"schema {self.schema_id} has no field with id {field_id}") from None

    def has_field(self, field_id: int) -> bool:
        """Whether a field with this id is in the schema at any depth."""
        return field_id in self._by_id

    def field_id(self, name: str, case_sensitive: bool = True) -> int:
        """The id of a column by (dotted) name; a clear error naming the column otherwise."""
        found = (self._by_name.get(name) if case_sensitive
                 else self._by_lower_name.get(name.lower()))
        if found is None:
            known = ", ".join(f.name for f in self.fields)
            raise SchemaError(f"unknown column {name!r} (columns: {known})")
        return found

    def column_name(self, field_id: int) -> str:
        """The dotted column name of a field id (`address.city`), as filters name it."""
        for name, fid in self._by_name.items():
            if fid == field_id:
                return name
        return self.find_field(field_id).name

    def field_ids(self) -> Iterator[int]:
        """Every field id in the schema, nested ones included."""
        return iter(self._by_id)

    def select(self, names: list[str], case_sensitive: bool = True) -> Schema:
        """A schema of the named top-level columns, in the order given."""
        by_id = {f.field_id: f for f in self.fields}
        chosen = []
        for name in names:
            fid = self.field_id(name, case_sensitive)
            if fid not in by_id:
                raise SchemaError(f"column {name!r} is nested; select its top-level column")
            chosen.append(by_id[fid])
        return Schema(tuple(chosen), self.schema_id, self.identifier_field_ids)

    def __str__(self) -> str:
        return "table {\n" + "\n".join(
            f"  {f.field_id}: {f.name}: {'required' if f.required else 'optional'} {f.type}"
            for f in self.fields) + "\n}"


def parse_type(obj: Any) -> IcebergType:
    """An Iceberg type from its JSON form in table metadata."""
    if isinstance(obj, str):
        return primitive(obj)
    kind = obj.get("type")
    if kind == "struct":
        return StructType(tuple(parse_field(f) for f in obj["fields"]))
    if kind == "list":
        return ListType(obj["element-id"], parse_type(obj["element"]),
                        bool(obj.get("element-required", False)))
    if kind == "map":
        return MapType(obj["key-id"], parse_type(obj["key"]), obj["value-id"],
                       parse_type(obj["value"]), bool(obj.get("value-required", False)))
    raise SchemaError(f"unknown Iceberg type {obj!r}")


def parse_field(obj: dict[str, Any]) -> NestedField:
    """A field from its JSON form in table metadata."""
    return NestedField(
        field_id=obj["id"], name=obj["name"], type=parse_type(obj["type"]),
        required=bool(obj.get("required", False)), doc=obj.get("doc"),
        initial_default=obj.get("initial-default"), write_default=obj.get("write-default"),
    )


def parse_schema(obj: dict[str, Any]) -> Schema:
    """A schema from its JSON form in table metadata."""
    struct = parse_type({**obj, "type": "struct"})
    assert isinstance(struct, StructType)
    return Schema(struct.fields, obj.get("schema-id", 0),
                  tuple(obj.get("identifier-field-ids", ())))
