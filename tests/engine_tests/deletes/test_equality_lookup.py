"""The shared equality lookup: which rows a set of equality deletes removes, and when.

A scan applies a table's equality deletes as one lookup (key -> the newest delete holding
it), a change read asks when a row was first deleted (`first_after`) and extends the lookup
of the deletes live before a commit by the ones it added. These check each rule on small
delete files, with the spec's null-safe matching and type promotion, in both codings of
`EqualityKeySet` (binary search over one orderable column, hashing otherwise).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from engine_tests.helpers import F, equality_deletes
from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet
from meltwater.planner.spec.files import DataFile, FileContent
from meltwater.planner.table.fileio import PyArrowFileIO
from meltwater.stream.engine.deletes import equality_keys
from meltwater.stream.engine.deletes.equality_lookup import (
    LookupKey,
    Lookups,
    equality_lookup,
    extended_lookup,
    restricted_lookup,
)
from meltwater.stream.engine.deletes.loader import DeleteLoader

IO = PyArrowFileIO()
LONG = pa.int64()
ID = {1: LONG}
PATH = {1: ("id",)}


@pytest.fixture(params=["sorted", "hashed"])
def coding(request, monkeypatch):
    """Both codings of a key: binary search (one orderable column) and hashing."""
    if request.param == "hashed":
        monkeypatch.setattr(equality_keys, "_is_ordered", lambda _type: False)
    return request.param


def _ids(tmp_path, name: str, ids: list[int | None], type_=LONG) -> DataFile:
    table = pa.table({"id": pa.array(ids, type_)}, schema=pa.schema([F("id", type_, 1)]))
    return equality_deletes(tmp_path / name, table, (1,))


def _data(partition: tuple = ()) -> DataFile:
    return DataFile(FileContent.DATA, "/d.parquet", "PARQUET", 0 if not partition else 1,
                    partition, 5, 100)


def _batch(ids: list[int | None], type_=LONG) -> pa.RecordBatch:
    return pa.record_batch([pa.array(ids, type_)], names=["id"])


def _listed(array: pa.Array | None, n: int, empty) -> list:
    """An answer as a list; None (nothing can apply) as `n` times `empty`."""
    return [empty] * n if array is None else array.to_pylist()


@pytest.mark.usefixtures("coding")
def test_a_row_is_deleted_when_a_newer_delete_holds_its_key(tmp_path):
    e1 = DeleteFileRef(_ids(tmp_path, "e1.parquet", [1, 2]), 5)
    e2 = DeleteFileRef(_ids(tmp_path, "e2.parquet", [2, 3]), 8)
    lookup = equality_lookup(EqualityDeleteSet((e1, e2)), DeleteLoader(IO), ID, PATH)
    batch = _batch([1, 2, 3, 4])
    assert lookup.deleted(batch, _data(), 6).to_pylist() == [False, True, True, False]
    assert lookup.deleted(batch, _data(), 4).to_pylist() == [True, True, True, False]
    assert lookup.deleted(batch, _data(), 9) is None  # nothing that new
    # the first delete to remove each row of a file of sequence number 4, then of 5
    assert lookup.first_after(batch, _data(), 4).to_pylist() == [5, 5, 8, None]
    assert lookup.first_after(batch, _data(), 5).to_pylist() == [None, 8, 8, None]


@pytest.mark.usefixtures("coding")
def test_null_keys_match_null_keys_only_and_narrow_data_is_widened(tmp_path):
    e = DeleteFileRef(_ids(tmp_path, "e.parquet", [None, 7]), 3)
    lookup = equality_lookup(EqualityDeleteSet((e,)), DeleteLoader(IO), {1: pa.int32()},
                             PATH)
    got = lookup.deleted(_batch([None, 7, 8], pa.int32()), _data(), 1)
    assert got.to_pylist() == [True, True, False]


@pytest.mark.usefixtures("coding")
def test_a_partition_scoped_delete_applies_in_its_partition_only(tmp_path):
    scoped = DataFile(FileContent.EQUALITY_DELETES, str(tmp_path / "s.parquet"), "PARQUET",
                      1, ("a",), 1, 1, equality_ids=(1,))
    _ids(tmp_path, "s.parquet", [1])
    lookup = equality_lookup(EqualityDeleteSet((), (DeleteFileRef(scoped, 4),)),
                             DeleteLoader(IO), ID, PATH)
    batch = _batch([1, 2])
    assert lookup.deleted(batch, _data(("a",)), 2).to_pylist() == [True, False]
    assert lookup.deleted(batch, _data(("b",)), 2) is None


@pytest.mark.usefixtures("coding")
def test_an_extended_lookup_answers_as_one_built_whole(tmp_path):
    """A range's commits extend the lookup one delete file at a time, merging layers of
    like size: the answers are those of a lookup of every file at once."""
    loader = DeleteLoader(IO)
    refs = [DeleteFileRef(_ids(tmp_path, f"e{i}.parquet", [i, i + 1, 2 * i]), 10 + i)
            for i in range(7)]
    batch = _batch(list(range(16)))
    lookup = equality_lookup(EqualityDeleteSet(tuple(refs[:1])), loader, ID, PATH)
    for count in range(2, len(refs) + 1):
        lookup = extended_lookup(lookup, EqualityDeleteSet((refs[count - 1],)),
                                 EqualityDeleteSet(tuple(refs[:count])), loader, ID, PATH)
        whole = equality_lookup(EqualityDeleteSet(tuple(refs[:count])), DeleteLoader(IO),
                                ID, PATH)
        for seq in (0, 11, 13):
            n = batch.num_rows
            assert (_listed(lookup.deleted(batch, _data(), seq), n, False)
                    == _listed(whole.deleted(batch, _data(), seq), n, False))
            assert (_listed(lookup.first_after(batch, _data(), seq), n, None)
                    == _listed(whole.first_after(batch, _data(), seq), n, None))
    assert len(lookup.layers) < len(refs)  # merged, not a layer per file


@pytest.mark.usefixtures("coding")
def test_a_lookup_not_cached_extends_the_newest_of_a_subset(tmp_path, monkeypatch):
    """A stream's executor that read commit 3 and is then given commit 6 (commits 4 and 5
    went to another executor) extends its lookup of deletes 1..3 by 4..5 rather than
    building all five anew; the answers are a whole build's. A set that is not a superset
    of the newest (a file removed) is built whole."""
    import meltwater.stream.engine.deletes.equality_lookup as module

    refs = [DeleteFileRef(_ids(tmp_path, f"e{i}.parquet", [i, 2 * i]), 10 + i)
            for i in range(6)]
    loader = DeleteLoader(IO)
    equality_lookup(EqualityDeleteSet(tuple(refs[:3])), loader, ID, PATH)
    built: list[int] = []
    original = module._build
    monkeypatch.setattr(module, "_build", lambda equality, *rest: (
        built.append(len(equality)), original(equality, *rest))[1])
    later = equality_lookup(EqualityDeleteSet(tuple(refs[:5])), loader, ID, PATH)
    assert built == []  # extended, not built
    whole = equality_lookup(EqualityDeleteSet(tuple(refs[:5])), DeleteLoader(IO), ID, PATH)
    assert built == [5]
    batch = _batch(list(range(12)))
    for seq in (0, 11, 13):
        n = batch.num_rows
        assert (_listed(later.deleted(batch, _data(), seq), n, False)
                == _listed(whole.deleted(batch, _data(), seq), n, False))
        assert (_listed(later.first_after(batch, _data(), seq), n, None)
                == _listed(whole.first_after(batch, _data(), seq), n, None))
    equality_lookup(EqualityDeleteSet(tuple(refs[1:6])), loader, ID, PATH)
    assert built == [5, 5]  # refs[0] gone: not a superset of the newest, built whole


@pytest.mark.usefixtures("coding")
def test_a_restricted_lookup_answers_as_the_whole_one_for_the_keys_it_keeps(tmp_path):
    """A one-commit read looks up only the keys its changed deletes hold: for those keys
    the answers are the whole lookup's; the other keys' delete rows are left out (so it
    is never cached: for them it would answer wrongly), and a filter that keeps nothing
    for a set of fields (None) keeps all of them."""
    refs = [DeleteFileRef(_ids(tmp_path, f"e{i}.parquet", [i, i + 1, 2 * i, None]), 10 + i)
            for i in range(6)]
    equality = EqualityDeleteSet(tuple(refs))
    kept = {2, 3, 8}
    seen: list[tuple[int, ...]] = []

    def within(ids, keys):
        seen.append(ids)
        return pa.array([v in kept for v in keys.column("1").to_pylist()])

    loader = DeleteLoader(IO)
    restricted = restricted_lookup(equality, loader, ID, PATH, within)
    assert seen == [(1,)]
    assert loader.shelf(Lookups).peek(LookupKey.of(equality, ID, PATH)) is None  # not cached
    whole = equality_lookup(equality, DeleteLoader(IO), ID, PATH)
    inside, outside = _batch(sorted(kept)), _batch([0, 1, 4, 5, 6, 10, None])
    for seq in (0, 11, 13, 15):
        for name in ("deleted", "first_after"):
            assert (_listed(getattr(restricted, name)(inside, _data(), seq), 3, None)
                    == _listed(getattr(whole, name)(inside, _data(), seq), 3, None))
        assert not any(_listed(restricted.deleted(outside, _data(), seq), 7, False))
    assert any(_listed(whole.deleted(outside, _data(), 0), 7, False))
    unfiltered = restricted_lookup(equality, loader, ID, PATH, lambda _ids, _keys: None)
    assert (unfiltered.deleted(outside, _data(), 0).to_pylist()
            == whole.deleted(outside, _data(), 0).to_pylist())
