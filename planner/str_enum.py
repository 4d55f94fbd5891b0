"""Named choices (an option's modes, a setting's values) as enums of their own text.

A member is a `str` equal to the text a user writes (`SchemaChange.FAIL == "fail"`), so
options, JSON and TOML values compare, hash and look up as it, and it prints as that text
in messages; code selects behaviour by member (`mode is SchemaChange.FAIL`), and a typo in
a comparison is an AttributeError instead of a branch never taken. Python 3.11's
`enum.StrEnum`, which 3.10 lacks.
"""

from __future__ import annotations

import enum
from typing import TypeVar

_E = TypeVar("_E", bound="StrEnum")


class StrEnum(str, enum.Enum):
    """An enum whose members are their values' text (see the module doc)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def named(cls: type[_E], text: str) -> _E | None:
        """The member whose text is `text`; None if there is none."""
        try:
            return cls(text)
        except ValueError:
            return None

    @classmethod
    def texts(cls) -> tuple[str, ...]:
        """Every member's text, in definition order (for messages and argparse choices)."""
        return tuple(str(member.value) for member in cls)
