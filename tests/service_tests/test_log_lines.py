"""The service's log lines show a batch's phases (a mapping field) readably in both forms:
a JSON object in JSON lines, `key:value,...` in text lines."""

from __future__ import annotations

import json
import logging

from meltwater.service.logs import JsonFormatter, TextFormatter


def _record() -> logging.LogRecord:
    record = logging.LogRecord("meltwater.service", logging.INFO, __file__, 1,
                               "batch committed", None, None)
    record.fields = {"batch": 5, "phases_ms": {"addBatch": 222, "walCommit": 86}}
    return record


def test_a_mapping_field_is_an_object_in_json_and_pairs_in_text():
    document = json.loads(JsonFormatter().format(_record()))
    assert document["phases_ms"] == {"addBatch": 222, "walCommit": 86}
    line = TextFormatter().format(_record())
    assert line.endswith("batch committed  batch=5 phases_ms=addBatch:222,walCommit:86")
