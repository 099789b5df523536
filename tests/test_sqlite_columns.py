"""The columnar filter evaluator (fastrag.vector_store.sqlite.columns) selects exactly what
:func:`fastrag.filters.matches` selects: on random rows and filters, on the filter table, through SQLite's
JSON functions, across concat, and on high-cardinality numeric columns."""

from __future__ import annotations

import json
import pickle
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrag.errors import FilterError, InvalidParameterError
from fastrag.filters import And, Comparison, Filter, Not, Or, field, matches, parse_filter
from fastrag.testing.filter_cases import FILTER_CASES, FILTER_CORPUS
from fastrag.vector_store.sqlite import columns
from fastrag.vector_store.sqlite.columns import MISSING, Column, filter_mask

KEYS = ("a", "b", "c")
ABSENT = "absent"  # a key no row holds
HAS_ARROW = sqlite3.sqlite_version_info >= (3, 38)  # the -> operator that Column.from_json reads
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = (columns._PER_DISTINCT_LIMIT, 0)  # default; 0 sends every comparison down the fast paths
INT64 = (-(2**63), 2**63 - 1)

# --------------------------------------------------------------------------------------- strategies

_moments = st.integers(0, 60).map(lambda h: datetime(2020, 2, 28, 20) + timedelta(hours=h))
_DATE_FORMS = ("date", "naive", "Z", "+00:00", "+02:00", "-05:00")


def _iso(moment: datetime, form: str) -> str:
    if form == "date":
        return moment.date().isoformat()
    if form == "naive":
        return moment.isoformat()
    if form == "Z":
        return moment.isoformat() + "Z"
    offset = timezone(timedelta(hours=int(form[:3])))
    return moment.replace(tzinfo=UTC).astimezone(offset).isoformat()


dates = st.builds(_iso, _moments, st.sampled_from(_DATE_FORMS))
small_ints = st.integers(-4, 4)
big_ints = st.sampled_from(
    [2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), 2**63, 2**64 + 1, -(2**70), 10**30]
)
special_floats = st.sampled_from(
    [-0.0, 0.0, 0.5, 1.0, 2.0, -1.5, 4.0, 2.0**53, 2.0**63, 1e308, -1e308, 5e-324, 1e-300, 1e30]
)
floats = special_floats | st.floats(allow_nan=False, allow_infinity=False)
strings = st.sampled_from(["", "a", "ab", "b", "Zürich", "東京", "x\u0000y", "%_", "1", "true", "2020"]) | st.text(
    max_size=4
)
scalars = st.one_of(st.none(), st.booleans(), small_ints, big_ints, floats, strings, dates)
json_values = st.one_of(
    scalars,
    scalars,
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.sampled_from(["a", "x"]), scalars | st.lists(scalars, max_size=2), max_size=2),
)
json_rows = st.lists(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=len(KEYS)), max_size=24)

# Values json.loads never gives, which Column.from_values still evaluates exactly.
python_values = json_values | st.sampled_from(
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        (1, "a"),
        date(2020, 2, 29),
        datetime(2020, 2, 29, 12),
        datetime(2020, 2, 29, 12, tzinfo=timezone(timedelta(hours=3))),
        {"a": {1, 2}},
    ]
)
python_rows = st.lists(st.dictionaries(st.sampled_from(KEYS), python_values, max_size=len(KEYS)), max_size=24)

filter_scalars = st.one_of(st.booleans(), small_ints, big_ints, floats, strings, dates)
range_bounds = st.one_of(small_ints, big_ints, floats, dates)
filter_keys = st.sampled_from((*KEYS, ABSENT))


def _leaf(op: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Filter]:
    return st.builds(Comparison, st.just(op), filter_keys, values)


leaves = st.one_of(
    _leaf("equals", filter_scalars),
    _leaf("notEquals", filter_scalars),
    _leaf("in", st.lists(filter_scalars, max_size=4)),
    _leaf("notIn", st.lists(filter_scalars, max_size=4)),
    _leaf("greaterThan", range_bounds),
    _leaf("greaterThanOrEquals", range_bounds),
    _leaf("lessThan", range_bounds),
    _leaf("lessThanOrEquals", range_bounds),
    _leaf("startsWith", strings),
    _leaf("stringContains", strings),
    _leaf("listContains", filter_scalars),
)
filters = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda fs: And(tuple(fs))),
        st.lists(children, min_size=1, max_size=3).map(lambda fs: Or(tuple(fs))),
        st.lists(children, min_size=1, max_size=3).map(lambda fs: Not(tuple(fs))),
    ),
    max_leaves=6,
)

# ------------------------------------------------------------------------------------------ helpers


def _assert_agrees(node: Filter, rows: Sequence[dict[str, Any]], column: Callable[[str], Column]) -> None:
    """``filter_mask`` equals ``matches`` on every row, with the default limit and with every fast path."""
    expected = [matches(node, row) for row in rows]
    for limit in LIMITS:
        with mock.patch.object(columns, "_PER_DISTINCT_LIMIT", limit):
            mask = filter_mask(node, len(rows), column)
        assert mask.dtype == np.bool_ and mask.shape == (len(rows),)
        assert mask.tolist() == expected, (limit, node)


def _from_values(rows: Sequence[dict[str, Any]]) -> Callable[[str], Column]:
    built: dict[str, Column] = {}

    def column(key: str) -> Column:
        if key not in built:
            built[key] = Column.from_values([row.get(key, MISSING) for row in rows])
        return built[key]

    return column


def _sqlite_table(rows: Sequence[dict[str, Any]]) -> sqlite3.Connection:
    """An in-memory table of the rows' metadata, written as the SQLite store writes it."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE documents (metadata TEXT NOT NULL)")
    conn.executemany(
        "INSERT INTO documents (metadata) VALUES (?)",
        [(json.dumps(row, ensure_ascii=False, allow_nan=False),) for row in rows],
    )
    return conn


def _sqlite_columns(conn: sqlite3.Connection, key: str) -> tuple[list[Any], list[Any], list[Any]]:
    """Per row: json_type, json_extract and ``->`` of ``key``."""
    path = f'$."{key}"'
    selected = conn.execute(
        "SELECT json_type(metadata, ?), json_extract(metadata, ?), metadata -> ? FROM documents ORDER BY rowid",
        (path, path, path),
    ).fetchall()
    if not selected:
        return [], [], []
    types, values, texts = (list(part) for part in zip(*selected, strict=True))
    return types, values, texts


def _lossy_in_json_extract(value: Any) -> bool:
    """Where json_extract is known to differ from json.loads: big integers, and strings holding U+0000."""
    if isinstance(value, int) and not isinstance(value, bool):
        return not INT64[0] <= value <= INT64[1]
    return isinstance(value, str) and "\x00" in value


# ---------------------------------------------------------------------------------- property tests


@PROPERTY
@given(rows=python_rows, node=filters)
def test_from_values_agrees_with_matches(rows: list[dict[str, Any]], node: Filter) -> None:
    _assert_agrees(node, rows, _from_values(rows))


@pytest.mark.skipif(not HAS_ARROW, reason="SQLite before 3.38 has no -> operator")
@PROPERTY
@given(rows=json_rows, node=filters)
def test_sqlite_json_output_agrees_with_matches(rows: list[dict[str, Any]], node: Filter) -> None:
    conn = _sqlite_table(rows)
    from_json: dict[str, Column] = {}
    from_sqlite: dict[str, Column] = {}
    for key in (*KEYS, ABSENT):
        types, values, texts = _sqlite_columns(conn, key)
        from_json[key] = Column.from_json(texts)
        if any(_lossy_in_json_extract(row.get(key)) for row in rows):
            if any(isinstance(row.get(key), int) and _lossy_in_json_extract(row.get(key)) for row in rows):
                with pytest.raises(InvalidParameterError, match="64-bit"):
                    Column.from_sqlite(types, values)
            from_sqlite[key] = from_json[key]  # json_extract cannot carry these values; from_json can
        else:
            from_sqlite[key] = Column.from_sqlite(types, values)
    conn.close()
    _assert_agrees(node, rows, from_json.__getitem__)
    _assert_agrees(node, rows, from_sqlite.__getitem__)


@PROPERTY
@given(rows=python_rows, node=filters, cuts=st.lists(st.integers(0, 24), max_size=3), warm=st.booleans())
def test_concat_agrees_with_matches(
    rows: list[dict[str, Any]], node: Filter, cuts: list[int], warm: bool
) -> None:
    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    parts = [rows[lo:hi] for lo, hi in zip(bounds, bounds[1:], strict=False)] or [[]]
    built: dict[str, Column] = {}
    for key in (*KEYS, ABSENT):
        column = Column.from_values([row.get(key, MISSING) for row in parts[0]])
        for part in parts[1:]:
            if warm:  # derived numbers and dates exist before concat, so concat extends them
                column._numbers_view()
                column._dates_view()
            if part and all(key not in row for row in part):
                column = column.concat(Column.missing(len(part)))
            else:
                column = column.concat(Column.from_values([row.get(key, MISSING) for row in part]))
        assert [column[i] for i in range(len(column))] == [row.get(key, MISSING) for row in rows] or any(
            isinstance(row.get(key), float) and row[key] != row[key] for row in rows  # NaN != NaN
        )
        built[key] = column
    _assert_agrees(node, rows, built.__getitem__)


# -------------------------------------------------------------------------------------- filter table


def _corpus_rows() -> list[dict[str, Any]]:
    return [dict(doc.metadata) for doc in FILTER_CORPUS]


def _corpus_columns(source: str) -> Callable[[str], Column]:
    rows = _corpus_rows()
    if source == "values":
        return _from_values(rows)
    conn = _sqlite_table(rows)

    def column(key: str) -> Column:
        types, values, texts = _sqlite_columns(conn, key)
        return Column.from_json(texts) if source == "json" else Column.from_sqlite(types, values)

    return column


@pytest.mark.parametrize("limit", LIMITS, ids=["default_limit", "fast_paths"])
@pytest.mark.parametrize("source", ["values", "sqlite", "json"])
def test_filter_table(source: str, limit: int) -> None:
    if source == "json" and not HAS_ARROW:
        pytest.skip("SQLite before 3.38 has no -> operator")
    column = _corpus_columns(source)
    ids = [doc.id for doc in FILTER_CORPUS]
    failures = []
    with mock.patch.object(columns, "_PER_DISTINCT_LIMIT", limit):
        for case in FILTER_CASES:
            mask = filter_mask(parse_filter(case.filter), len(ids), column)  # type: ignore[arg-type]
            got = {doc_id for doc_id, hit in zip(ids, mask.tolist(), strict=True) if hit}
            if got != case.expected_ids:
                failures.append((case.name, sorted(got), sorted(case.expected_ids)))
    assert not failures


def test_filter_mask_accepts_the_json_form_and_none() -> None:
    column = Column.from_values(["x", "y", MISSING])
    assert filter_mask({"equals": {"key": "k", "value": "x"}}, 3, lambda _: column).tolist() == [True, False, False]
    assert filter_mask(None, 3, lambda _: column).tolist() == [True, True, True]  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- high cardinality

_N_HIGH = 50_000


def _high_cardinality_values() -> dict[str, list[Any]]:
    rng = np.random.default_rng(7)
    floats_ = (rng.standard_normal(_N_HIGH) * 1000).tolist()
    ints = (rng.permutation(4 * _N_HIGH) - 2 * _N_HIGH).tolist()[:_N_HIGH]
    extras: list[Any] = [1, 1.0, 2, True, False, None, MISSING, "7", "2020-01-01", [7], {"a": 7}, -0.0, 0, 2**53]
    mixed_floats = floats_[: _N_HIGH - len(extras)] + extras
    mixed_ints = ints[: _N_HIGH - len(extras)] + extras
    # One integer past 2**53 makes float64 inexact: those comparisons fall back to the reference.
    beyond = ints[: _N_HIGH - 3] + [2**53 + 1, 2**53, 2.0**53]
    return {"f": mixed_floats, "i": mixed_ints, "big": beyond}


def _high_cardinality_filters(values: Sequence[Any]) -> list[Filter]:
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    pick = numbers[12345]
    median = sorted(numbers)[len(numbers) // 2]
    return [
        field("k") == pick,
        field("k") == float(pick),
        field("k") == 1,
        field("k") == 0,
        field("k") == True,  # noqa: E712 - a bool filter value
        field("k") == "7",
        field("k") == 2**53 + 1,
        field("k") != pick,
        field("k").one_of([pick, numbers[99], 1.0, "7", False, 2**53]),
        field("k").not_one_of([numbers[5], 2, 2**70]),
        field("k") > median,
        field("k") >= int(median),
        field("k") < 0,
        field("k") <= 2**53,
        field("k") > 2**53,
        field("k") >= "2019-12-31",
        field("k").list_contains(7),
        (field("k") > -500) & (field("k") < 500.5) & (field("k") != 1),
    ]


@pytest.mark.parametrize("key", ["f", "i", "big"])
def test_high_cardinality_numeric_columns_agree_with_matches(key: str) -> None:
    values = _high_cardinality_values()[key]
    column = Column.from_values(values)
    assert column.cardinality > columns._PER_DISTINCT_LIMIT
    rows = [{} if v is MISSING else {"k": v} for v in values]
    for node in _high_cardinality_filters(values):
        expected = [matches(node, row) for row in rows]
        assert filter_mask(node, len(rows), lambda _: column).tolist() == expected, node


@pytest.mark.skipif(not HAS_ARROW, reason="SQLite before 3.38 has no -> operator")
def test_high_cardinality_through_sqlite_and_concat() -> None:
    values = _high_cardinality_values()["f"]
    rows = [{} if v is MISSING else {"k": v} for v in values]
    conn = _sqlite_table(rows)
    types, extracted, texts = _sqlite_columns(conn, "k")
    conn.close()
    half = len(rows) // 2
    by_sqlite = Column.from_sqlite(types[:half], extracted[:half])
    by_sqlite._numbers_view()  # warm, so concat extends the derived numbers
    by_sqlite = by_sqlite.concat(Column.from_sqlite(types[half:], extracted[half:]))
    by_json = Column.from_json(texts[:half]).concat(Column.from_json(texts[half:]))
    for node in _high_cardinality_filters(values):
        expected = [matches(node, row) for row in rows]
        assert filter_mask(node, len(rows), lambda _: by_sqlite).tolist() == expected, node
        assert filter_mask(node, len(rows), lambda _: by_json).tolist() == expected, node


def test_threads_share_one_column() -> None:
    values = _high_cardinality_values()["f"] + ["2021-05-01", "2021-05-02T10:00:00+02:00"]
    column = Column.from_values(values)  # fresh: derived numbers and dates not computed yet
    nodes = [field("k") > 0.5, field("k") >= "2021-05-01", field("k").one_of([1, "7"])]
    expected = [filter_mask(node, len(values), lambda _: Column.from_values(values)).tolist() for node in nodes]
    barrier = threading.Barrier(6)
    results: list[list[list[bool]]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            results.append([filter_mask(node, len(values), lambda _: column).tolist() for node in nodes])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results == [expected] * 6


# ------------------------------------------------------------------------------- SQLite JSON edges


@pytest.mark.skipif(not HAS_ARROW, reason="SQLite before 3.38 has no -> operator")
def test_from_json_keeps_what_json_extract_loses() -> None:
    stored = [2**63, -(2**63) - 1, 2**64 + 1, 10**30, "a\x00b", "\x00", -0.0, 1e308, 5e-324, "Zürich 東京 😀",
              [2**64 + 1, "a\x00b"], {"n": 2**70}, True, 1, 1.0, None]
    rows = [{"k": v} for v in stored] + [{}]
    conn = _sqlite_table(rows)
    types, extracted, texts = _sqlite_columns(conn, "k")
    conn.close()
    column = Column.from_json(texts)
    got = [column[i] for i in range(len(column))]
    assert got == [*stored, MISSING]
    assert [type(v) for v in got] == [*(type(v) for v in stored), type(MISSING)]
    assert str(got[6]) == "-0.0"
    with pytest.raises(InvalidParameterError, match="64-bit"):
        Column.from_sqlite(types, extracted)
    # Within the signed 64-bit range json_extract is exact, and booleans come back by their type.
    ok = [i for i, v in enumerate(stored) if not _lossy_in_json_extract(v)] + [len(stored)]
    by_sqlite = Column.from_sqlite([types[i] for i in ok], [extracted[i] for i in ok])
    assert [by_sqlite[j] for j in range(len(ok))] == [rows[i].get("k", MISSING) for i in ok]
    assert [type(by_sqlite[j]) for j in range(len(ok))] == [type(rows[i].get("k", MISSING)) for i in ok]


def test_from_sqlite_tells_int64_min_from_a_rounded_integer() -> None:
    # json_extract gives the float -2.0**63 for -(2**63) - 1, which equals the int -(2**63) it also gives.
    conn = _sqlite_table([{"k": -(2**63)}, {"k": -(2.0**63)}, {"k": -(2**63) - 1}])
    types, extracted, _ = _sqlite_columns(conn, "k")
    conn.close()
    assert types == ["integer", "real", "integer"] and extracted[0] == extracted[2]
    with pytest.raises(InvalidParameterError, match="64-bit"):
        Column.from_sqlite(types, extracted)
    column = Column.from_sqlite(types[:2], extracted[:2])  # without the rounded one: exact, types kept
    assert [(type(column[i]), column[i]) for i in range(2)] == [(int, -(2**63)), (float, -(2.0**63))]
    reordered = Column.from_sqlite(types[1::-1], extracted[1::-1])
    assert [(type(reordered[i]), reordered[i]) for i in range(2)] == [(float, -(2.0**63)), (int, -(2**63))]


def test_exact_integers_beyond_float64() -> None:
    values = [2**53, 2**53 + 1, 2.0**53, 2**64 + 1, 2**64, float(2**64)]
    column = Column.from_values(values)
    for limit in LIMITS:
        with mock.patch.object(columns, "_PER_DISTINCT_LIMIT", limit):
            assert filter_mask(field("k") == 2**53 + 1, 6, lambda _: column).tolist() == [0, 1, 0, 0, 0, 0]
            assert filter_mask(field("k") == 2**53, 6, lambda _: column).tolist() == [1, 0, 1, 0, 0, 0]
            assert filter_mask(field("k") > 2**53, 6, lambda _: column).tolist() == [0, 1, 0, 1, 1, 1]
            assert filter_mask(field("k") >= 2**64 + 1, 6, lambda _: column).tolist() == [0, 0, 0, 1, 0, 0]
            assert filter_mask(field("k") == float(2**64), 6, lambda _: column).tolist() == [0, 0, 0, 0, 1, 1]


# ---------------------------------------------------------------------------------- column basics


def test_column_basics() -> None:
    column = Column.from_values([1, MISSING, "a", [1, 2], 1, None])
    assert len(column) == 6 and column.cardinality == 5
    assert [column[i] for i in range(6)] == [1, MISSING, "a", [1, 2], 1, None]
    assert len(Column.missing(0)) == 0 and Column.missing(3)[2] is MISSING
    joined = column.concat(Column.missing(2)).concat(Column.from_values(["a", 1.0, True]))
    assert [joined[i] for i in range(11)] == [1, MISSING, "a", [1, 2], 1, None, MISSING, MISSING, "a", 1.0, True]
    assert [type(joined[i]) for i in (0, 9, 10)] == [int, float, bool]
    assert joined.cardinality == 7
    assert len(Column.from_values([])) == 0 and len(Column.from_json([])) == 0
    assert filter_mask(field("k") == 1, 0, lambda _: Column.missing(0)).shape == (0,)


def test_missing_is_a_singleton_and_not_none() -> None:
    assert MISSING is not None and repr(MISSING) == "MISSING"
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING
    assert Column.from_values([None, MISSING])[0] is None


def test_column_is_immutable() -> None:
    column = Column.from_values([1, 2])
    with pytest.raises(AttributeError):
        column._codes = np.zeros(2, dtype=np.int32)  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        column._codes[0] = 1
    with pytest.raises(TypeError, match="from_values"):
        Column(object(), np.zeros(1, dtype=np.int32), [1], {})
    mask = filter_mask(field("k") == 1, 2, lambda _: column)
    mask[0] = False  # the caller owns the mask
    assert filter_mask(field("k") == 1, 2, lambda _: column).tolist() == [True, False]


@pytest.mark.parametrize(
    ("types", "values", "message"),
    [
        (["integer"], [1, 2], "1 json types but 2 values"),
        (["blob"], [b"x"], "unknown json_type"),
        (["integer"], [2.0**64], "64-bit"),
        (["text"], [3], "does not fit"),
        (["real"], ["1.5"], "does not fit"),
        (["array"], ["[1,"], "not valid JSON"),
        (["array"], ['{"a": 1}'], "does not fit"),
        (["text"], [["unhashable"]], "hashable"),
    ],
)
def test_from_sqlite_refuses_bad_input(types: list[Any], values: list[Any], message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        Column.from_sqlite(types, values)


@pytest.mark.parametrize("text", [1, b"1", "[1,", "01", "1_000", "tru", "1,2", "1]", "-", "1 2", "2,[3"])
def test_from_json_refuses_bad_input(text: Any) -> None:
    with pytest.raises(InvalidParameterError):
        Column.from_json([text])
    with pytest.raises(InvalidParameterError):
        Column.from_json(["1", text, "2.5", None])  # among valid number literals, decoded together


def test_from_json_merges_texts_of_one_value() -> None:
    column = Column.from_json(["1.0", "1.00", "1", "-0.0", "0.0", "1E0", None, "true"])
    assert column.cardinality == 5  # 1.0, 1, -0.0, MISSING, True
    assert [(type(column[i]), column[i]) for i in range(8)] == [
        (float, 1.0), (float, 1.0), (int, 1), (float, 0.0), (float, 0.0), (float, 1.0), (type(MISSING), MISSING),
        (bool, True),
    ]
    rows = [{"k": json.loads(t)} for t in ["1.0", "1.00", "1", "-0.0", "0.0", "1E0"]] + [{}, {"k": True}]
    for node in (field("k") == 1, field("k") >= 0.5, field("k") == 0, field("k") == True):  # noqa: E712
        _assert_agrees(node, rows, lambda _: column)


def test_from_json_reads_number_literals_as_json_loads_does() -> None:
    literals = ["0", "-0", "-0.0", "1E5", "1e-5", "12345678901234567890123", "1.5e300", "1e400", "-1e400", "0.1"]
    column = Column.from_json(literals)
    decoded = [column[i] for i in range(len(literals))]
    assert [(type(v), repr(v)) for v in decoded] == [(type(v), repr(v)) for v in map(json.loads, literals)]


def test_filter_mask_refuses_bad_columns() -> None:
    with pytest.raises(InvalidParameterError, match="expected 3"):
        filter_mask(field("k") == 1, 3, lambda _: Column.missing(2))
    with pytest.raises(InvalidParameterError, match="not a Column"):
        filter_mask(field("k") == 1, 3, lambda _: [1, 2, 3])  # type: ignore[arg-type, return-value]
    with pytest.raises(InvalidParameterError, match="non-negative"):
        filter_mask(field("k") == 1, -1, lambda _: Column.missing(0))
    with pytest.raises(FilterError):
        filter_mask({"equals": {"key": "k"}}, 1, lambda _: Column.missing(1))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="Column"):
        Column.missing(1).concat([1])  # type: ignore[arg-type]


def test_column_is_asked_once_per_key() -> None:
    asked: list[str] = []
    column = Column.from_values([1, 2, 3])

    def lookup(key: str) -> Column:
        asked.append(key)
        return column

    node = (field("a") > 1) & ~((field("a") == 3) | (field("b") < 2)) & (field("a") != 0)
    assert filter_mask(node, 3, lookup).tolist() == [matches(node, {"a": v, "b": v}) for v in (1, 2, 3)]
    assert sorted(asked) == ["a", "b"]
