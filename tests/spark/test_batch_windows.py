"""run_batch's window path (reaqtive.spark.batch_windows): the same rows as the per-key path and the engine."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import Query, Tumbling
from reaqtive.spark import run_batch
from reaqtive.spark.batch_hash import hash_aggregable
from reaqtive.spark.batch_windows import WindowPlan, plan_windows
from reaqtive.spark.host import KeyedQuery
from reaqtive.spark.pushdown import field_names, returns_none

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SCHEMA = "key string, at timestamp, seq bigint, kind string, x double, n bigint"
KINDS = ("count", "sum", "average", "min", "max")


def no_key(event: Any) -> None:
    return None


def reading(event: Any) -> Any:
    return event["x"]


kind_of, x_of, n_of = itemgetter("kind"), itemgetter("x"), itemgetter("n")
FUNCTIONS = {"no_key": no_key, "reading": reading, "kind_of": kind_of, "x_of": x_of, "n_of": n_of}
KEY_SELECTORS = {"one": no_key, "kind": kind_of}
VALUE_SELECTORS = {"x": x_of, "x_def": reading, "n": n_of}

Event = tuple[str, datetime, int, str, float | None, int | None]


def query(key: str, kind: str, value: str) -> Query[Any]:
    return Query.stream("s").aggregate_by_key(KEY_SELECTORS[key], Tumbling(timedelta(minutes=1)), kind,
                                              VALUE_SELECTORS[value])


def rows(frame: DataFrame) -> list[tuple[Any, ...]]:
    """The rows, values as their JSON text (NaN and -0.0 compare as written)."""
    return sorted((row.key, row.seq, row.time, row.value, row.error) for row in frame.collect())


def both(spark: SparkSession, events: list[Event], *, key: str, kind: str, value: str, until: datetime | None,
         complete: bool) -> tuple[list[Any], list[Any]]:
    frame = spark.createDataFrame(events, SCHEMA)
    arguments: dict[str, Any] = {"key": "key", "time": "at", "sequence": "seq", "until": until,
                                 "complete": complete, "functions": FUNCTIONS}
    the_query = query(key, kind, value)
    assert plan_windows(KeyedQuery.of(the_query, FUNCTIONS), frame, key="key", time="at", value=None,
                        sequence="seq", value_format="json") is not None  # the window path runs
    fast = rows(run_batch(frame, the_query, **arguments))
    per_key = rows(run_batch(frame, the_query, vectorised=False, **arguments))
    plan = plan_windows(KeyedQuery.of(the_query, FUNCTIONS), frame, key="key", time="at", value=None,
                        sequence="seq", value_format="json")
    if plan is not None and hash_aggregable(plan):  # the hash path's rows too
        assert rows(run_batch(frame, the_query, pre_aggregate=True, **arguments)) == per_key
    return fast, per_key


FLOATS = st.one_of(
    st.sampled_from([0.0, -0.0, 0.1, -0.1, 1e300, -1e300, 1e-300, 5e-324, 2.0**53, 1.0, math.inf, -math.inf,
                     math.nan]),
    st.floats(allow_nan=True, allow_infinity=True),
)
INTS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 3))


@st.composite
def batches(draw: st.DrawFn) -> list[Event]:
    """Events of a few keys over a few minutes (several at one instant, the sequence deciding), values of every
    kind of float and integer, now and then a null."""
    count = draw(st.integers(1, 60))
    nulls = draw(st.booleans())
    events = []
    for seq in range(count):
        when = T0 + timedelta(seconds=draw(st.integers(0, 300)), microseconds=draw(st.sampled_from([0, 1, 7])))
        x = None if nulls and draw(st.integers(0, 9)) == 0 else draw(FLOATS)
        n = None if nulls and draw(st.integers(0, 9)) == 0 else draw(INTS)
        events.append((draw(st.sampled_from(["a", "b", "c"])), when, draw(st.integers(0, 10**6)) * 100 + seq,
                       draw(st.sampled_from(["p", "q"])), x, n))
    return events


SETTINGS = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(events=batches(), key=st.sampled_from(sorted(KEY_SELECTORS)), kind=st.sampled_from(KINDS),
       value=st.sampled_from(sorted(VALUE_SELECTORS)), until=st.sampled_from([None, 150, 600]),
       complete=st.booleans())
@example(  # negative zeros: a window of them only sums to -0.0; min/max keep the first of equal zeros
    events=[("a", T0, 1, "p", -0.0, 0), ("a", T0 + timedelta(seconds=1), 2, "p", -0.0, 0),
            ("a", T0 + timedelta(seconds=2), 3, "q", 0.0, 1), ("a", T0 + timedelta(seconds=61), 4, "p", 1.0, 2)],
    key="kind", kind="sum", value="x", until=None, complete=True,
).via("negative zeros")
@example(  # magnitudes where the order of additions changes the sum
    events=[("a", T0, 1, "p", 1e16, 1), ("a", T0, 2, "p", 1.0, 2), ("a", T0, 3, "p", -1e16, 3),
            ("a", T0, 4, "p", 1.0, 4)],
    key="one", kind="average", value="x", until=600, complete=False,
).via("order of additions")
@example(  # NaN in min/max (Python's comparison keeps what came first), a null later in another key
    events=[("a", T0, 1, "p", math.nan, 1), ("a", T0, 2, "p", 1.0, 2), ("b", T0, 3, "p", 2.0, 3),
            ("b", T0, 4, "p", None, None)],
    key="one", kind="min", value="x", until=600, complete=False,
).via("NaN and null")
@example(  # integer sums past 64 bits, exact
    events=[("a", T0, 1, "p", 0.0, 2**63 - 1), ("a", T0, 2, "p", 0.0, 2**63 - 1), ("a", T0, 3, "p", 0.0, 1)],
    key="one", kind="average", value="n", until=None, complete=True,
).via("large integers")
@example(  # the hash path: a window whose first value is NaN keeps it; a maximum of zeros is the first zero's sign
    events=[("a", T0, 1, "p", math.nan, 1), ("a", T0, 2, "p", 3.0, 2),
            ("a", T0 + timedelta(seconds=61), 3, "p", 0.0, 3), ("a", T0 + timedelta(seconds=62), 4, "p", -0.0, 4),
            ("a", T0 + timedelta(seconds=63), 5, "p", math.nan, 5)],
    key="one", kind="max", value="x", until=600, complete=False,
).via("hash path: NaN and zeros")
@example(  # the hash path: a null first value fails at the second event; an average of one null at its close
    events=[("a", T0, 1, "p", None, None), ("a", T0 + timedelta(seconds=1), 2, "p", 1.0, 5),
            ("b", T0, 3, "q", None, None), ("b", T0 + timedelta(seconds=90), 4, "q", 2.0, 7)],
    key="kind", kind="average", value="n", until=None, complete=True,
).via("hash path: nulls")
@example(  # the hash path: sequence numbers that do not fit beside the time (ordered as decimals), ties in time
    events=[("a", T0, 2**62, "q", -0.0, 5), ("a", T0, 7, "p", 0.0, 1), ("a", T0, -(2**62), "p", 2.0, 2),
            ("a", T0 + timedelta(seconds=1), 3, "q", 0.0, 3)],
    key="kind", kind="min", value="x", until=600, complete=False,
).via("hash path: wide sequence numbers")
@example(  # the hash path's float sums: subnormals, values past the largest float in an intermediate sum, far
    # apart magnitudes (many exponent buckets), ties to even, an infinity of each sign in one window, NaN
    events=[("a", T0, 1, "p", 5e-324, 1), ("a", T0, 2, "p", 2.0**-1022, 2), ("a", T0, 3, "p", 1.7e308, 3),
            ("a", T0, 4, "p", 1.7e308, 4), ("a", T0, 5, "p", -1.7e308, 5), ("a", T0, 6, "p", 2.0**53, 6),
            ("a", T0, 7, "p", 1.0, 7), ("a", T0, 8, "p", 0.1, 8), ("a", T0, 9, "p", -5e-324, 9),
            ("a", T0 + timedelta(seconds=1), 10, "q", 2.0**53, 10), ("a", T0 + timedelta(seconds=2), 11, "q", 1.0, 11),
            ("b", T0, 12, "p", math.inf, 12), ("b", T0, 13, "p", -math.inf, 13), ("b", T0, 14, "q", math.nan, 14),
            ("b", T0, 15, "q", 1e300, 15), ("c", T0, 16, "p", -0.0, 16), ("c", T0, 17, "q", 0.0, 17),
            ("c", T0, 18, "q", -0.0, 18), ("c", T0, 19, "p", -0.0, 19)],
    key="kind", kind="sum", value="x", until=600, complete=False,
).via("hash path: float sums")
@example(  # the hash path's float average: a window's sum past the largest float, another near the smallest
    events=[("a", T0, 1, "p", 1.5e308, 1), ("a", T0, 2, "p", 1.5e308, 2), ("a", T0, 3, "p", 3.0, 3),
            ("b", T0, 4, "p", 5e-324, 4), ("b", T0, 5, "p", 5e-324, 5), ("b", T0, 6, "p", 5e-324, 6)],
    key="one", kind="average", value="x", until=None, complete=True,
).via("hash path: float averages")
def test_the_window_path_gives_the_per_key_paths_rows(  # noqa: PLR0917  (hypothesis passes them by name)
    spark: SparkSession, events: list[Event], key: str, kind: str, value: str, until: int | None, complete: bool
) -> None:
    """Random events (floats of every kind, integers past 64-bit sums, nulls), every aggregate, both key
    selectors, with and without ``until`` and ``complete``: the rows and their JSON are the per-key path's."""
    fast, per_key = both(spark, events, key=key, kind=kind, value=value,
                         until=None if until is None else T0 + timedelta(seconds=until), complete=complete)
    assert fast == per_key


SUMMANDS = st.one_of(
    st.sampled_from([0.1, 0.3, -0.0, 0.0, 1e16, -1e16, 1.0, 2.0**53, 2.0**-1022, 5e-324, -5e-324, 1.7e308, -1.7e308,
                     math.inf, -math.inf, math.nan]),
    st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True),
    st.floats(-1e3, 1e3),
)


@st.composite
def float_sums(draw: st.DrawFn) -> list[Event]:
    """Many float values per window (several exponent buckets, sums that depend on the order of additions),
    rarely a special value, at a few instants (ties ordered by the sequence)."""
    count = draw(st.integers(1, 80))
    return [(draw(st.sampled_from(["a", "b"])), T0 + timedelta(seconds=draw(st.sampled_from([0, 1, 59, 60, 130]))),
             draw(st.integers(-(2**30), 2**30)) * 100 + index, draw(st.sampled_from(["p", "q"])), draw(SUMMANDS), 0)
            for index in range(count)]


@SETTINGS
@given(events=float_sums(), key=st.sampled_from(sorted(KEY_SELECTORS)), kind=st.sampled_from(["sum", "average"]))
def test_the_hash_path_sums_floats_exactly_as_the_per_key_path(spark: SparkSession, events: list[Event], key: str,
                                                                kind: str) -> None:
    """Float sums and averages aggregated in the JVM (exponent buckets of integer mantissas) give the per-key
    path's rows, row for row (``both`` checks the hash path against it), and so do the sorted path's."""
    fast, per_key = both(spark, events, key=key, kind=kind, value="x", until=None, complete=True)
    assert fast == per_key


@pytest.mark.parametrize(("kind", "value"), [("sum", "x"), ("max", "x"), ("average", "n"), ("average", "x")])
def test_the_window_path_gives_the_engines_rows(spark: SparkSession, tmp_path: Path, kind: str, value: str) -> None:
    """Against the embedded engine itself (Query.stream.group_by(key).flat_map(query)), to its final clock: the
    rows and their JSON (the rows' times are the per-key path's: the test above); a float sum is folded in Python
    (the sorted path), a float maximum, an integer and a float average are aggregated in the JVM
    (``pre_aggregate``): exactly rounded, the float sums are the engine's in any order."""
    from reaqtive.engine import Engine
    from reaqtive.engine.expressions import FunctionRegistry
    from reaqtive.spark import embedded_query
    from reaqtive.spark.values import canonical_json

    values = [0.1, -0.0, 1e300, -1e300, 3.25, 1e-300, 2.5, -0.0, 7.0]
    if kind == "max":  # zeros of both signs and NaN, which Spark's own max orders otherwise
        values += [0.0, math.nan, -0.0]
    events: list[Event] = [(f"k{index % 3}", T0 + timedelta(seconds=17 * index), index, "pq"[index % 2],
                            values[index % len(values)], index * 10**17) for index in range(60)]
    until = T0 + timedelta(minutes=15)
    the_query = query("kind", kind, value)
    registry = FunctionRegistry()
    for name, function in FUNCTIONS.items():
        registry.register(name, function)
    with Engine(tmp_path / "engine.db", functions=registry, start=T0) as engine:
        engine.create_stream("s")
        engine.create_subscription("reaqtive://t/sums", embedded_query(the_query, registry))
        engine.append_many("s", [([key, {"kind": inner, "x": x, "n": n}], when)
                                 for key, when, _, inner, x, n in events])
        engine.process()
        engine.advance_time(until)
        seqs: dict[str, int] = {}
        expected = []
        for output in engine.outputs("reaqtive://t/sums"):
            key, row = output.value
            seqs[key] = seqs.get(key, -1) + 1
            expected.append((key, seqs[key], canonical_json(row)))
    frame = spark.createDataFrame(events, SCHEMA)
    found = [(row.key, row.seq, row.value) for row in run_batch(
        frame, the_query, key="key", time="at", sequence="seq", until=until, functions=FUNCTIONS,
        pre_aggregate=kind != "sum").collect()]
    assert sorted(found) == sorted(expected)
    assert len(expected) > 20


def test_what_the_window_path_takes(spark: SparkSession) -> None:
    """Only a tumbling built-in aggregate over field getters, with a sequence and a struct payload; a selector
    that does anything else keeps the per-key path."""
    frame = spark.createDataFrame([], SCHEMA)

    def plan(the_query: Query[Any], **arguments: Any) -> object:
        options = {"key": "key", "time": "at", "value": None, "sequence": "seq", "value_format": "json"}
        options.update(arguments)
        return plan_windows(KeyedQuery.of(the_query, FUNCTIONS), frame, **options)

    assert plan(query("one", "average", "x_def")) is not None
    for kind, value, hashed in [("count", "x", True), ("min", "x", True), ("max", "x_def", True), ("sum", "n", True),
                                ("average", "n", True), ("sum", "x", True), ("average", "x", True)]:
        found = plan(query("kind", kind, value))
        assert isinstance(found, WindowPlan)
        assert hash_aggregable(found) is hashed, (kind, value)  # float sums too: exactly rounded
    assert plan(query("one", "average", "x"), sequence=None) is None  # ties ordered by the payload's JSON
    assert plan(query("one", "average", "x"), value="x") is None  # the payload is the value itself
    assert plan(query("one", "average", "x"), value_format="double") is None
    assert plan(query("kind", "count", "x").map(str)) is None
    assert plan(Query.stream("s").aggregate_by_key(kind_of, Tumbling(timedelta(minutes=1)), "sum",
                                                   kind_of)) is None  # a string sum
    assert plan(Query.stream("s").aggregate_by_key(x_of, Tumbling(timedelta(minutes=1)), "count")) is None


def test_selectors_are_recognised_by_their_code() -> None:
    """``def f(e): return e["x"]`` reads x and ``def f(e): return None`` is one key, whatever their names; any
    other code is not (a default, a global, another constant, a closure)."""
    offset = 1

    def shifted(event: Any) -> Any:
        return event["x"] + offset

    def by_index(event: Any) -> Any:
        return event[0]

    def a_one(event: Any) -> int:
        return 1

    assert field_names(reading) == frozenset({"x"})
    assert field_names(lambda event: event["y"]) == frozenset({"y"})
    assert field_names(shifted) is None
    assert field_names(by_index) is None
    assert field_names(lambda event, other=None: event["x"]) is None
    assert returns_none(no_key)
    assert returns_none(lambda event: None)
    assert not returns_none(a_one)
    assert not returns_none(reading)


@pytest.mark.parametrize("kind", ["sum", "min"])
def test_a_key_whose_fold_meets_a_null_fails_as_per_key(spark: SparkSession, kind: str) -> None:
    """A null value ends its key with the per-key path's error row; the other keys' rows come from the window
    path."""
    events: list[Event] = [("a", T0, 1, "p", 1.0, 1), ("a", T0 + timedelta(seconds=1), 2, "p", None, None),
                           ("b", T0, 3, "p", 2.0, 2), ("b", T0 + timedelta(seconds=70), 4, "p", 3.0, 3)]
    fast, per_key = both(spark, events, key="one", kind=kind, value="x", until=None, complete=True)
    assert fast == per_key
    assert [row[4] is not None for row in fast if row[0] == "a"] == [True]


def test_a_null_key_is_a_key_of_its_own(spark: SparkSession) -> None:
    """Events of a null key beside those of other keys (sorted next to each other in one partition): each key
    keeps its own windows, as on the per-key path."""
    events: list[Event] = [(key, T0 + timedelta(seconds=seconds), index, "p", float(index), index)
                           for index, (key, seconds) in enumerate(
                               [(None, 0), (None, 70), ("a", 5), ("a", 80), ("b", 10), (None, 130), ("b", 200)])]
    frame = spark.createDataFrame(events, SCHEMA)
    arguments: dict[str, Any] = {"key": "key", "time": "at", "sequence": "seq", "until": T0 + timedelta(minutes=5),
                                 "complete": False, "functions": FUNCTIONS, "partitions": 1}
    the_query = query("one", "sum", "x")

    def keyed_rows(outputs: DataFrame) -> list[tuple[Any, ...]]:
        return sorted(((row.key, row.seq, row.time, row.value, row.error) for row in outputs.collect()),
                      key=lambda row: (str(row[0]), row[1]))

    fast = keyed_rows(run_batch(frame, the_query, **arguments))
    assert fast == keyed_rows(run_batch(frame, the_query, vectorised=False, **arguments))
    assert [(row[0], row[3]) for row in fast] == [
        (None, '[null,"2026-03-01T00:00:00+00:00","2026-03-01T00:01:00+00:00",0.0]'),
        (None, '[null,"2026-03-01T00:01:00+00:00","2026-03-01T00:02:00+00:00",1.0]'),
        (None, '[null,"2026-03-01T00:02:00+00:00","2026-03-01T00:03:00+00:00",5.0]'),
        ("a", '[null,"2026-03-01T00:00:00+00:00","2026-03-01T00:01:00+00:00",2.0]'),
        ("a", '[null,"2026-03-01T00:01:00+00:00","2026-03-01T00:02:00+00:00",3.0]'),
        ("b", '[null,"2026-03-01T00:00:00+00:00","2026-03-01T00:01:00+00:00",4.0]'),
        ("b", '[null,"2026-03-01T00:03:00+00:00","2026-03-01T00:04:00+00:00",6.0]'),
    ]


def test_the_hash_path_refuses_an_event_without_a_time(spark: SparkSession) -> None:
    """A null time cannot be ordered: the job fails naming the key (the per-key path fails on it too)."""
    events: list[Event] = [("a", T0, 1, "p", 1.0, 1), ("b", None, 2, "p", 2.0, 2)]  # type: ignore[list-item]
    outputs = run_batch(spark.createDataFrame(events, SCHEMA), query("one", "max", "x"), key="key", time="at",
                        sequence="seq", functions=FUNCTIONS, pre_aggregate=True)
    with pytest.raises(Exception, match="key 'b' has an event with a null time or sequence number"):
        outputs.collect()
