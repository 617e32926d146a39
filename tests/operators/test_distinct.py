"""distinct: keys (a set), comparers (a list, O(n)), the MAX_DISTINCT_ELEMENTS limit, demand, checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.core.errors import LimitExceededError
from reaqtive.operators.settings import MAX_DISTINCT_ELEMENTS
from reaqtive.testing import OnError, Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [
    on_next(150, 1),
    on_next(210, 2),
    on_next(220, 3),
    on_next(230, 2),
    on_next(240, -3),
    on_next(250, 4),
    on_next(260, 3),
    on_completed(300),
]


def _same_abs(a: int, b: int) -> bool:
    return abs(a) == abs(b)


VARIANTS = {
    "plain": lambda xs: xs.distinct(),
    "key": lambda xs: xs.distinct(abs),
    "comparer": lambda xs: xs.distinct(comparer=_same_abs),
    "key+comparer": lambda xs: xs.distinct(lambda x: -x, comparer=_same_abs),
}


def test_distinct_drops_elements_seen_before() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.distinct)
    assert result.messages == [on_next(210, 2), on_next(220, 3), on_next(240, -3), on_next(250, 4), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


@pytest.mark.parametrize("variant", ["key", "comparer", "key+comparer"])
def test_distinct_by_key_or_comparer(variant: str) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: VARIANTS[variant](xs))
    assert result.messages == [on_next(210, 2), on_next(220, 3), on_next(250, 4), on_completed(300)]


def test_distinct_key_selector_exception_at_the_same_tick_then_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.distinct(lambda x: 1 / (x - 3)))
    assert result.messages == [on_next(210, 2), on_error(220, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_distinct_comparer_exception_at_the_same_tick_then_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def comparer(a: int, b: int) -> bool:
        if b == 3:
            raise boom
        return a == b

    result = scheduler.start(lambda: xs.distinct(comparer=comparer))
    assert result.messages == [on_next(210, 2), on_error(220, boom)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_distinct_unhashable_key_is_an_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    result = scheduler.start(lambda: xs.distinct(lambda x: [x]))
    assert result.messages == [on_error(210, TypeError)]
    assert xs.subscriptions == [subscribe(200, 210)]


def test_distinct_unhashable_keys_work_with_a_comparer() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 1), on_next(230, 2))
    result = scheduler.start(lambda: xs.distinct(lambda x: [x], comparer=lambda a, b: a == b))
    assert result.values == [1, 2]


def test_distinct_source_error_and_disposal() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    assert scheduler.start(xs.distinct).messages == [on_next(210, 1), on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(ys.distinct, disposed=235)
    assert result.values == [2, 3]
    assert ys.subscriptions == [subscribe(200, 235)]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_distinct_limit_is_an_error_at_the_overflowing_element(variant: str) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context(settings={MAX_DISTINCT_ELEMENTS: 2})
    result = scheduler.start(lambda: VARIANTS[variant](xs), context=context)
    overflow = 240 if variant == "plain" else 250  # the third distinct key
    assert result.messages == [on_next(210, 2), on_next(220, 3), on_error(overflow, LimitExceededError)]
    notification = result.messages[-1].value
    assert isinstance(notification, OnError)
    error = notification.error
    assert isinstance(error, LimitExceededError) and error.limit == 2 and error.setting == MAX_DISTINCT_ELEMENTS
    assert xs.subscriptions == [subscribe(200, overflow)]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_distinct_survives_a_checkpoint_anywhere(variant: str) -> None:
    assert_checkpoint_anywhere(VARIANTS[variant], HOT)


def test_distinct_with_a_limit_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.distinct(), HOT, settings={MAX_DISTINCT_ELEMENTS: 3})


def test_distinct_with_one_at_a_time_demand_replaces_dropped_elements() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    for tick in (205, 225, 235):
        scheduler.schedule_absolute(tick, observer.request, 1)
    result = scheduler.start(lambda: xs.distinct(abs), observer=observer)
    assert result.messages == [on_next(210, 2), on_next(225, 3), on_next(250, 4)]
    # 235: the held 2 is dropped and replaced (235), then -3 arrives at 240, is dropped and replaced (240).
    assert xs.requests == [Recorded(205, 1), Recorded(225, 1), Recorded(235, 1), Recorded(235, 1), Recorded(240, 1)]


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.integers(-6, 6), max_size=30),
    requests=st.lists(st.integers(1, 4), min_size=1, max_size=8),
    use_comparer=st.booleans(),
)
def test_distinct_standalone_never_delivers_more_than_requested(
    values: list[int], requests: list[int], use_comparer: bool
) -> None:
    recorder = Recorder()
    source = from_iterable(values)
    query: Any = source.distinct(comparer=_same_abs) if use_comparer else source.distinct(abs)
    query.run(recorder)
    expected: list[int] = []
    seen: set[int] = set()
    for value in values:
        if abs(value) not in seen:
            seen.add(abs(value))
            expected.append(value)
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[: min(requested, len(expected))]
    assert not recorder.violations


def test_distinct_argument_validation() -> None:
    source = from_iterable([1])
    with pytest.raises(TypeError, match="distinct: key_selector must be callable"):
        source.distinct(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="distinct: comparer must be callable"):
        source.distinct(comparer=1)  # type: ignore[arg-type]
