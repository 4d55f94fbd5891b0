"""The modes users choose (Spark options, the Python API, `meltwater serve`'s TOML, the
CLI's `--format`) become enum members where they are parsed, so the code selects on
members; an unknown one is refused in one line quoting the user's words."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from meltwater.output.errors import OutputError
from meltwater.output.writers import OutputFormat, write_stream
from meltwater.service.config import ConfigError, ProgressMode, Trigger, parse_config
from meltwater.service.logs import LogFormat
from meltwater.stream.engine.changes.change_schema import (
    ChangeOptions,
    ChangeTypeNames,
    EqualityDeletes,
)
from meltwater.stream.errors import ChangeOptionError, OptionError
from meltwater.stream.spark.options import stream_read
from meltwater.stream.watch.stream_modes import SchemaChange, Starting

PATH = {"path": "/warehouse/db/t"}  # parsing only: nothing is read


def test_spark_options_become_members_case_as_before():
    read = stream_read({**PATH, "schema-change": "FAIL", "starting": "Latest",
                        "equality-deletes": "trust-payload", "change-type-names": "delta"})
    assert read.schema_change is SchemaChange.FAIL and read.starting is Starting.LATEST
    assert read.rows.equality_deletes is EqualityDeletes.TRUST_PAYLOAD
    assert read.rows.change_type_names is ChangeTypeNames.DELTA
    defaults = stream_read(PATH)
    assert (defaults.schema_change, defaults.starting) == (SchemaChange.PROJECT, Starting.EARLIEST)
    assert stream_read({**PATH, "startingVersion": "latest"}).starting is Starting.LATEST


@pytest.mark.parametrize(("option", "value", "message"), [
    ("schema-change", "Ignore", "option schema-change='Ignore': expected project or fail"),
    ("starting", "Sometime", "option starting='Sometime': expected earliest or latest"),
    ("equality-deletes", "trust", "option equality-deletes='trust': expected resolve or "
                                  "trust-payload"),
    ("change-type-names", "Delta", "option change-type-names='Delta': expected iceberg or "
                                   "delta"),
])
def test_an_unknown_spark_option_value_is_refused_in_the_users_words(option, value, message):
    with pytest.raises(OptionError) as raised:
        stream_read({**PATH, option: value})
    assert str(raised.value) == message


def test_the_python_api_takes_modes_as_text_or_members():
    assert ChangeOptions(equality_deletes="trust-payload").equality_deletes is \
        EqualityDeletes.TRUST_PAYLOAD
    assert ChangeOptions(change_type_names=ChangeTypeNames.DELTA).change_type_names is \
        ChangeTypeNames.DELTA
    with pytest.raises(ChangeOptionError, match=r"change type names 'spark' \(choose from "
                                                r"iceberg, delta\)"):
        ChangeOptions(change_type_names="spark")


def _config(service: dict | None = None, trigger: str = "event") -> dict:
    return {"service": service or {},
            "pipelines": [{"name": "p", "table": "/warehouse/db/t", "checkpoint": "/tmp/c",
                           "trigger": trigger, "sink": {"type": "console"}}]}


def test_service_settings_become_members():
    config = parse_config(_config({"log": "json", "progress": "off"}, "available-now"))
    assert config.log_format is LogFormat.JSON and config.progress is ProgressMode.OFF
    assert config.pipelines[0].trigger is Trigger.AVAILABLE_NOW
    interval = parse_config(_config(trigger="10s")).pipelines[0]
    assert (interval.trigger, interval.interval_s) == (Trigger.INTERVAL, 10.0)
    with pytest.raises(ConfigError, match=r"service.progress: expected one of auto, lines, "
                                          r"off, got 'sometimes'"):
        parse_config(_config({"progress": "sometimes"}))
    with pytest.raises(ConfigError, match=re.escape(
            'pipelines[0].trigger: expected "event", "available-now" or an interval')):
        parse_config(_config(trigger="interval"))


def test_output_formats_are_members_and_an_unknown_one_is_refused(capsys):
    reader = pa.RecordBatchReader.from_batches(pa.schema([("id", pa.int64())]),
                                               [pa.record_batch([[1, 2]], names=["id"])])
    assert write_stream(reader, OutputFormat.JSONL) == 2
    assert capsys.readouterr().out == '{"id": 1}\n{"id": 2}\n'
    with pytest.raises(OutputError, match=r"unknown output format 'xml' \(choose from table, "
                                          r"jsonl, csv, parquet\)"):
        write_stream(reader, "xml")
