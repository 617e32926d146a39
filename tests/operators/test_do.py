"""do: side effects before the signal goes on, callback failures, the observer form, demand."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive import from_iterable
from reaqtive.testing import MockObserver, Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_completed(300)]


def test_do_on_next_runs_before_the_element_goes_downstream() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer: MockObserver[int] = scheduler.create_observer()
    seen: list[tuple[int, int, int]] = []
    result = scheduler.start(
        lambda: xs.do(lambda x: seen.append((scheduler.clock, x, len(observer.messages)))), observer=observer
    )
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(300)]
    assert seen == [(210, 2, 0), (230, 3, 1)], "the side effect ran first, at the element's tick"
    assert xs.subscriptions == [subscribe(200, 300)]


def test_do_on_complete_and_on_error_callbacks() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    calls: list[tuple[str, int]] = []
    result = scheduler.start(lambda: xs.do(on_complete=lambda: calls.append(("complete", scheduler.clock))))
    assert result.messages[-1] == on_completed(300) and calls == [("complete", 300)]

    scheduler = TestScheduler()
    failure = KeyError("upstream")
    ys = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    errors: list[BaseException] = []
    result = scheduler.start(lambda: ys.do(on_error=errors.append))
    assert result.messages == [on_next(210, 1), on_error(220, failure)]
    assert errors == [failure]


def test_do_with_an_observer_object() -> None:
    class Spy:
        def __init__(self) -> None:
            self.log: list[str] = []

        def on_next(self, value: int) -> None:
            self.log.append(f"next {value}")

        def on_error(self, error: BaseException) -> None:
            self.log.append(f"error {error!r}")

        def on_complete(self) -> None:
            self.log.append("complete")

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    spy = Spy()
    result = scheduler.start(lambda: xs.do(spy))
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(300)]
    assert spy.log == ["next 2", "next 3", "complete"]


def test_do_on_next_exception_is_an_error_at_the_same_tick_then_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def side_effect(x: int) -> None:
        if x == 3:
            raise boom

    result = scheduler.start(lambda: xs.do(side_effect))
    assert result.messages == [on_next(210, 2), on_error(230, boom)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_do_on_complete_exception_becomes_on_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def fail() -> None:
        raise boom

    result = scheduler.start(lambda: xs.do(on_complete=fail))
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_error(300, boom)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_do_on_error_exception_replaces_the_upstream_error() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_error(220, failure))
    boom = RuntimeError("boom")

    def fail(error: BaseException) -> None:
        raise boom

    result = scheduler.start(lambda: xs.do(on_error=fail))
    assert result.messages == [on_error(220, boom)]
    assert boom.__context__ is failure


def test_do_disposed_early_unsubscribes_and_calls_nothing_more() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    calls: list[Any] = []
    result = scheduler.start(lambda: xs.do(calls.append, calls.append, lambda: calls.append("done")), disposed=220)
    assert result.messages == [on_next(210, 2)]
    assert calls == [2]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_do_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.do(lambda x: None), HOT)


def test_do_with_one_at_a_time_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(250, observer.request, 1)
    seen: list[int] = []
    result = scheduler.start(lambda: xs.do(seen.append), observer=observer)
    assert result.messages == [on_next(210, 2), on_next(250, 3), on_completed(300)]
    assert seen == [2, 3]
    assert xs.requests == [Recorded(205, 1), Recorded(250, 1)]


def test_do_argument_validation() -> None:
    source = from_iterable([1])
    with pytest.raises(TypeError, match="do: give at least one callback"):
        source.do()
    with pytest.raises(TypeError, match="do: on_next must be callable"):
        source.do(42)
    with pytest.raises(TypeError, match="do: on_complete must be callable"):
        source.do(print, on_complete=3)  # type: ignore[arg-type]
    scheduler = TestScheduler()
    with pytest.raises(TypeError, match="either an observer or callbacks"):
        source.do(scheduler.create_observer(), on_error=print)
