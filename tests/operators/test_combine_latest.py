"""combine_latest: Rx semantics (first combination, completion, the source that never produced), errors from the
sources and the selector, disposal, bounded queues, recovery."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, Query, SimpleSubject, from_iterable
from reaqtive.core.visitors import initialize
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import CheckpointMode, StateShapeError, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

CONTEXT = OperatorContext("test://combine_latest")

XS = [on_next(150, 0), on_next(210, 1), on_next(240, 2), on_next(270, 3), on_completed(300)]
YS = [on_next(220, 10), on_next(240, 20), on_next(260, 30), on_completed(350)]
ZS = [on_next(230, 100), on_next(290, 200), on_completed(320)]


def add(x: int, y: int) -> int:
    return x + y


def test_combine_latest_waits_for_every_source_then_combines_on_each_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.combine_latest(ys, add))
    assert result.messages == [
        on_next(220, 11),
        on_next(240, 12),  # xs's 2 comes first at 240 (its source was created first)
        on_next(240, 22),
        on_next(260, 32),
        on_next(270, 33),
        on_completed(350),  # when every source completed
    ]
    assert xs.subscriptions == [subscribe(200, 300)]
    assert ys.subscriptions == [subscribe(200, 350)]


def test_combine_latest_n_ary_static_form_and_tuples_without_a_selector() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(*ZS)
    result = scheduler.start(lambda: Query.combine_latest(xs, ys, zs))
    assert result.messages == [
        on_next(230, (1, 10, 100)),
        on_next(240, (2, 10, 100)),
        on_next(240, (2, 20, 100)),
        on_next(260, (2, 30, 100)),
        on_next(270, (3, 30, 100)),
        on_next(290, (3, 30, 200)),
        on_completed(350),
    ]


def test_combine_latest_selector_receives_one_argument_per_source() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(*ZS)
    result = scheduler.start(lambda: xs.combine_latest(ys, zs, selector=lambda x, y, z: x + y + z))
    assert result.values[:2] == [111, 112]


def test_combine_latest_completes_at_once_when_a_source_completes_without_an_element() -> None:
    """Rx semantics (the original Reaqtive waited for the next element of another source)."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.combine_latest(ys, add))
    assert result.messages == [on_completed(250)]
    assert xs.subscriptions == [subscribe(200, 250)]
    assert ys.subscriptions == [subscribe(200, 250)]


def test_combine_latest_goes_on_after_a_source_with_an_element_completed() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(215))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.combine_latest(ys, add))
    assert result.messages == [on_next(220, 11), on_next(240, 21), on_next(260, 31), on_completed(350)]


def test_combine_latest_forwards_a_source_error_at_once_and_unsubscribes_every_source() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(230, boom))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.combine_latest(ys, add))
    assert result.messages == [on_next(220, 11), on_error(230, boom)]
    assert xs.subscriptions == [subscribe(200, 230)]
    assert ys.subscriptions == [subscribe(200, 230)]


def test_combine_latest_error_before_any_combination() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_error(205, boom))
    ys = scheduler.create_hot_observable(*YS)
    assert scheduler.start(lambda: xs.combine_latest(ys, add)).messages == [on_error(205, boom)]


def test_combine_latest_selector_exception_at_the_same_tick_then_unsubscription() -> None:
    scheduler = TestScheduler()
    boom = ZeroDivisionError("boom")
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)

    def selector(x: int, y: int) -> int:
        if y == 20:
            raise boom
        return x + y

    result = scheduler.start(lambda: xs.combine_latest(ys, selector))
    assert result.messages == [on_next(220, 11), on_next(240, 12), on_error(240, boom)]
    assert xs.subscriptions == [subscribe(200, 240)]
    assert ys.subscriptions == [subscribe(200, 240)]


def test_combine_latest_selector_returning_none_is_a_type_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.combine_latest(ys, lambda x, y: None))
    assert result.messages == [on_error(220, lambda e: isinstance(e, TypeError) and "None" in str(e))]


def test_combine_latest_disposed_early_unsubscribes_every_source() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.combine_latest(ys, add), disposed=230)
    assert result.messages == [on_next(220, 11)]
    assert xs.subscriptions == [subscribe(200, 230)]
    assert ys.subscriptions == [subscribe(200, 230)]


def test_combine_latest_queues_elements_without_demand_and_combines_them_in_arrival_order() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(245, observer.request, 2)
    scheduler.schedule_absolute(400, observer.request, 10)
    result = scheduler.start(lambda: xs.combine_latest(ys, add), observer=observer)
    assert result.messages == [
        on_next(245, 11),
        on_next(245, 12),
        on_next(400, 22),
        on_next(400, 32),
        on_next(400, 33),
        on_completed(400),
    ]


def test_combine_latest_takes_elements_that_cannot_combine_yet_without_demand() -> None:
    """xs's elements before ys has one make no combination: they are consumed (and more are requested), not
    left to fill the queue."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(201 + i, i) for i in range(10)])
    ys = scheduler.create_hot_observable(on_next(250, 100))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(300, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 4})
    result = scheduler.start(lambda: xs.combine_latest(ys, add), observer=observer, context=context)
    assert result.messages == [on_next(300, 109)]
    assert xs.requests == [Recorded(200, 4), Recorded(203, 3), Recorded(206, 3), Recorded(209, 3)]


def test_combine_latest_one_at_a_time_never_delivers_more_than_requested() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(210 + i, i) for i in range(20)])
    ys = scheduler.create_hot_observable(*[on_next(215 + i, 100 + i) for i in range(20)])
    observer = scheduler.create_observer(request=0)
    for tick in range(250, 400, 5):
        scheduler.schedule_absolute(tick, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 3})
    result = scheduler.start(lambda: xs.combine_latest(ys, add), observer=observer, context=context)
    for message in result.messages:
        assert len([m for m in result.messages if m.time <= message.time]) <= (message.time - 245) // 5
    for source in (xs, ys):
        assert source.requests[0] == Recorded(200, 3)
        assert all(r.value <= 3 for r in source.requests), "never more than the queue holds"
    assert len(result.values) == 30


def test_combine_latest_queue_overflow_from_an_upstream_that_ignores_demand() -> None:
    from reaqtive.core.errors import LimitExceededError
    from tests.operators.test_merge import Flood

    recorder = Recorder()
    context = OperatorContext("test://combine_latest", settings={MAX_QUEUE_SIZE: 2})
    initialize(from_iterable([1]).combine_latest(Query.from_subscribable(Flood()), add).subscribe(recorder), context)
    assert recorder.values == []
    assert isinstance(recorder.errors[0], LimitExceededError) and recorder.errors[0].setting == MAX_QUEUE_SIZE


def test_combine_latest_request_zero_signals_rule_3_9() -> None:
    recorder = Recorder()
    initialize(from_iterable([1]).combine_latest(from_iterable([2]), add).subscribe(recorder), CONTEXT)
    recorder.request(-1)
    assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])


def test_combine_latest_accepts_any_subscribable_as_a_source() -> None:
    subject = SimpleSubject[int]()
    recorder = Recorder(initial=100)
    initialize(from_iterable([1]).combine_latest(subject, add).subscribe(recorder), CONTEXT)
    subject.on_next(10)
    subject.on_next(20)
    subject.on_complete()
    assert recorder.values == [11, 21] and recorder.completed == 1


def test_combine_latest_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs, ys: xs.combine_latest(ys, add), XS, YS)
    assert_checkpoint_anywhere(Query.combine_latest, XS, YS, ZS)  # the static form
    assert_checkpoint_anywhere(lambda xs, ys: xs.combine_latest(ys, add), [on_completed(250)], YS)
    assert_checkpoint_anywhere(lambda xs, ys: xs.combine_latest(ys, add), [on_next(205, 1), on_completed(207)], YS)


def test_combine_latest_recovers_latest_values_done_flags_and_queued_elements() -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(200)
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(215))
    ys = scheduler.create_hot_observable(on_next(220, 10), on_next(230, 20))
    observer = scheduler.create_observer(request=0)
    handle = xs.combine_latest(ys, add).subscribe(observer)
    initialize(handle, scheduler.create_context())
    observer.request(1)
    scheduler.advance_to(240)
    assert observer.values == [11]
    blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    assert blob is not None

    xs2 = scheduler.create_hot_observable(on_next(250, 999))  # it had completed: not listened to any more
    ys2 = scheduler.create_hot_observable(on_next(260, 30), on_completed(270))
    recovered = scheduler.create_observer()
    initialize(xs2.combine_latest(ys2, add).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(300)
    assert recovered.messages == [on_next(240, 21), on_next(260, 31), on_completed(270)]
    assert xs2.subscriptions == [subscribe(240, 240)]


def test_combine_latest_state_of_another_number_of_sources_is_refused() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable()
    handle = Query.combine_latest(xs, xs, xs).subscribe(scheduler.create_observer())
    initialize(handle, scheduler.create_context())
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    with pytest.raises(StateShapeError, match="combination of 3 sources, the query combines 2"):
        initialize(
            xs.combine_latest(xs).subscribe(scheduler.create_observer()), scheduler.create_context(), state_loader(blob)
        )


@pytest.mark.parametrize(("bounded", "capacity"), [(False, 256), (False, 1), (True, 2), (True, 5)])
def test_combine_latest_serializes_signals_from_concurrent_threads(bounded: bool, capacity: int) -> None:
    from tests.operators.test_merge import run_concurrently

    recorder = run_concurrently(Query.combine_latest, 3, 1000, bounded=bounded, capacity=capacity)
    assert recorder.errors == [] and recorder.completed == 1
    assert recorder.overlaps == 0 and not recorder.violations
    values = recorder.values
    assert values[-1] == (999, 999, 999)
    for before, after in itertools.pairwise(values):
        # one element at a time: each combination differs from the one before in one source, which moved on
        changed = [i for i in range(3) if before[i] != after[i]]
        assert len(changed) == 1 and after[changed[0]] > before[changed[0]]


def reference(events: list[tuple[int, int, Any]], count: int, ends: list[int | None]) -> list[Recorded[Any]]:
    """Rx's combine_latest over (time, source, value) events sorted in delivery order, with completion times."""
    latest: list[Any] = [None] * count
    out: list[Recorded[Any]] = []
    terminal = [(t, i) for i, t in enumerate(ends) if t is not None]
    # at equal times, the hot sources deliver in the order they were created (their messages were scheduled so)
    timeline = sorted([(t, i, 0, v) for t, i, v in events] + [(t, i, 1, None) for t, i in terminal])
    done = [False] * count
    for time, index, kind, value in timeline:
        if kind == 0:
            latest[index] = value
            if all(v is not None for v in latest):
                out.append(on_next(time, tuple(latest)))
        else:
            done[index] = True
            if latest[index] is None or all(done):
                out.append(on_completed(time))
                return out
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data(), count=st.integers(2, 3))
def test_combine_latest_matches_a_model_of_rx(data: st.DataObject, count: int) -> None:
    scheduler = TestScheduler()
    scripts = []
    events: list[tuple[int, int, Any]] = []
    ends: list[int | None] = []
    for index in range(count):
        times = sorted(data.draw(st.sets(st.integers(201, 260), max_size=6)))
        end = data.draw(st.one_of(st.none(), st.integers(201, 270)))
        times = [t for t in times if end is None or t < end]
        script = [on_next(t, (index, t)) for t in times] + ([on_completed(end)] if end is not None else [])
        scripts.append(script)
        events += [(t, index, (index, t)) for t in times]
        ends.append(end)
    sources = [scheduler.create_hot_observable(*script) for script in scripts]
    result = scheduler.start(lambda: Query.combine_latest(*sources))
    assert result.messages == reference(events, count, ends)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda q: q.combine_latest(), ValueError, "at least one other source"),
        (lambda q: q.combine_latest(add), ValueError, "at least one other source"),
        (lambda q: q.combine_latest(42, add), TypeError, "source 1 must be a query"),
        (lambda q: q.combine_latest(q, selector=42), TypeError, "selector must be callable"),
    ],
)
def test_arguments_are_validated_when_the_query_is_built(call: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call(from_iterable([1]))
