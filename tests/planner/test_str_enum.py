"""`StrEnum`: a mode is its text to everything outside (==, hashing, JSON, messages) and a
member to the code that selects on it."""

from __future__ import annotations

import json
import pickle

from meltwater.planner.str_enum import StrEnum
from meltwater.stream.engine.changes.change_schema import EqualityDeletes


def test_a_member_is_its_text_to_comparisons_lookups_json_and_messages():
    mode = EqualityDeletes.TRUST_PAYLOAD
    assert mode == "trust-payload" and {"trust-payload": 1}[mode] == 1
    assert (str(mode), f"{mode}", f"{mode:>14}") == (
        "trust-payload", "trust-payload", " trust-payload")
    assert json.dumps({"mode": mode}) == '{"mode": "trust-payload"}'
    assert pickle.loads(pickle.dumps(mode)) is mode  # as Spark ships ChangeOptions


def test_named_finds_a_member_by_its_text_or_says_none():
    assert EqualityDeletes.named("resolve") is EqualityDeletes.RESOLVE
    assert EqualityDeletes.named(EqualityDeletes.RESOLVE) is EqualityDeletes.RESOLVE
    assert EqualityDeletes.named("Resolve") is None
    assert EqualityDeletes.texts() == ("resolve", "trust-payload")


def test_any_str_enum_prints_as_its_text():
    class Colour(StrEnum):
        DARK_RED = "dark-red"

    assert f"{Colour.DARK_RED}!" == "dark-red!" and repr(Colour.DARK_RED).startswith("<Colour")
