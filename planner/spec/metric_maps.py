"""Column metrics of a manifest entry, turned into Python values only when asked for.

A manifest entry carries six maps keyed by field id (column sizes, value, null and NaN
counts, lower and upper bounds). A scan without a filter reads none of them for data files,
and a filter reads the one or two columns it names, yet building them eagerly was a third
of decoding a manifest (each bound a `from_bytes` call, each map a dict). `MetricMap`
keeps fastavro's `[{"key": id, "value": ...}]` list as it came and builds its index on first
use; bounds are then decoded per field on first lookup, so a filter on one column of a wide
table decodes one bound per file, not all of them.

A `MetricMap` is a read-only `Mapping`: it compares equal to a dict with the same items,
and pickles as one (tasks sent to executors carry plain dicts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

Decode = Callable[[int, Any], Any]
_ABSENT = object()  # no such metric, or one that cannot be decoded
_UNSEEN = object()  # not looked up yet


class MetricMap(Mapping[int, Any]):
    """Field id -> metric, from fastavro's key/value records, indexed and decoded lazily.

    `decode(field_id, raw)` turns a raw value into its Python value; it raises
    ValueError, TypeError or ArithmeticError (or returns `None`) for a value that cannot be
    decoded, and such a field reads as absent: an undecodable bound only costs pruning.
    Without `decode`, values are used as they are (counts and sizes).
    """

    __slots__ = ("_decode", "_pairs", "_raw", "_values")

    def __init__(self, pairs: list[dict[str, Any]], decode: Decode | None = None) -> None:
        self._pairs: list[dict[str, Any]] | None = pairs
        self._decode = decode
        self._raw: dict[int, Any] | None = None
        self._values: dict[int, Any] = {}

    def _index(self) -> dict[int, Any]:
        # Entries are shared by planning threads: `_raw` is set before `_pairs` is dropped,
        # so a thread that finds no pairs finds the index another thread built.
        raw = self._raw
        if raw is None:
            pairs = self._pairs
            if pairs is None:
                return self._raw  # type: ignore[return-value]
            raw = {p["key"]: p["value"] for p in pairs}
            if self._decode is None:
                self._values = raw
            self._raw = raw
            self._pairs = None
        return raw

    def get(self, field_id: int, default: Any = None) -> Any:
        """The metric of `field_id`, decoded on first use; `default` when absent or undecodable."""
        value = self._values.get(field_id, _UNSEEN)
        if value is _UNSEEN:
            value = self._lookup(field_id)
        return default if value is _ABSENT else value

    def _lookup(self, field_id: int) -> Any:
        raw = self._index()
        if self._decode is None or field_id not in raw:
            return raw.get(field_id, _ABSENT)
        try:
            value = self._decode(field_id, raw[field_id])
        except (ValueError, TypeError, ArithmeticError):
            value = None
        if value is None:
            value = _ABSENT
        self._values[field_id] = value
        return value

    def __getitem__(self, field_id: int) -> Any:
        value = self.get(field_id, _ABSENT)
        if value is _ABSENT:
            raise KeyError(field_id)
        return value

    def __contains__(self, field_id: object) -> bool:
        return isinstance(field_id, int) and self.get(field_id, _ABSENT) is not _ABSENT

    def as_dict(self) -> dict[int, Any]:
        """Every decodable metric, decoded."""
        found = {}
        for field_id in self._index():
            value = self.get(field_id, _ABSENT)
            if value is not _ABSENT:
                found[field_id] = value
        return found

    def __iter__(self) -> Iterator[int]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

    def __repr__(self) -> str:
        return repr(self.as_dict())

    def __reduce__(self) -> tuple[type, tuple[dict[int, Any]]]:
        return dict, (self.as_dict(),)
