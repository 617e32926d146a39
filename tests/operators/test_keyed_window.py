"""``aggregate_by_key``: windows per key aligned to an origin, closed by one timer per window end, state in a keyed
state table (issue 17, item 2)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import LimitExceededError, OperatorArgumentError, Query
from reaqtive.core.scheduler_interface import SchedulerTask
from reaqtive.engine import Engine
from reaqtive.operators.keyed_window import EPOCH, MAX_HOPS, Fold, Hopping, Session, Tumbling
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import InnerEnvironment
from reaqtive.testing import (
    Notification,
    Recorded,
    TestScheduler,
    on_completed,
    on_error,
    on_next,
)
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.support import stable_id

S: Final = timedelta(seconds=1)  # one tick of the test scheduler

Script = list[Recorded[Notification[Any]]]
Window = Tumbling | Hopping | Session


def at(tick: int) -> datetime:
    return EPOCH + tick * S


def key_of(event: tuple[Any, Any]) -> Any:
    return event[0]


def value_of(event: tuple[Any, Any]) -> Any:
    return event[1]


def digits(acc: int, value: int) -> int:
    """A fold whose result depends on the order of the values."""
    return acc * 10 + value


def append(acc: tuple[Any, ...], value: Any) -> tuple[Any, ...]:
    return (*acc, value)


def bracket(text: str) -> str:
    return f"<{text}>"


def concat(acc: str, value: int) -> str:
    return acc + str(value)


def by_key(window: Window, aggregate: Any = "sum", **options: Any) -> Callable[[Query[Any]], Query[Any]]:
    """The query over ``(key, value)`` events."""
    return lambda xs: xs.aggregate_by_key(key_of, window, aggregate, value_of, **options)


EVENTS: Final[Script] = [
    on_next(201, ("a", 1)),
    on_next(203, ("b", 5)),
    on_next(207, ("a", 3)),
    on_next(212, ("a", 2)),
    on_next(213, ("b", 4)),
    on_completed(230),
]


def run(create: Callable[[Query[Any]], Query[Any]], script: Sequence[Recorded[Notification[Any]]],
        **start: Any) -> list[Recorded[Notification[Any]]]:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script)
    return list(scheduler.start(lambda: create(xs), **start).messages)


def row(tick: int, key: Any, start: int, end: int, value: Any) -> Recorded[Notification[Any]]:
    return on_next(tick, (key, at(start), at(end), value))


# -- behaviour on virtual time ---------------------------------------------------------------------------------

TUMBLING_VALUES: Final = [
    ("count", (2, 1, 1, 1)),
    ("sum", (4, 5, 2, 4)),
    ("average", (2.0, 5.0, 2.0, 4.0)),
    ("min", (1, 5, 2, 4)),
    ("max", (3, 5, 2, 4)),
    (Fold("", concat, bracket), ("<13>", "<5>", "<2>", "<4>")),
    (Fold(0, digits), (13, 5, 2, 4)),
]


@pytest.mark.parametrize(("aggregate", "values"), TUMBLING_VALUES, ids=stable_id)
def test_tumbling_windows_emit_one_row_per_key_and_window_at_the_window_end(aggregate: Any, values: tuple[Any, ...]) \
        -> None:
    a1, b1, a2, b2 = values
    assert run(by_key(Tumbling(10 * S), aggregate), EVENTS) == [
        row(210, "a", 200, 210, a1),  # the order the windows opened
        row(210, "b", 200, 210, b1),
        row(220, "a", 210, 220, a2),
        row(220, "b", 210, 220, b2),
        on_completed(230),
    ]


@pytest.mark.parametrize(
    ("aggregate", "values"),
    [
        ("count", (1, 1, 2, 1, 2, 1, 1, 1)),
        ("sum", (1, 5, 4, 5, 5, 4, 2, 4)),
        ("average", (1.0, 5.0, 2.0, 5.0, 2.5, 4.0, 2.0, 4.0)),
        ("min", (1, 5, 1, 5, 2, 4, 2, 4)),
        ("max", (1, 5, 3, 5, 3, 4, 2, 4)),
        (Fold((), append), ((1,), (5,), (1, 3), (5,), (3, 2), (4,), (2,), (4,))),
    ],
    ids=stable_id,
)
def test_hopping_windows_count_an_element_in_every_window_it_falls_in(aggregate: Any, values: tuple[Any, ...]) -> None:
    v = values
    assert run(by_key(Hopping(10 * S, 5 * S), aggregate), EVENTS) == [
        row(205, "a", 195, 205, v[0]),
        row(205, "b", 195, 205, v[1]),
        row(210, "a", 200, 210, v[2]),
        row(210, "b", 200, 210, v[3]),
        row(215, "a", 205, 215, v[4]),
        row(215, "b", 205, 215, v[5]),
        row(220, "a", 210, 220, v[6]),
        row(220, "b", 210, 220, v[7]),
        on_completed(230),
    ]


def test_hopping_windows_with_a_slide_longer_than_the_size_drop_the_elements_in_the_gaps() -> None:
    events: Script = [on_next(201, ("a", 1)), on_next(204, ("a", 2)), on_next(207, ("a", 3)), on_completed(230)]
    assert run(by_key(Hopping(3 * S, 5 * S), "count"), events) == [
        row(203, "a", 200, 203, 1),  # 204 falls between [200, 203) and [205, 208)
        row(208, "a", 205, 208, 1),
        on_completed(230),
    ]


@pytest.mark.parametrize(
    ("aggregate", "values"),
    [("count", (1, 1, 1, 1, 1)), ("sum", (1, 5, 3, 2, 4)), ("average", (1.0, 5.0, 3.0, 2.0, 4.0)),
     ("max", (1, 5, 3, 2, 4)), (Fold(0, digits, str), ("1", "5", "3", "2", "4"))],
    ids=stable_id,
)
def test_a_session_closes_gap_after_its_last_element(aggregate: Any, values: tuple[Any, ...]) -> None:
    v = values
    assert run(by_key(Session(5 * S), aggregate), EVENTS) == [
        row(206, "a", 201, 206, v[0]),
        row(208, "b", 203, 208, v[1]),
        row(212, "a", 207, 212, v[2]),  # 212 is gap after 207: that session closes before 212 counts
        row(217, "a", 212, 217, v[3]),
        row(218, "b", 213, 218, v[4]),
        on_completed(230),
    ]


def test_a_session_extends_while_its_elements_come_within_the_gap() -> None:
    events: Script = [
        on_next(201, ("a", 1)),
        on_next(204, ("a", 2)),
        on_next(205, ("b", 7)),
        on_next(205, ("c", 1)),
        on_next(208, ("a", 3)),
        on_next(208, ("a", 4)),  # the same instant: the end does not move
        on_next(208, ("c", 2)),
        on_completed(230),
    ]
    assert run(by_key(Session(5 * S), Fold((), append)), events) == [
        row(210, "b", 205, 210, (7,)),
        row(213, "a", 201, 213, (1, 2, 3, 4)),  # a and c both end at 213: in the order they moved there
        row(213, "c", 205, 213, (1, 2)),
        on_completed(230),
    ]


def test_windows_of_every_key_align_to_the_origin_not_to_the_keys_first_element() -> None:
    events: Script = [on_next(201, ("a", 1)), on_next(207, ("b", 1)), on_next(214, ("b", 1)), on_completed(230)]
    assert run(by_key(Tumbling(10 * S), "count"), events) == [
        row(210, "a", 200, 210, 1),
        row(210, "b", 200, 210, 1),  # b appeared at 207: its window is still [200, 210)
        row(220, "b", 210, 220, 1),
        on_completed(230),
    ]
    # another origin moves every boundary, for every key alike (an origin in another time zone is the same instant)
    origin = (EPOCH + 3 * S).astimezone(timezone_plus_two())
    assert run(by_key(Tumbling(10 * S), "count", origin=origin), events) == [
        row(203, "a", 193, 203, 1),
        row(213, "b", 203, 213, 1),
        row(223, "b", 213, 223, 1),
        on_completed(230),
    ]


def timezone_plus_two() -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=2))


def test_an_origin_far_from_the_clock_aligns_the_same() -> None:
    events: Script = [on_next(201, ("a", 1)), on_completed(230)]
    origin = datetime(2300, 1, 1, 0, 0, 7, tzinfo=UTC)  # a whole number of 10 s from the epoch, plus 7 s
    assert run(by_key(Tumbling(10 * S), "count", origin=origin), events) == [
        row(207, "a", 197, 207, 1),
        on_completed(230),
    ]


def test_empty_windows_produce_no_row_and_an_idle_key_costs_nothing() -> None:
    events: Script = [on_next(201, ("a", 1)), on_next(203, ("b", 2)), on_next(245, ("a", 3)), on_completed(300)]
    assert run(by_key(Tumbling(10 * S), "average"), events) == [
        row(210, "a", 200, 210, 1.0),
        row(210, "b", 200, 210, 2.0),
        row(250, "a", 240, 250, 3.0),  # nothing for [210, 240), nothing ever again for b
        on_completed(300),
    ]


def test_a_closed_windows_key_leaves_the_table_and_its_empty_page_is_deleted() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(201 + i % 5, (f"k{i}", i)) for i in range(3000)])
    environment = InnerEnvironment()
    pages: dict[int, int] = {}

    def count_pages(tick: int) -> None:
        pages[tick] = len(environment.inner_subscriptions())

    for tick in (206, 209, 211):
        scheduler.schedule_absolute(tick, count_pages, tick)
    observer = scheduler.start(lambda: by_key(Tumbling(10 * S), "count")(xs),
                               context=scheduler.create_context(None, environment))
    assert len(observer.messages) == 3000
    assert pages == {206: 3, 209: 3, 211: 0}, "3,000 keys in pages of 1,024; none once their windows closed"


class CountingScheduler(TestScheduler):
    """Counts the tasks that operators schedule (the harness's own actions are scheduled otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduled = 0

    def schedule(self, task: SchedulerTask, due: timedelta | datetime | None = None) -> None:
        self.scheduled += 1
        super().schedule(task, due)


@pytest.mark.parametrize(
    ("window", "ends"),
    [(Tumbling(10 * S), 3), (Hopping(10 * S, 5 * S), 6), (Session(4 * S), 3)],
    ids=["tumbling", "hopping", "session"],
)
def test_one_timer_serves_every_key_whose_window_ends_then(window: Window, ends: int) -> None:
    scheduler = CountingScheduler()
    events = [on_next(tick, (f"k{i}", 1)) for tick in (201, 211, 221) for i in range(500)]
    xs = scheduler.create_hot_observable(*events)
    observer = scheduler.start(lambda: by_key(window, "count")(xs))
    assert len(observer.messages) == 500 * ends
    assert scheduler.scheduled == ends, "one task per distinct window end, not per key"


def test_the_source_completing_closes_every_open_window_in_end_order() -> None:
    events: Script = [on_next(201, ("a", 1)), on_next(207, ("b", 2)), on_completed(208)]
    assert run(by_key(Hopping(10 * S, 5 * S), "sum"), events) == [
        row(205, "a", 195, 205, 1),
        row(208, "a", 200, 210, 1),
        row(208, "b", 200, 210, 2),
        row(208, "b", 205, 215, 2),  # ends 210, 210, 215: end order, then the order they opened
        on_completed(208),
    ]


def test_a_source_error_goes_downstream_at_once_and_the_open_windows_are_dropped() -> None:
    boom = ValueError("boom")
    events: Script = [on_next(201, ("a", 1)), on_error(205, boom)]
    assert run(by_key(Tumbling(10 * S)), events) == [on_error(205, boom)]


def test_an_empty_source_completes_with_no_row() -> None:
    assert run(by_key(Session(5 * S), "average"), [on_completed(230)]) == [on_completed(230)]


def test_the_strict_rx_form_aligns_on_each_groups_creation_and_emits_empty_windows() -> None:
    """What the docs say of ``group_by(k).flat_map(lambda g: g.window(d).flat_map(...))``, next to the keyed form."""
    events: Script = [on_next(201, ("a", 1)), on_next(207, ("b", 1)), on_next(214, ("b", 1))]

    def strict(xs: Query[Any]) -> Query[Any]:
        return xs.group_by(key_of).flat_map(
            lambda g: g.window(10 * S).flat_map(lambda w: w.count().map(lambda n: (g.key, n)))
        )

    messages = run(strict, events, disposed=230)
    assert messages[:4] == [
        on_next(211, ("a", 1)),  # a's windows start at 201 (its creation): [201, 211)
        on_next(217, ("b", 2)),  # b's at 207
        on_next(221, ("a", 0)),  # an idle group's window: a row of 0 (its average would divide by zero)
        on_next(227, ("b", 0)),
    ]


# -- user code and elements that fail ------------------------------------------------------------------------


def boom(*_: object) -> Any:
    raise ValueError("boom")


def test_a_key_selector_that_raises_fails_the_query_at_that_element() -> None:
    events: Script = [on_next(201, ("a", 1)), on_next(204, ("b", 2))]
    messages = run(lambda xs: xs.aggregate_by_key(lambda e: boom() if e[0] == "b" else e[0], Tumbling(10 * S)),
                   events)
    assert messages == [on_error(204, ValueError("boom"))]


def test_a_value_selector_that_raises_fails_the_query() -> None:
    messages = run(lambda xs: xs.aggregate_by_key(key_of, Tumbling(10 * S), "sum", boom), EVENTS)
    assert messages == [on_error(201, ValueError("boom"))]


def test_count_does_not_call_the_value_selector() -> None:
    messages = run(lambda xs: xs.aggregate_by_key(key_of, Tumbling(100 * S), "count", boom), EVENTS)
    assert messages == [row(230, "a", 200, 300, 3), row(230, "b", 200, 300, 2), on_completed(230)]


@pytest.mark.parametrize(
    ("aggregate", "tick"),
    [(Fold(0, boom), 201), (Fold(0, operator.add, boom), 210), ("min", 203), ("average", 210)],
    ids=["accumulator", "result selector", "min of values that do not compare", "average of strings"],
)
def test_the_aggregates_errors_fail_the_query_when_they_happen(aggregate: Any, tick: int) -> None:
    values = ["x", 1] if aggregate == "min" else ["x", "y"] if aggregate == "average" else [1, 2]
    events: Script = [on_next(201, ("a", values[0])), on_next(203, ("a", values[1])), on_completed(230)]
    messages = run(by_key(Tumbling(10 * S), aggregate), events)
    assert len(messages) == 1 and messages[0].time == tick
    assert isinstance(messages[0].value, Notification) and messages[0].value.kind.name == "ON_ERROR"


def test_a_key_that_cannot_be_hashed_fails_the_query() -> None:
    messages = run(by_key(Session(5 * S)), [on_next(201, (["a"], 1))])
    assert len(messages) == 1 and messages[0].time == 201
    assert "unhashable" in str(getattr(messages[0].value, "error", ""))


# -- demand --------------------------------------------------------------------------------------------------


def test_rows_wait_for_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*EVENTS)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(201, observer.request, 1)
    scheduler.schedule_absolute(240, observer.request, 10)
    scheduler.start(lambda: by_key(Tumbling(10 * S), "sum")(xs), observer=observer)
    assert observer.messages == [
        row(210, "a", 200, 210, 4),
        row(240, "b", 200, 210, 5),  # the source was asked for everything: the windows went on without demand
        row(240, "a", 210, 220, 2),
        row(240, "b", 210, 220, 4),
        on_completed(240),
    ]


@pytest.mark.parametrize("keys", [4, 5])
def test_more_rows_than_the_queue_holds_beyond_the_demand_is_a_limit_error(keys: int) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(201, (key, 1)) for key in "abcde"[:keys]])
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(201, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 3})
    scheduler.start(lambda: by_key(Tumbling(10 * S))(xs), observer=observer, context=context)
    if keys == 4:  # one row delivered, three waiting: what the queue holds
        assert observer.messages == [row(210, "a", 200, 210, 1)]
        return
    assert len(observer.messages) == 1 and observer.messages[0].time == 210  # an error goes ahead of the rows
    error = getattr(observer.messages[0].value, "error", None)
    assert isinstance(error, LimitExceededError) and "max_queue_size" in str(error)


# -- arguments ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Tumbling(timedelta(0)), ValueError, "Tumbling: size must be"),
        (lambda: Tumbling(5), TypeError, "Tumbling: size must be a timedelta"),
        (lambda: Hopping(S, -S), ValueError, "Hopping: slide"),
        (lambda: Hopping(S, S / (MAX_HOPS + 1)), ValueError, f"more than {MAX_HOPS}"),
        (lambda: Session(None), TypeError, "Session: gap"),
        (lambda: Fold(0, "add"), TypeError, "Fold: accumulator"),
        (lambda: Fold(0, operator.add, 3), TypeError, "Fold: result_selector"),
        (lambda: Query.empty().aggregate_by_key("k", Tumbling(S)), TypeError, "aggregate_by_key: key_selector"),
        (lambda: Query.empty().aggregate_by_key(key_of, S), TypeError, "window must be Tumbling, Hopping or Session"),
        (lambda: Query.empty().aggregate_by_key(key_of, Tumbling(S), "median"), ValueError, "'median'"),
        (lambda: Query.empty().aggregate_by_key(key_of, Tumbling(S), len), TypeError, "or a Fold"),
        (lambda: Query.empty().aggregate_by_key(key_of, Tumbling(S), "sum", 3), TypeError, "value_selector"),
        (lambda: Query.empty().aggregate_by_key(key_of, Tumbling(S), origin=datetime(2020, 1, 1)), ValueError,
         "origin must be timezone-aware"),
        (lambda: Query.empty().aggregate_by_key(key_of, Tumbling(S), origin=0), TypeError, "origin"),
    ],
)
def test_the_builder_and_the_specifications_refuse_bad_arguments(make: Callable[[], object], error: type,
                                                                   message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(")):
        make()


@pytest.mark.parametrize(
    ("index", "value"),
    [
        (2, ("tumbling", timedelta(0))),
        (2, ("hopping", S)),
        (2, ("hopping", S, S / (MAX_HOPS + 1))),
        (2, ("sliding", S)),
        (2, Tumbling(S)),  # the specification itself is not the node's form (a store could not hold it)
        (3, "median"),
        (3, ("fold", 0, "add", None)),
        (3, ("fold", 0, operator.add, 3)),
        (3, Fold(0, operator.add)),
        (4, "f"),
        (5, datetime(2020, 1, 1)),
    ],
)
def test_a_forged_node_is_refused_at_bind_naming_the_argument(index: int, value: object) -> None:
    args: list[object] = [Query.empty(), key_of, ("tumbling", S), "count", None, EPOCH]
    args[index] = value
    with pytest.raises(OperatorArgumentError) as raised:
        Query("aggregate_by_key", tuple(args)).subscribe(TestScheduler().create_observer())
    assert raised.value.op == "aggregate_by_key" and raised.value.index == index


def test_the_node_holds_plain_data() -> None:
    query = Query.empty().aggregate_by_key(key_of, Hopping(2 * S, S), Fold(0, digits, str), value_of)
    assert query.args[1:] == (key_of, ("hopping", 2 * S, S), ("fold", 0, digits, str), value_of, EPOCH)


# -- checkpoint anywhere --------------------------------------------------------------------------------------

KEYED: Final[Script] = [
    on_next(201, ("a", 1)),
    on_next(203, ("b", 5)),
    on_next(207, ("a", 3)),
    on_next(212, ("a", 2)),
    on_next(213, ("b", 4)),
    on_next(213, ("c", 6)),
    on_next(226, ("b", 1)),
    on_next(241, ("a", 7)),
    on_next(241, ("c", 2)),
    on_completed(250),
]

QUERIES: Final = {
    "tumbling": by_key(Tumbling(10 * S), "sum"),
    "hopping": by_key(Hopping(10 * S, 4 * S), "average"),
    "session": by_key(Session(6 * S), Fold((), append)),
    "session count": by_key(Session(3 * S), "count"),
}

DEMANDS: Final = [
    None,
    Demand(initial=1, batch=1),
    Demand(requests=((215, 2), (230, 1), (260, 20))),
]


@pytest.mark.parametrize("demand", DEMANDS, ids=["unbounded", "one at a time", "slow"])
@pytest.mark.parametrize("label", list(QUERIES))
def test_the_query_survives_a_checkpoint_anywhere(label: str, demand: Demand | None) -> None:
    assert_checkpoint_anywhere(QUERIES[label], KEYED, demand=demand)


# -- the differential test against a plain computation ---------------------------------------------------------

AGGREGATES: Final[list[Any]] = ["count", "sum", "average", "min", "max", Fold(0, digits), Fold((), append, len)]
DISPOSED: Final = 1000


def reference(events: list[tuple[int, str, int]], window: Window, aggregate: Any, origin: int,
              completed: int | None) -> list[Recorded[Notification[Any]]]:
    """The rows of ``aggregate_by_key`` over ``events`` (``(tick, key, value)`` in arrival order), computed with
    plain loops: ``(end, order, key, start, values)`` per window, emitted at its end (or at completion) in end
    order, then in the order windows opened (a session: the order it got its end)."""
    closed: list[tuple[int, int, str, int, list[int]]] = []
    if isinstance(window, Session):
        gap = window.gap // S
        sessions: dict[str, list[Any]] = {}  # key -> [start, last, order, values]
        for index, (tick, key, value) in enumerate(events):
            session = sessions.get(key)
            if session is not None and tick - session[1] < gap:
                if tick != session[1]:
                    session[1], session[2] = tick, index
                session[3].append(value)
                continue
            if session is not None:
                closed.append((session[1] + gap, session[2], key, session[0], session[3]))
            sessions[key] = [tick, tick, index, [value]]
        closed += [(s[1] + gap, s[2], key, s[0], s[3]) for key, s in sessions.items()]
    else:
        size = window.size // S
        slide = size if isinstance(window, Tumbling) else window.slide // S
        opened: dict[tuple[str, int], tuple[int, list[int]]] = {}
        for index, (tick, key, value) in enumerate(events):
            for k in range((tick - origin - size) // slide + 1, (tick - origin) // slide + 1):
                opened.setdefault((key, origin + k * slide), (index, []))[1].append(value)
        closed += [(start + size, order, key, start, values) for (key, start), (order, values) in opened.items()]
    expected: list[Recorded[Notification[Any]]] = []
    for end, _, key, start, values in sorted(closed, key=lambda window: window[:2]):
        if completed is None and end > DISPOSED:
            continue
        tick = end if completed is None else min(end, completed)
        expected.append(row(tick, key, start, end, fold(aggregate, values)))
    if completed is not None:
        expected.append(on_completed(completed))
    return expected


def fold(aggregate: Any, values: list[int]) -> Any:
    if isinstance(aggregate, Fold):
        acc = functools.reduce(aggregate.accumulator, values, aggregate.seed)
        return acc if aggregate.result_selector is None else aggregate.result_selector(acc)
    total = functools.reduce(operator.add, values)  # added from the first, in order (not math.fsum, not sum())
    return {"count": len(values), "sum": total, "average": total / len(values), "min": min(values),
            "max": max(values)}[aggregate]


windows = st.one_of(
    st.integers(1, 12).map(lambda n: Tumbling(n * S)),
    st.tuples(st.integers(1, 12), st.integers(1, 12)).map(lambda p: Hopping(p[0] * S, p[1] * S)),
    st.integers(1, 12).map(lambda n: Session(n * S)),
)
event_lists = st.lists(
    st.tuples(st.sampled_from([0, 0, 1, 1, 2, 3, 5, 9, 14]), st.sampled_from("abcd"), st.integers(-5, 9)),
    max_size=30,
).map(lambda steps: [(201 + sum(step[0] for step in steps[: i + 1]), key, value)
                     for i, (_, key, value) in enumerate(steps)])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=event_lists,
    window=windows,
    aggregate=st.sampled_from(AGGREGATES),
    origin=st.integers(-20, 20),
    completed_after=st.none() | st.integers(0, 15),
)
def test_the_rows_equal_a_plain_computations(events: list[tuple[int, str, int]], window: Window, aggregate: Any,
                                             origin: int, completed_after: int | None) -> None:
    completed = None if completed_after is None else (events[-1][0] if events else 201) + completed_after
    script: Script = [on_next(tick, (key, value)) for tick, key, value in events]
    if completed is not None:
        script.append(on_completed(completed))
    actual = run(by_key(window, aggregate, origin=at(origin)), script, disposed=DISPOSED)
    assert actual == reference(events, window, aggregate, origin, completed)


# -- under the engine -----------------------------------------------------------------------------------------

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
ENGINE_WINDOWS: Final = {
    "tumbling": (Tumbling(timedelta(minutes=1)), "average"),
    "hopping": (Hopping(timedelta(minutes=1), timedelta(seconds=20)), "max"),
    "session": (Session(timedelta(seconds=30)), Fold(0, digits, str)),
}


def engine_rows(path: Path, label: str, stops: Sequence[tuple[int, bool]] = ()) -> list[tuple[int, Any]]:
    """The durable sink of a standing ``aggregate_by_key`` over 2,000 events of 97 keys; at each ``(events,
    checkpoint)`` of ``stops`` the engine processes that many more events, checkpoints (or not: the events since
    the last checkpoint are replayed) and is closed and reopened."""
    window, aggregate = ENGINE_WINDOWS[label]
    engine = Engine(path, allow_modules=[__name__], start=T0)  # event time from T0 on
    engine.create_stream("raw")
    engine.create_subscription("q", Query.stream("raw").aggregate_by_key(key_of, window, aggregate, value_of))
    engine.append_many("raw", [((f"k{i * 7 % 97}", i % 10), T0 + timedelta(seconds=i * 3 // 5)) for i in range(2000)])
    for events, checkpoint in stops:
        engine.process(max_events=events)
        if checkpoint:
            engine.checkpoint()
        engine.close()
        engine = Engine(path, allow_modules=[__name__])
    engine.process()
    engine.advance_time(T0 + timedelta(hours=1))  # the clock passes the last windows' end
    rows = [(output.seq, output.value) for output in engine.outputs("q")]
    engine.close()
    return rows


@pytest.mark.parametrize("label", list(ENGINE_WINDOWS))
def test_a_standing_query_recovers_and_its_durable_sink_equals_an_uninterrupted_runs(tmp_path: Path,
                                                                                     label: str) -> None:
    expected = engine_rows(tmp_path / "oracle.db", label)
    assert len(expected) > 200 and all(type(value) is tuple and len(value) == 4 for _, value in expected)
    restarted = engine_rows(tmp_path / "restarted.db", label, [(500, True), (333, False), (700, True), (1, False)])
    assert restarted == expected


def test_a_checkpoint_writes_only_the_pages_of_the_keys_that_changed(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__], start=T0) as engine:
        engine.create_stream("raw")
        query = Query.stream("raw").aggregate_by_key(key_of, Tumbling(timedelta(hours=1)), "sum", value_of)
        engine.create_subscription("q", query)
        engine.append_many("raw", [((i, 1), T0) for i in range(5000)])
        engine.process()
        full = engine.checkpoint(full=True)
        assert full.dirty_subscriptions == 6, "the query and its 5 pages of keys"
        engine.append_many("raw", [((3, 1), T0), ((4, 1), T0), ((1000, 1), T0)])
        engine.process()
        differential = engine.checkpoint()
        assert differential.dirty_subscriptions == 1, "the page of keys 3, 4 and 1000: the query itself is clean"
        assert differential.bytes_written * 4 < full.bytes_written, (differential, full)
        engine.append_many("raw", [((3, 1), T0), ((4999, 1), T0)])
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 2, "the first page and the last"
