"""The `meltwater` Spark source's batch reads against Apache Iceberg Java and meltwater's own
change API, on every corpus scenario, through one local Spark session (the `spark` fixture).

Snapshot reads (current and time travel) must return what Iceberg Java read; change reads
must return exactly the rows of `meltwater.stream.changes` for the same range; filters
Spark pushes to meltwater must give the truth filtered with Spark's semantics (NaN above
every number, null comparisons not true), and the pushed ones must be gone from Spark's
plan. Pure-Python tests (partitions pickle, filter translation) need no Spark.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import pickle
import re
import subprocess
import sys
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNull,
    LessThan,
    Not,
    StringEndsWith,
    StringStartsWith,
)

import meltwater.stream
from corpus import WRITERS_2026
from corpus.compare import assert_same_rows
from corpus.pyiceberg_corpus import PYICEBERG_SCENARIOS
from meltwater.planner.spec.types import (
    DOUBLE,
    LONG,
    STRING,
    NestedField,
    Schema,
    StructType,
)
from meltwater.planner.table.table_loading import load_table
from meltwater.stream.engine.decode.arrow_filter import to_arrow_filter
from meltwater.stream.spark.batch_reader import MeltwaterBatchReader
from meltwater.stream.spark.filters import translate, translate_filters
from meltwater.stream.spark.partitions import ChangePartition, SnapshotPartition
from meltwater.stream.spark.source import MeltwaterDataSource, change_schema_for

ALL = ["mor_partitioned", "cow_partitioned", "equality_deletes", "equality_global",
       "position_deletes_with_rows", "maintenance", "evolution", "format_v1",
       "v3_deletion_vectors", "random_mix", "file_formats", "column_evolution", *WRITERS_2026,
       *PYICEBERG_SCENARIOS]
UTC = dt.timezone.utc


def _live(scenario, table):
    return [s for s in scenario.snapshots
            if not s.expired and s.snapshot_id in table.metadata.snapshots]


def _collect(df) -> pa.Table:
    return df.toArrow()


def _spark_filters(df) -> list[str]:
    """The Filter operators of the physical plan: what Spark still evaluates itself."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return [line for line in plan.splitlines() if re.search(r"\bFilter\b", line)]


def _reader(options: dict[str, str]) -> MeltwaterBatchReader:
    """A batch reader built as Spark builds it: schema() on the source, then reader()."""
    source = MeltwaterDataSource(options)
    return source.reader(source.schema())


# -- snapshot reads ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_current_and_time_travel_reads_equal_iceberg_java(spark, corpus, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    live = _live(scenario, table)
    current = table.metadata.current_snapshot.snapshot_id
    truth = scenario.snapshot(current)
    rows = _collect(spark.read.format("meltwater").load(scenario.location))
    assert_same_rows(rows, truth.rows(), f"{name} current ({current})")
    older = [s for s in live if s.snapshot_id != current][-2:]
    assert len(older) == 2
    for snap in older:
        rows = _collect(spark.read.format("meltwater")
                        .option("snapshot-id", str(snap.snapshot_id)).load(scenario.location))
        assert_same_rows(rows, snap.rows(), f"{name} at {snap.snapshot_id} ({snap.label})")


def test_time_travel_by_timestamp_branch_and_tag(spark, corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    metadata = load_table(scenario.location).metadata
    by_id = {s.snapshot_id: s for s in scenario.snapshots}
    for ref in ("audit", "before_branch"):
        kind = metadata.refs[ref].type
        snap = by_id[metadata.refs[ref].snapshot_id]
        rows = _collect(spark.read.format("meltwater").option(kind, ref)
                        .load(scenario.location))
        assert_same_rows(rows, snap.rows(), f"{kind} {ref}")
    main = [by_id[s.snapshot_id] for s in metadata.ancestors(metadata.current_snapshot_id)]
    middle = main[len(main) // 2]
    moment = dt.datetime.fromtimestamp(middle.timestamp_ms / 1000, UTC).isoformat()
    rows = _collect(spark.read.format("meltwater").option("as-of-timestamp", moment)
                    .load(scenario.location))
    assert_same_rows(rows, middle.rows(), f"as of {moment}")


def test_a_given_schema_selects_columns(spark, corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    rows = _collect(spark.read.format("meltwater").schema("category string, id bigint")
                    .load(scenario.location))
    current = load_table(scenario.location).metadata.current_snapshot_id
    truth = scenario.snapshot(current).rows().select(["category", "id"])
    assert_same_rows(rows, truth, "given schema")
    with pytest.raises(Exception, match="not columns of the table"):
        spark.read.format("meltwater").schema("nope int").load(scenario.location).collect()


def test_sql_temporary_view(spark, corpus):
    scenario = corpus.scenarios["cow_partitioned"]
    snap = scenario.snapshots[2]
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW mw_cow USING meltwater OPTIONS "
              f"(path '{scenario.location}', 'snapshot-id' '{snap.snapshot_id}')")
    try:
        rows = spark.sql("SELECT * FROM mw_cow").toArrow()
        assert_same_rows(rows, snap.rows(), "SQL view")
    finally:
        spark.catalog.dropTempView("mw_cow")


# -- filters -----------------------------------------------------------------------------------


def _when(value, test):
    return value is not None and test(value)


def _spark_gt(value, bound):
    """Spark's `>` on doubles: NaN is greater than every number."""
    return value is not None and (math.isnan(value) or value > bound)


# (scenario, Spark SQL condition, the same on truth rows, pushed conjuncts gone from the plan)
FILTERS = [
    ("mor_partitioned", "id > 50 and category = 'a'",
     lambda r: _when(r["id"], lambda v: v > 50) and r["category"] == "a", True),
    ("cow_partitioned", "d < date'2024-02-01' and region in ('east', 'west')",
     lambda r: _when(r["d"], lambda v: v < dt.date(2024, 2, 1))
     and r["region"] in ("east", "west"), True),
    ("position_deletes_with_rows", "name like 'n1%'",
     lambda r: _when(r["name"], lambda v: v.startswith("n1")), True),
    ("random_mix", "dbl > 0 and not (i <=> 3) and ts_ntz < timestamp_ntz'2024-01-03 00:00:00'",
     lambda r: _spark_gt(r["dbl"], 0) and r["i"] != 3
     and _when(r["ts_ntz"], lambda v: v < dt.datetime(2024, 1, 3)), True),
    ("random_mix", "dec >= 0 and ts >= timestamp'2024-01-02 00:00:00' and not (s like 'a%')",
     lambda r: _when(r["dec"], lambda v: v >= Decimal(0))
     and _when(r["ts"], lambda v: v >= dt.datetime(2024, 1, 2, tzinfo=UTC))
     and _when(r["s"], lambda v: not v.startswith("a")), True),
    # an Or reaches the source as nothing to push: Spark filters, the answer is the same
    ("equality_deletes", "name is null or id in (4, 40, 51)",
     lambda r: r["name"] is None or r["id"] in (4, 40, 51), False),
]


@pytest.mark.parametrize(("name", "condition", "keep", "pushed"), FILTERS)
def test_filtered_read_equals_truth_filtered(spark, corpus, name, condition, keep, pushed):
    scenario = corpus.scenarios[name]
    truth = scenario.snapshots[-1]
    assert truth.snapshot_id == load_table(scenario.location).metadata.current_snapshot_id
    df = (spark.read.format("meltwater").load(scenario.location).where(condition))
    rows = _collect(df)
    expected = truth.rows()
    expected = pa.Table.from_pylist([r for r in expected.to_pylist() if keep(r)],
                                    schema=expected.schema)
    assert_same_rows(rows, expected, f"{name} where {condition}")
    if pushed:
        assert not _spark_filters(df), f"{condition}: Spark still filters {_spark_filters(df)}"
    else:
        assert _spark_filters(df)


def test_unsupported_filters_go_back_to_spark(spark, corpus):
    scenario = corpus.scenarios["position_deletes_with_rows"]
    df = spark.read.format("meltwater").load(scenario.location).where(
        "name like '%5' and id > 3")
    (filter_line,) = _spark_filters(df)
    assert "EndsWith" in filter_line and "> 3" not in filter_line, filter_line
    rows = _collect(df)
    expected = [r for r in scenario.snapshots[-1].rows().to_pylist()
                if r["name"] is not None and r["name"].endswith("5") and r["id"] > 3]
    assert rows.num_rows == len(expected)


def test_push_filters_logs_what_was_pushed_and_returned(corpus, caplog):
    scenario = corpus.scenarios["mor_partitioned"]
    reader = _reader({"path": scenario.location})
    supported = GreaterThan(("id",), 50)
    unsupported = StringEndsWith(("category",), "a")
    with caplog.at_level(logging.INFO, logger="meltwater.stream.spark.batch_reader"):
        returned = list(reader.pushFilters([supported, unsupported]))
        reader.partitions()
    assert returned == [unsupported] and returned[0] is unsupported
    text = caplog.text
    assert "1 pushed" in text and "id > 50" in text and "1 returned to Spark" in text
    assert "StringEndsWith" in text and "tasks in" in text


# -- change reads ------------------------------------------------------------------------------


def _start(scenario, table) -> int:
    """The oldest live snapshot: changes after it need no expired history."""
    return _live(scenario, table)[0].snapshot_id


@pytest.mark.parametrize("name", ALL)
def test_change_reads_equal_meltwater_changes(spark, corpus, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    start = _start(scenario, table)
    rows = _collect(spark.read.format("meltwater").option("start-snapshot-id", str(start))
                    .load(scenario.location))
    expected = meltwater.stream.changes(table, from_snapshot_id=start).read_all()
    assert expected.num_rows > 0
    assert_same_rows(rows, expected, f"{name} changes after {start}")


@pytest.mark.parametrize("name", ["equality_deletes", "equality_global"])
def test_change_reads_through_a_key_index_equal_meltwater_changes(spark, corpus, tmp_path,
                                                                   name):
    """Executors keep the table's key index under `key-index-dir`: built by the first read,
    used by the second; both give the engine's rows."""
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    start = _start(scenario, table)
    expected = meltwater.stream.changes(table, from_snapshot_id=start).read_all()
    for _ in range(2):
        rows = _collect(spark.read.format("meltwater").option("start-snapshot-id", str(start))
                        .option("key-index-dir", str(tmp_path)).load(scenario.location))
        assert_same_rows(rows, expected, f"{name} changes after {start}, key index")
    assert list(tmp_path.rglob("catalog.json")), "the executors kept no index"


def test_net_changes_and_updates_through_spark(spark, corpus):
    scenario = corpus.scenarios["equality_deletes"]  # identifier field: id
    table = load_table(scenario.location)
    start = _start(scenario, table)
    for options, kwargs in (({"net-changes": "true"}, {"net": True}),
                            ({"computeUpdates": "true", "deduplicationMode": "none"},
                             {"compute_updates": True, "keep_carryover": True})):
        df = (spark.read.format("meltwater").option("start-snapshot-id", str(start))
              .options(**options).load(scenario.location))
        expected = meltwater.stream.changes(table, from_snapshot_id=start, **kwargs).read_all()
        assert_same_rows(_collect(df), expected, f"changes with {options}")
    kinds = set(expected.column("_change_type").to_pylist())
    assert {"UPDATE_BEFORE", "UPDATE_AFTER"} <= kinds


def test_spark_aliases_are_inclusive_iceberg_names_exclusive(spark, corpus):
    scenario = corpus.scenarios["mor_partitioned"]
    table = load_table(scenario.location)
    lineage = list(reversed(table.metadata.ancestors(table.metadata.current_snapshot_id)))
    first, second, third, fourth = (s.snapshot_id for s in lineage[:4])

    def commits(df) -> list[int]:
        return sorted(set(_collect(df.select("_commit_snapshot_id")).column(0).to_pylist()),
                      key=[s.snapshot_id for s in lineage].index)

    reader = spark.read.format("meltwater")
    spark_names = reader.option("startingVersion", str(second)).option(
        "endingVersion", str(fourth)).load(scenario.location)
    assert commits(spark_names) == [second, third, fourth]
    iceberg_names = spark.read.format("meltwater").option("start-snapshot-id", str(second)) \
        .option("end-snapshot-id", str(fourth)).load(scenario.location)
    assert commits(iceberg_names) == [third, fourth]
    whole = spark.read.format("meltwater").option("startingVersion", str(first)).option(
        "endingVersion", str(second)).load(scenario.location)
    assert commits(whole) == [first, second]
    expected = meltwater.stream.changes(table, from_snapshot_id=first,
                                        to_snapshot_id=fourth).read_all()
    assert_same_rows(_collect(spark_names), expected, "startingVersion..endingVersion")


def test_change_read_filter_is_pushed_without_pairing(spark, corpus):
    scenario = corpus.scenarios["cow_partitioned"]
    table = load_table(scenario.location)
    start = _start(scenario, table)
    df = (spark.read.format("meltwater").option("start-snapshot-id", str(start))
          .load(scenario.location).where("region = 'east'"))
    expected = meltwater.stream.changes(table, from_snapshot_id=start,
                                        filter="region = 'east'").read_all()
    assert_same_rows(_collect(df), expected, "filtered changes")
    assert not _spark_filters(df)


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({"snapshot-id": "abc"}, "option snapshot-id='abc': expected an integer"),
    ({"snapshot-id": "12345"}, "12345"),
    ({"branch": "a", "tag": "b"}, "options branch and tag exclude each other"),
    ({"deduplicationMode": "sometimes", "start-snapshot-id": "1"},
     "option deduplicationMode='sometimes'"),
])
def test_bad_options_fail_with_meltwaters_message(spark, corpus, options, message):
    location = corpus.scenarios["format_v1"].location
    with pytest.raises(Exception, match=re.escape(message)):
        spark.read.format("meltwater").options(**options).load(location).collect()


def test_missing_table_fails_with_meltwaters_message(spark, tmp_path):
    with pytest.raises(Exception, match="NoSuchTableError") as raised:
        spark.read.format("meltwater").load(str(tmp_path / "nowhere")).collect()
    assert "nowhere" in str(raised.value)


# -- partitions and schemas, without Spark jobs -------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_every_partition_pickles_and_reads_alone(corpus, name):
    scenario = corpus.scenarios[name]
    table = load_table(scenario.location)
    start = str(_start(scenario, table))
    for options, kind in (({}, SnapshotPartition),
                          ({"start-snapshot-id": start}, ChangePartition),
                          ({"start-snapshot-id": start, "net-changes": "true"},
                           ChangePartition)):
        reader = _reader({"path": scenario.location, **options})
        reader.pushFilters([])
        partitions = reader.partitions()
        assert partitions and all(isinstance(p, kind) for p in partitions)
        shipped = pickle.loads(pickle.dumps(reader))
        assert shipped._table is None
        rows = [b for p in partitions for b in shipped.read(pickle.loads(pickle.dumps(p)))]
        target = rows[0].schema if rows else None
        assert all(b.schema.equals(target) for b in rows)
        assert [f.name for f in target] == reader.schema.fieldNames()
        if options.get("net-changes"):
            assert len(partitions) == 1


def test_change_schema_for_streams(corpus):
    scenario = corpus.scenarios["v3_deletion_vectors"]
    schema = change_schema_for({"path": scenario.location})
    names = schema.fieldNames()
    assert names[-7:] == ["_row_id", "_last_updated_sequence_number", "_change_type",
                          "_change_ordinal", "_commit_snapshot_id",
                          "_commit_sequence_number", "_commit_timestamp"]
    plain = MeltwaterDataSource({"path": scenario.location}).schema()
    assert "_change_type" not in plain.fieldNames()
    streaming = MeltwaterDataSource({"path": scenario.location, "starting": "earliest"})
    assert streaming.schema() == schema


def test_only_spark_modules_import_pyspark():
    """Importing any module of `stream.engine` or `stream.watch` (and the planner) leaves
    pyspark unimported: only `stream.spark` touches Spark."""
    code = ("import sys, pkgutil, importlib, meltwater.stream as s, meltwater.planner as p\n"
            "assert 'pyspark' not in sys.modules, 'meltwater.stream imports pyspark'\n"
            "names = [m.name for m in pkgutil.walk_packages(s.__path__, 'meltwater.stream.')\n"
            "         if not m.name.startswith('meltwater.stream.spark')]\n"
            "names += [m.name for m in pkgutil.iter_modules(p.__path__, 'meltwater.planner.')]\n"
            "assert 'meltwater.stream.engine.scans.reader' in names, names\n"
            "for name in names:\n"
            "    importlib.import_module(name)\n"
            "    assert 'pyspark' not in sys.modules, name + ' imports pyspark'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- filter translation ------------------------------------------------------------------------

SCHEMA = Schema((
    NestedField(1, "id", LONG, required=True),
    NestedField(2, "name", STRING),
    NestedField(3, "x", DOUBLE),
    NestedField(4, "opt", StructType((NestedField(5, "a", LONG, required=True),))),
    NestedField(6, "req", StructType((NestedField(7, "b", LONG),)), required=True),
))
ROWS = pa.table({
    "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
    "name": ["a", None, "ab", "b", None],
    "x": [1.0, float("nan"), None, -2.0, 5.0],
    "opt": [{"a": 1}, None, {"a": 3}, None, {"a": 5}],
    "req": [{"b": 1}, {"b": None}, {"b": 3}, {"b": 4}, {"b": None}],
})


def _kept(flt) -> list[int]:
    expression = translate(flt, SCHEMA)
    assert expression is not None, f"{flt} not translated"
    return ROWS.filter(to_arrow_filter(expression, SCHEMA)).column("id").to_pylist()


def test_filters_translate_with_spark_semantics():
    assert _kept(EqualNullSafe(("name",), None)) == [2, 5]
    assert _kept(Not(EqualNullSafe(("name",), "a"))) == [2, 3, 4, 5]  # nulls are not 'a'
    assert _kept(Not(EqualTo(("name",), "a"))) == [3, 4]  # null <> 'a' is null
    assert _kept(GreaterThan(("x",), 0.5)) == [1, 2, 5]  # NaN is above every number
    assert _kept(Not(LessThan(("x",), 0.5))) == [1, 2, 5]
    assert _kept(Not(GreaterThan(("x",), 0.5))) == [4]
    assert _kept(In(("name",), ("a", None))) == [1]
    assert _kept(Not(In(("id",), (1, 2)))) == [3, 4, 5]
    assert _kept(Not(StringStartsWith(("name",), "a"))) == [4]
    assert _kept(Not(Not(IsNull(("name",))))) == [2, 5]
    assert _kept(IsNull(("req", "b"))) == [2, 5]


def test_filters_left_to_spark():
    for flt in (Not(In(("name",), ("a", None))),  # never true: Spark decides
                EqualTo(("x",), float("nan")),
                In(("x",), (0.0, 1.0)),  # -0.0 = 0.0
                IsNull(("opt", "a")),  # required field of an optional struct
                StringEndsWith(("name",), "b"),
                EqualTo(("nope",), 1),
                EqualTo(("name",), 5)):
        assert translate(flt, SCHEMA) is None, flt
    expression, pushed, returned = translate_filters(
        [EqualTo(("id",), 1), StringEndsWith(("name",), "b")], SCHEMA)
    assert str(expression) == "id = 1" and len(pushed) == 1 and len(returned) == 1
