"""from_iterable: demand, the drain loop, and the rules of chapter 3 of the specification."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import LONG_MAX, OperatorContext, as_publisher, from_iterable
from reaqtive.core.visitors import initialize
from reaqtive.operators.from_iterable import FromIterable
from reaqtive.state import state_loader
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._versions_support import save_as_version_1
from tests.support import Recorder

CONTEXT = OperatorContext("test://from_iterable")


def start(query: Any, recorder: Recorder) -> Any:
    return initialize(query.subscribe(recorder), CONTEXT)


def frame_depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back  # type: ignore[assignment]
    return depth


class OneAtATime(Recorder):
    """Requests one element from inside each on_next and samples the stack depth."""

    def __init__(self) -> None:
        super().__init__(initial=1, per_item=1)
        self.depths: list[int] = []

    def on_next(self, value: Any) -> None:
        if value % 50_000 == 0:
            self.depths.append(frame_depth())
        super().on_next(value)


def test_request_one_inside_on_next_over_a_million_elements_has_bounded_stack_depth() -> None:
    recorder = OneAtATime()
    start(from_iterable(range(1_000_000)), recorder)
    assert len(recorder.values) == 1_000_000 and recorder.completed == 1
    assert recorder.values[:3] == [0, 1, 2] and recorder.values[-1] == 999_999
    assert not recorder.violations, recorder.violations[:3]
    # rule 3.3: the depth does not grow with each request (it differs by the path an element takes, at most)
    assert len(recorder.depths) == 20 and max(recorder.depths) - min(recorder.depths) <= 2


def test_emits_nothing_without_demand_and_exactly_what_is_requested() -> None:
    recorder = Recorder()
    start(from_iterable(range(100)), recorder)
    assert recorder.values == []
    recorder.request(3)
    assert recorder.values == [0, 1, 2]
    recorder.request(2)
    assert recorder.values == [0, 1, 2, 3, 4] and recorder.completed == 0


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 40), requests=st.lists(st.integers(1, 15), max_size=12))
def test_never_delivers_more_than_requested(size: int, requests: list[int]) -> None:
    recorder = Recorder()
    start(from_iterable(range(size)), recorder)
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert len(recorder.values) == min(size, requested), "exactly what was requested, at every point"
    total = sum(requests)
    assert recorder.values == list(range(min(size, total)))
    assert not recorder.violations
    # It completes as soon as the end is known, even without further demand.
    assert recorder.completed == (1 if total >= size else 0)


def test_empty_iterable_completes_without_any_request() -> None:
    recorder = Recorder()
    start(from_iterable([]), recorder)
    assert recorder.completed == 1 and recorder.values == []


def test_completes_when_demand_exactly_matches_the_length() -> None:
    recorder = Recorder(initial=3)
    start(from_iterable("abc"), recorder)
    assert recorder.values == ["a", "b", "c"] and recorder.completed == 1


@pytest.mark.parametrize("n", [0, -1, -(2**40)])
def test_non_positive_request_signals_value_error_through_on_error(n: int) -> None:
    recorder = Recorder()
    start(from_iterable(range(10)), recorder)
    recorder.request(n)  # rule 3.16: returns normally
    assert len(recorder.errors) == 1
    error = recorder.errors[0]
    assert isinstance(error, ValueError) and "3.9" in str(error)
    recorder.request(5)
    assert recorder.values == [], "after the error the subscription is cancelled"


def test_demand_summing_past_long_max_is_effectively_unbounded() -> None:
    recorder = Recorder()
    start(from_iterable(range(1000)), recorder)
    recorder.request(LONG_MAX - 1)
    recorder.request(LONG_MAX - 1)
    recorder.request(LONG_MAX)
    assert len(recorder.values) == 1000 and recorder.completed == 1 and recorder.errors == []


def test_cancel_is_idempotent_and_later_requests_are_no_ops() -> None:
    recorder = Recorder(initial=2)
    start(from_iterable(range(10)), recorder)
    recorder.cancel()
    recorder.cancel()
    recorder.request(5)
    recorder.request(-1)
    assert recorder.values == [0, 1] and recorder.errors == [] and recorder.completed == 0


def test_cancel_inside_on_next_stops_the_unbounded_loop() -> None:
    class StopAtThree(Recorder):
        def on_next(self, value: Any) -> None:
            super().on_next(value)
            if value == 3:
                self.cancel()

    recorder = StopAtThree(initial=LONG_MAX)

    def endless() -> Iterator[int]:
        n = 0
        while True:
            yield n
            n += 1

    start(from_iterable(endless()), recorder)
    assert recorder.values == [0, 1, 2, 3]


def test_subscribe_none_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"1\.9"):
        from_iterable([1]).subscribe(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"1\.9"):
        as_publisher(from_iterable([1])).subscribe(None)  # type: ignore[arg-type]


def test_iterator_failure_becomes_on_error() -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise KeyError("boom")

    recorder = Recorder(initial=10)
    start(from_iterable(failing()), recorder)
    assert recorder.values == [1] and isinstance(recorder.errors[0], KeyError)


def test_none_element_becomes_type_error() -> None:
    recorder = Recorder(initial=10)
    start(from_iterable([1, None, 3]), recorder)
    assert recorder.values == [1] and isinstance(recorder.errors[0], TypeError)


def test_requests_inside_on_subscribe_are_honoured_after_on_subscribe_returns() -> None:
    order: list[str] = []

    class Eager(Recorder):
        def on_subscribe(self, subscription: Any) -> None:
            super().on_subscribe(subscription)
            subscription.request(2)
            order.append("on_subscribe returned")

        def on_next(self, value: Any) -> None:
            order.append(f"on_next {value}")
            super().on_next(value)

    start(from_iterable([1, 2, 3]), Eager())
    assert order == ["on_subscribe returned", "on_next 1", "on_next 2"], "rule 1.3: signals never overlap"


def test_a_subscriber_that_raises_disposes_the_source_and_the_error_propagates() -> None:
    class Raising(Recorder):
        def on_next(self, value: Any) -> None:
            raise RuntimeError("subscriber bug")

    with pytest.raises(RuntimeError, match="subscriber bug"):
        start(from_iterable([1, 2]), Raising(initial=5))


def test_from_iterable_recovered_with_nothing_asked_serves_the_next_request_one_tick_later() -> None:
    # 0 went out at 211 and the source looked ahead; at 212 the subscriber asks again, served at 213, also
    # after a restart at 211 (a recovered source must not start a drain the original did not have pending).
    report = assert_checkpoint_anywhere(
        lambda: from_iterable(range(3)), demand=Demand(requests=((210, 1), (212, 1))), ticks=[211]
    )
    assert report.expected == (on_next(211, 0), on_next(213, 1))


def test_an_empty_iterable_recovered_before_its_first_drain_still_completes_without_demand() -> None:
    report = assert_checkpoint_anywhere(lambda: from_iterable([]), demand=Demand(), ticks=[200])
    assert report.expected == (on_completed(201),)


def test_from_iterable_state_of_version_1_loads() -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(200)
    observer = scheduler.create_observer(request=0)
    handle = initialize(from_iterable(range(3)).subscribe(observer), scheduler.create_context())
    observer.request(1)
    scheduler.advance_to(202)
    assert observer.values == [0]
    blob = save_as_version_1(FromIterable, 1, handle)  # version 1 saved the position only
    handle.dispose()

    recovered = scheduler.create_observer(request=0)
    handle = initialize(from_iterable(range(3)).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.schedule_absolute(205, recovered.request, 5)
    scheduler.advance_to(210)
    assert recovered.messages == [on_next(206, 1), on_next(206, 2), on_completed(206)]
