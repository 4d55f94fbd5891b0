"""Reading the tables of a TOML document, each problem one line naming the key by its path.

`TableReader` reads one table (`[service]`, `pipelines[0].sink`, ...): a key of the
expected TOML type, a child table, and at the end (`done`) every key it did not ask for
refused as unknown, with the nearest known key suggested. `choice` reads a key as a
member of an enum of its texts (`meltwater.planner.str_enum`), `duration` as seconds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

from meltwater.planner.str_enum import StrEnum
from meltwater.service.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|m|min|minutes?|h|hours?)\s*$")
_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
          "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600}


def parse_duration(text: str) -> float | None:
    """Seconds in `text` ("10s", "500ms", "1min"), or None if it is not a duration."""
    match = _DURATION.match(str(text))
    if not match:
        return None
    return float(match.group(1)) * _UNITS[match.group(2)]


def scalar_text(value: str | int | float | bool) -> str:
    """A TOML scalar as the text of a Spark option or catalog property (`true`, not
    Python's `True`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class TableReader:
    """Reads one table of the TOML document, naming keys by their path in errors."""

    def __init__(self, source: str, path: str, table: Any) -> None:
        self.source = source
        self.path = path
        if not isinstance(table, Mapping):
            self.fail("", f"expected a table, got {type(table).__name__}")
        self.table = dict(table)
        self.used: set[str] = set()

    def fail(self, key: str, problem: str) -> NoReturn:
        """Refuse the key (the table itself for ""): a ConfigError naming file and path."""
        where = ".".join(p for p in (self.path, key) if p) or "(top level)"
        raise ConfigError(f"{self.source}: {where}: {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None, *,
            required: bool = False) -> Any:
        """Key `key`, which must be of TOML type `kind` (an integer passes for a float);
        `default` if it is absent and not `required`."""
        self.used.add(key)
        if key not in self.table:
            if required:
                self.fail(key, "is required")
            return default
        value = self.table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            self.fail(key, f"expected {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            self.fail(key, f"expected {_kind_name(kind)}, got {type(value).__name__} "
                           f"{value!r}")
        return value

    def child(self, key: str) -> TableReader:
        """The reader of table `key` under this one (empty if absent)."""
        self.used.add(key)
        return TableReader(self.source, f"{self.path}.{key}" if self.path else key,
                           self.table.get(key, {}))

    def scalars(self) -> dict[str, str]:
        """Every key of this table, each a string, number or boolean, as text
        (`scalar_text`): a table of Spark options."""
        return {key: scalar_text(self.get(key, (str, int, float, bool)))
                for key in list(self.table)}

    def done(self) -> None:
        """Refuse the first key nothing asked for, as unknown."""
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            self.fail(unknown[0], "unknown key" + _suggest(unknown[0], self.used))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _suggest(key: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"


def dotted(reader: TableReader, table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A table of scalars with its nested tables flattened to dotted names
    (`s3.endpoint = ...` under `[catalogs.lake]` is `s3.endpoint`)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(dotted(reader, value, f"{prefix}{key}."))
        elif isinstance(value, (str, int, float, bool)):
            flat[f"{prefix}{key}"] = value
        else:
            reader.fail(f"{prefix}{key}", "expected a string, number or boolean")
    reader.used.update(table)
    return flat


_Choice = TypeVar("_Choice", bound=StrEnum)


def choice(reader: TableReader, key: str, kind: type[_Choice], default: _Choice) -> _Choice:
    """Key `key` as a member of `kind`; any other text is a ConfigError naming the choices."""
    text = reader.get(key, str, default)
    member = kind.named(text)
    if member is None:
        reader.fail(key, f"expected one of {', '.join(kind.texts())}, got {text!r}")
    return member


def duration(reader: TableReader, key: str, default: str) -> float:
    """Key `key` as seconds (`parse_duration`); anything else is a ConfigError."""
    text = reader.get(key, str, default)
    seconds = parse_duration(text)
    if seconds is None:
        reader.fail(key, f"expected a duration such as 500ms, 10s or 1min, got {text!r}")
    return float(seconds)
