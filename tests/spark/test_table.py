"""The table form of a keyed query on Spark against its instance form (no Spark needed: the per-bucket host).

The instance form re-creates each key's query from its saved operator state per batch; the table form keeps a key
as a record of step fields. They must give the same rows, tick for tick, errors included, and the same per-key
bookkeeping (clock, next due time, event and output counts, how the key ended), whatever the batches, the
watermarks, late events and failing functions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import Fold, Query, Tumbling
from reaqtive.spark.host import (
    FORM_INSTANCES,
    FORM_TABLE,
    BucketHost,
    BucketState,
    BucketStateError,
    KeyedQuery,
    OutputRow,
    QueryMismatchError,
    run_key,
    run_table_record,
)
from reaqtive.state import DEFAULT_CODEC
from tests.operators import _keyed_cases, _keyed_cases_aggregates, _keyed_cases_misc, _keyed_cases_take_skip
from tests.operators._keyed_cases import Variant, fails_on

STEP_VARIANTS: list[Variant] = [
    *_keyed_cases.VARIANTS,
    *_keyed_cases_aggregates.VARIANTS,
    *_keyed_cases_take_skip.VARIANTS,
    *_keyed_cases_misc.VARIANTS,
]
SPAN = 10  # µs: a window; events come 0-7 µs apart, so windows open and close within a batch and across batches


def inner_key_fails_on_13(x: Any) -> Any:
    if x == 13:
        raise KeyError("no inner key for 13")
    return x % 2 if isinstance(x, int) else 0


def add_or_fail(acc: Any, x: Any) -> Any:
    if x == 6:
        raise ArithmeticError("cannot fold 6")
    return acc + x if isinstance(acc, int) and isinstance(x, int) else x


def result_fails_on_big(acc: Any) -> Any:
    if isinstance(acc, int) and acc > 60:
        raise OverflowError(f"{acc} is too big")
    return acc


WINDOW_KEYS: dict[str, Callable[[Any], Any]] = {
    "none": lambda x: None,
    "x%3": lambda x: x % 3 if isinstance(x, int) else repr(x),
    "fails on 13": inner_key_fails_on_13,
    "unhashable for 19": lambda x: [x] if x == 19 else 0,
}
AGGREGATES: dict[str, Any] = {
    "count": "count",
    "sum": "sum",
    "average": "average",
    "min": "min",
    "max": "max",
    "fold": Fold(0, add_or_fail),
    "fold result fails": Fold(0, add_or_fail, result_fails_on_big),
}
VALUES: dict[str, Callable[[Any], Any] | None] = {
    "element": None,
    "x*2": lambda x: x * 2 if isinstance(x, int) else 0,
    "fails on 17": lambda x: fails_on(17)(x) if isinstance(x, int) else 0,
}
ORIGINS = [datetime(1970, 1, 1, tzinfo=UTC), datetime(1970, 1, 1, 0, 0, 0, 3, tzinfo=UTC)]


class Chain:
    """A per-key query: steps, optionally one tumbling ``aggregate_by_key`` among them."""

    def __init__(self, before: list[Variant], window: tuple[str, str, str, int] | None, after: list[Variant]) -> None:
        self.before, self.window, self.after = before, window, after

    def query(self) -> Query[Any]:
        query: Query[Any] = Query.stream("s")
        for variant in self.before:
            query = variant.apply(query)
        if self.window is not None:
            key, aggregate, value, origin = self.window
            query = query.aggregate_by_key(WINDOW_KEYS[key], Tumbling(timedelta(microseconds=SPAN)),
                                           AGGREGATES[aggregate], VALUES[value], origin=ORIGINS[origin])
        for variant in self.after:
            query = variant.apply(query)
        return query

    def __repr__(self) -> str:
        window = [] if self.window is None else ["aggregate_by_key({}, {}, {}, origin {})".format(*self.window)]
        return ".".join(["s", *map(repr, self.before), *window, *map(repr, self.after)])


def keyed(query: Query[Any]) -> KeyedQuery:
    """The keyed query, its functions registered by generated names (the test's lambdas)."""
    functions: dict[int, Callable[..., Any]] = {}

    def collect(value: object) -> None:
        if isinstance(value, Query):
            for argument in value.args:
                collect(argument)
        elif isinstance(value, (list, tuple)):
            for item in value:
                collect(item)
        elif isinstance(value, Fold):
            collect((value.seed, value.accumulator, value.result_selector))
        elif callable(value):
            functions.setdefault(id(value), value)

    collect(query)
    return KeyedQuery.of(query, {f"f{number}": function for number, function in enumerate(functions.values())})


# Element-wise steps and those without mutable state go before a window; any step after it (it sees window rows)
BEFORE = [v for v in STEP_VARIANTS if v.op in ("map", "filter", "take", "skip", "take_while", "skip_while",
                                                 "distinct_until_changed", "do", "ignore_elements")]
chains = st.builds(
    Chain,
    before=st.lists(st.sampled_from(STEP_VARIANTS), max_size=3),
    window=st.none(),
    after=st.just([]),
) | st.builds(
    Chain,
    before=st.lists(st.sampled_from(BEFORE), max_size=2),
    window=st.tuples(st.sampled_from(sorted(WINDOW_KEYS)), st.sampled_from(sorted(AGGREGATES)),
                     st.sampled_from(sorted(VALUES)), st.integers(0, 1)),
    after=st.lists(st.sampled_from(STEP_VARIANTS), max_size=2),
)

Batch = tuple[list[tuple[str, int, int]], int | None]  # (key, time µs, value) events, the watermark after it


@st.composite
def batches(draw: st.DrawFn) -> list[Batch]:
    """Events of up to 3 keys, times mostly rising per key with some late ones, cut into batches, each with a
    watermark (sometimes none, sometimes behind a key's clock)."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    count = draw(st.integers(0, 40))
    keys = ["a", "b", "c"][: draw(st.integers(1, 3))]
    clock = {key: rng.randrange(0, 30) for key in keys}
    events = []
    for _ in range(count):
        key = rng.choice(keys)
        late = rng.random() < 0.15
        when = max(0, clock[key] - rng.randrange(1, 12)) if late else clock[key] + rng.choice([0, 0, 1, 3, 7, 12])
        clock[key] = max(clock[key], when)
        events.append((key, when, rng.randrange(0, 21)))
    cuts = sorted(rng.sample(range(count + 1), min(count + 1, draw(st.integers(0, 3)))))
    out: list[Batch] = []
    start = 0
    for cut in [*cuts, count]:
        chunk = events[start:cut]
        start = cut
        top = max((when for _, when, _ in chunk), default=0)
        out.append((chunk, rng.choice([None, top, top + rng.randrange(0, 25), max(0, top - 8)])))
    return out


def run(query: KeyedQuery, script: Sequence[Batch], table: bool) -> tuple[list[OutputRow], list[Any]]:
    """Every batch through one bucket host (the blob saved and loaded between batches): the rows and, after each
    batch, every key's bookkeeping."""
    blob: bytes | None = None
    rows: list[OutputRow] = []
    books: list[Any] = []
    for order, (events, watermark) in enumerate(script):
        host = BucketHost(query, 1, 0, blob, table=table)
        per_key: dict[str, list[tuple[int, Any, Any]]] = {}
        for number, (key, when, value) in enumerate(events):
            per_key.setdefault(key, []).append((when, (order, number), value))
        rows += host.process(per_key, watermark)
        blob = host.encode()
        books.append(bookkeeping(host))
    return rows, books


def bookkeeping(host: BucketHost) -> dict[str, Any]:
    return {key: host.status(key) for key in host.state.keys}


def rows_of(rows: Sequence[OutputRow]) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in rows]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains, script=batches())
def test_the_table_form_gives_the_rows_and_bookkeeping_of_the_instance_form(chain: Chain, script: list[Batch]) -> None:
    query = keyed(chain.query())
    table = query.table()
    assert table is not None, f"{chain!r} has no table form"
    instance_rows, instance_books = run(query, script, table=False)
    table_rows, table_books = run(query, script, table=True)
    assert rows_of(table_rows) == rows_of(instance_rows)
    assert table_books == instance_books


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains, script=batches())
def test_a_completed_stream_ends_each_key_as_the_instance_form_does(chain: Chain, script: list[Batch]) -> None:
    query = keyed(chain.query())
    table = query.table()
    assert table is not None
    events: dict[str, list[tuple[int, Any]]] = {}
    for batch, _ in script:
        for key, when, value in batch:
            events.setdefault(key, []).append((when, value))
    until = script[-1][1]
    for key, key_events in events.items():
        ordered = sorted(key_events, key=lambda event: event[0])
        record, expected = run_key(query, key, None, ordered, until, where="test", complete=True)
        assert record is not None
        fresh = table.new_record(ordered[0][0])
        got = run_table_record(table, key, fresh, ordered, until, complete=True)
        assert rows_of(got) == rows_of(expected)
        assert tuple(fresh[:5]) == (record.clock, record.due, record.events, record.outputs, record.ended)


# -- which queries have a table form ------------------------------------------------------------------------------


def window_of(query: Query[Any]) -> Query[Any]:
    return query.window(timedelta(microseconds=SPAN)).flat_map(count_of)


def count_of(window: Query[Any]) -> Query[Any]:
    return window.count()


@pytest.mark.parametrize(("label", "query"), [
    ("a time window", window_of(Query.stream("s"))),
    ("a hopping aggregate_by_key",
     Query.stream("s").aggregate_by_key(WINDOW_KEYS["none"], __import__("reaqtive").Hopping(
         timedelta(seconds=2), timedelta(seconds=1)))),
    ("two tumbling windows",
     Query.stream("s").aggregate_by_key(WINDOW_KEYS["none"], Tumbling(timedelta(seconds=1)))
     .map(repr).aggregate_by_key(WINDOW_KEYS["none"], Tumbling(timedelta(seconds=2)))),
    ("a mutable seed", Query.stream("s").scan([], lambda acc, x: [*acc, x])),
    ("a time-based take", Query.stream("s").take(timedelta(seconds=1))),
])
def test_what_keeps_the_instance_form(label: str, query: Query[Any]) -> None:
    keyed_query = keyed(query)
    assert keyed_query.table() is None
    assert BucketHost(keyed_query, 1, 0, None).state.form == FORM_INSTANCES


def test_a_bucket_keeps_the_form_it_was_created_in() -> None:
    query = keyed(Query.stream("s").scan(0, lambda acc, x: acc + x))
    old = BucketHost(query, 1, 0, None, table=False)
    list(old.process({"k": [(1, 0, 5)]}, None))
    assert old.state.form == FORM_INSTANCES and old.encode()[4] == 1  # the format before the table form
    reopened = BucketHost(query, 1, 0, old.encode())
    assert reopened.table is None
    assert [row.value for row in reopened.process({"k": [(2, 0, 6)]}, None)] == [11]
    new = BucketHost(query, 1, 0, None)
    assert new.state.form == FORM_TABLE and new.encode()[4] == 2


def test_a_forged_table_record_is_refused_naming_the_bucket_and_key() -> None:
    query = keyed(Query.stream("s").count(lambda x: x > 1))
    host = BucketHost(query, 4, 2, None)
    list(host.process({"k": [(1, 0, 5)]}, None))
    assert host.table is not None
    state = BucketState.decode(host.encode())
    state.keys["k"] = host.table.pack([1, None, 1, 0, None, ["many"]])
    with pytest.raises(BucketStateError, match=r"bucket 2 of 4, key 'k'.*the field of 'count'"):
        list(BucketHost(query, 4, 2, state.encode()).process({"k": [(2, 0, 6)]}, None))
    state.keys["k"] = b"\x93\x01\x02"
    with pytest.raises(BucketStateError, match="key 'k': malformed state data"):
        list(BucketHost(query, 4, 2, state.encode()).process({"k": [(2, 0, 6)]}, None))
    state.keys["k"] = DEFAULT_CODEC.encode([2, 1, None])
    with pytest.raises(BucketStateError, match="key 'k': not a table record"):
        list(BucketHost(query, 4, 2, state.encode()).process({"k": [(2, 0, 6)]}, None))
    state.keys["k"] = host.table.pack([1, None, 1, 0, None, [3]])
    state.chain = ["count", "map"]
    with pytest.raises(QueryMismatchError, match="count -> map"):
        BucketHost(query, 4, 2, state.encode())


@pytest.mark.parametrize(("record", "message"), [
    ([2**62, None, 1, 0, None, [None]], "field 'clock'"),
    ([1, -(2**62), 1, 0, None, [None]], "field 'due'"),
    ([1, None, -1, 0, None, [None]], "field 'events'"),
    ([1, None, 1, 0, "gone", [None]], "field 'ended'"),
    ([1, None, 1, 0, "completed", [None]], "ended key's record holds fields"),
    ([1, 10, 1, 0, None, [[0, {None: [0, 2.0]}]]], "the field of 'aggregate_by_key'"),  # an empty window
    ([1, 10, 1, 0, None, [[2**61, {None: [1, 2.0]}]]], "the field of 'aggregate_by_key'"),  # past datetime.max
    ([1, 15, 1, 0, None, [[0, {None: [1, 2.0]}]]], "field 'due' is 15, its steps say 10"),
])
def test_a_forged_window_record_is_refused(record: list[Any], message: str) -> None:
    query = keyed(Query.stream("s").aggregate_by_key(WINDOW_KEYS["none"], Tumbling(timedelta(microseconds=SPAN)),
                                                     "sum"))
    host = BucketHost(query, 1, 0, None)
    assert host.table is not None
    state = BucketState.decode(host.encode())
    state.keys["k"] = host.table.pack(record)
    with pytest.raises(BucketStateError, match=message):
        list(BucketHost(query, 1, 0, state.encode()).process({"k": [(20, 0, 1)]}, None))


def test_host_limits_apply_in_both_forms_alike() -> None:
    from reaqtive.operators.settings import MAX_LIST_SIZE

    query = KeyedQuery.of(Query.stream("s").to_list(), settings={MAX_LIST_SIZE: 2})
    rows = {}
    for table in (True, False):
        host = BucketHost(query, 1, 0, None, table=table)
        rows[table] = rows_of(host.process({"k": [(1, 0, 1), (2, 1, 2), (3, 2, 3)]}, None))
    assert rows[True] == rows[False] and rows[True][0][4].startswith("LimitExceededError")


def test_a_table_checkpoint_is_refused_by_a_query_without_a_table_form() -> None:
    counting = keyed(Query.stream("s").count())
    host = BucketHost(counting, 1, 0, None)
    list(host.process({"k": [(1, 0, 5)]}, None))
    state = BucketState.decode(host.encode())
    other = keyed(window_of(Query.stream("s")))
    state.fingerprint = other.fingerprint
    with pytest.raises(QueryMismatchError, match="table form"):
        BucketHost(other, 1, 0, state.encode())


def test_a_window_sum_saved_by_format_2_loads_and_goes_on_exactly() -> None:
    """Format 2's float sum was a left fold's float: an exact value, so format 3 goes on from it; format 3 saves an
    exact sum (an ``ExactSum``) and loads it back."""
    query = keyed(Query.stream("s").aggregate_by_key(WINDOW_KEYS["none"], Tumbling(timedelta(microseconds=SPAN)),
                                                     "sum"))
    host = BucketHost(query, 1, 0, None)
    assert host.table is not None
    state = BucketState.decode(host.encode())
    # 1e16 + 1.0 + 1.0 folded left is 1e16 (each 1.0 lost): what format 2 saved for the window [0, 10)
    state.keys["k"] = DEFAULT_CODEC.encode([2, 2, 10, 3, 0, None, [[0, {None: [3, 1e16]}]]])
    rows = list(BucketHost(query, 1, 0, state.encode()).process({"k": [(3, 0, -1e16)]}, 10))
    assert [row.value[3] for row in rows] == [0.0]  # from the saved 1e16, exactly
    fresh = BucketHost(query, 1, 0, None)
    list(fresh.process({"k": [(0, 0, 1e16), (1, 1, 1.0), (2, 2, 1.0)]}, None))
    saved = fresh.encode()  # format 3, the window's sum an exact one
    assert [row.value[3] for row in BucketHost(query, 1, 0, saved).process({"k": [(3, 0, -1e16)]}, 10)] == [2.0]
