"""Where a table is: a location, or a name in a catalog, and the properties to reach it.

Iceberg users name a table two ways, and every entry point of meltwater (CLI, Python API,
`format("meltwater")`, the watcher, the service) takes both:

- a **location**: a table directory (`/warehouse/db/orders`, `s3://bucket/db/orders`, any
  `pyarrow.fs` URI) or one `*.metadata.json` file;
- an **identifier** in a catalog: `lake.db.orders` (catalog `lake`, namespace `db`, table
  `orders`; namespaces may nest, `lake.sales.eu.orders`), or `db.orders` with the catalog
  named separately (`--catalog lake`, the Spark option `catalog`).

Catalogs are defined the way pyiceberg users already define them (`~/.pyiceberg.yaml`,
`PYICEBERG_CATALOG__<NAME>__<KEY>` environment variables), plus properties the caller gives
(the service's `[catalogs.NAME]`, the Spark source's `catalog.*` options), which win.

`parse_table_source` decides which of the two a text is, by these rules, in order:
1. a URI (`scheme://...`), anything with a `/` (identifiers have none), or a
   `*.metadata.json` name is a location;
2. with a catalog named separately, the text is `namespace.table` in it;
3. a dotted name whose first part names a known catalog is `catalog.namespace.table`;
4. a path that exists is a location;
5. a two-part `namespace.table` goes to pyiceberg's default catalog when one is configured;
6. anything else is refused, naming the known catalogs: never a guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from meltwater.planner.errors import CatalogError


@dataclass(frozen=True)
class TableIdentifier:
    """A table's name in a catalog: `catalog.namespace....table`."""

    catalog: str
    namespace: tuple[str, ...]
    name: str

    def __str__(self) -> str:
        return ".".join((self.catalog, *self.namespace, self.name))

    @property
    def in_catalog(self) -> tuple[str, ...]:
        """The identifier as the catalog knows it: namespace levels, then the table name."""
        return (*self.namespace, self.name)


@dataclass(frozen=True, repr=False)
class TableSource:
    """A table reference, resolved to a kind: exactly one of `location` and `identifier`.

    `catalog_properties` are the caller's properties for `identifier.catalog` (over what
    pyiceberg's configuration says); `io_properties` are FileIO properties (Iceberg's
    names: `s3.endpoint`, `s3.access-key-id`, ...) over whatever the catalog returns. Both
    may hold secrets: a source shows only its name (`str`, `repr`), and travels to Spark
    executors only inside partitions, never in offsets or logs.
    """

    location: str | None = None
    identifier: TableIdentifier | None = None
    catalog_properties: Mapping[str, str] = field(default_factory=dict)
    io_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.location is None) == (self.identifier is None):
            raise ValueError("a TableSource is a location or an identifier, exactly one")

    def __str__(self) -> str:
        return str(self.identifier) if self.identifier is not None else str(self.location)

    def __repr__(self) -> str:
        return f"TableSource({str(self)!r})"

    @property
    def is_catalog_table(self) -> bool:
        """Whether the table is named in a catalog (else it is a location)."""
        return self.identifier is not None

def _looks_like_location(text: str) -> bool:
    """A URI, a path (identifiers never hold a slash) or a metadata file name."""
    return ("://" in text or "/" in text or text.startswith("~") or "\\" in text
            or text.endswith(".metadata.json") or (len(text) > 1 and text[1] == ":"))


def _identifier(catalog: str, dotted: str, whole: str) -> TableIdentifier:
    parts = dotted.split(".")
    if len(parts) < 2 or not all(parts):
        raise CatalogError(f"table {whole!r}: expected namespace.table in catalog {catalog!r}")
    return TableIdentifier(catalog, tuple(parts[:-1]), parts[-1])


def parse_table_source(text: str, *, catalog: str | None = None,
                       catalog_properties: Mapping[str, Mapping[str, str]] | None = None,
                       io_properties: Mapping[str, str] | None = None) -> TableSource:
    """The table `text` names, by the rules in the module docstring.

    `catalog`: the catalog named separately (then `text` is `namespace.table`);
    `catalog_properties`: properties of catalogs by name, given by the caller (they make a
    catalog known even when pyiceberg's configuration lacks it).
    """
    from meltwater.planner.table.catalogs import default_catalog, known_catalogs

    given = dict(catalog_properties or {})
    io = dict(io_properties or {})
    text = text.strip()
    if not text:
        raise CatalogError("no table given: expected a location or catalog.namespace.table")
    if catalog is None and _looks_like_location(text):
        return TableSource(location=os.path.expanduser(text), io_properties=io)
    if catalog is not None:
        if _looks_like_location(text):  # never an identifier: it would be read as one
            raise CatalogError(f"table {text!r} is a location, not namespace.table in "
                               f"catalog {catalog!r}: give one or the other")
        identifier = _identifier(catalog, text, text)
        return TableSource(identifier=identifier, catalog_properties=given.get(catalog, {}),
                           io_properties=io)
    known = known_catalogs(given)
    first, _, rest = text.partition(".")
    if rest and first in known:
        return TableSource(identifier=_identifier(first, rest, text),
                           catalog_properties=given.get(first, {}), io_properties=io)
    if Path(text).exists():
        return TableSource(location=text, io_properties=io)
    default = default_catalog(given)
    if default is not None and text.count(".") == 1:
        return TableSource(identifier=_identifier(default, text, text),
                           catalog_properties=given.get(default, {}), io_properties=io)
    if "." in text:
        where = (f"known catalogs: {', '.join(sorted(known))}" if known else
                 "no catalog is configured: define one in ~/.pyiceberg.yaml or with "
                 f"PYICEBERG_CATALOG__{first.upper()}__URI=...")
        raise CatalogError(f"table {text!r}: no catalog named {first!r} and no such path "
                           f"({where})")
    raise CatalogError(f"table {text!r}: no such path, and not a catalog.namespace.table "
                       "name")
