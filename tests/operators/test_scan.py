"""scan: with and without a seed (Rx semantics), user-function errors, demand, checkpoints."""

from __future__ import annotations

import operator
from itertools import accumulate
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def test_scan_without_seed_emits_the_first_element_then_each_accumulation() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.scan(operator.add))
    assert result.messages == [on_next(210, 2), on_next(230, 5), on_next(260, 9), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


@pytest.mark.parametrize(
    "build",
    [lambda xs: xs.scan(10, operator.add), lambda xs: xs.scan(operator.add, seed=10)],
    ids=["scan(seed, accumulator)", "scan(accumulator, seed=)"],
)
def test_scan_with_seed_emits_each_accumulation_but_not_the_seed(build: Any) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: build(xs))
    assert result.messages == [on_next(210, 12), on_next(230, 15), on_next(260, 19), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_scan_with_seed_of_another_type() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.scan((), lambda acc, x: (*acc, x)))
    assert result.values == [(2,), (2, 3), (2, 3, 4)]


def test_scan_on_an_empty_source_completes_without_emitting() -> None:
    for build in (lambda xs: xs.scan(operator.add), lambda xs: xs.scan(0, operator.add)):
        scheduler = TestScheduler()
        xs = scheduler.create_hot_observable(on_completed(250))
        assert scheduler.start(lambda b=build, s=xs: b(s)).messages == [on_completed(250)]


@pytest.mark.parametrize("seeded", [False, True])
def test_scan_accumulator_exception_is_an_error_at_the_same_tick_then_unsubscribes(seeded: bool) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def accumulator(acc: int, x: int) -> int:
        if x == 3:
            raise boom
        return acc + x

    result = scheduler.start(lambda: xs.scan(0, accumulator) if seeded else xs.scan(accumulator))
    assert result.messages == [on_next(210, 2), on_error(230, boom)]
    assert xs.subscriptions == [subscribe(200, 230)]


@pytest.mark.parametrize("seeded", [False, True])
def test_scan_accumulator_returning_none_is_a_type_error(seeded: bool) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.scan(0, lambda a, x: None) if seeded else xs.scan(lambda a, x: None))
    assert result.messages[-1] == on_error(230 if not seeded else 210, TypeError)
    assert xs.subscriptions == [subscribe(200, 230 if not seeded else 210)]


def test_scan_source_error_passes_through() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    result = scheduler.start(lambda: xs.scan(operator.add))
    assert result.messages == [on_next(210, 1), on_error(220, failure)]


def test_scan_disposed_early_unsubscribes_at_dispose_time() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.scan(operator.add), disposed=240)
    assert result.messages == [on_next(210, 2), on_next(230, 5)]
    assert xs.subscriptions == [subscribe(200, 240)]


def test_scan_without_seed_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.scan(operator.add), HOT)


def test_scan_with_seed_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.scan(100, operator.mul), HOT)


def test_scan_with_one_at_a_time_demand_requests_only_what_is_requested() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    for tick in (205, 250, 280):
        scheduler.schedule_absolute(tick, observer.request, 1)
    result = scheduler.start(lambda: xs.scan(operator.add), observer=observer)
    # The hot source holds what was not requested; scan holds nothing and asks for exactly what was asked.
    assert result.messages == [on_next(210, 2), on_next(250, 5), on_next(280, 9), on_completed(300)]
    assert xs.requests == [Recorded(205, 1), Recorded(250, 1), Recorded(280, 1)]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-50, 50), max_size=30),
    seed=st.none() | st.integers(-5, 5),
    batch=st.integers(1, 4),
)
def test_scan_matches_itertools_accumulate(values: list[int], seed: int | None, batch: int) -> None:
    recorder = Recorder(initial=batch, per_item=1)
    query = from_iterable(values)
    (query.scan(operator.add) if seed is None else query.scan(seed, operator.add)).run(recorder)
    expected = list(accumulate(values)) if seed is None else list(accumulate(values, initial=seed))[1:]
    assert recorder.values == expected and recorder.completed == 1 and not recorder.violations


def test_scan_argument_validation() -> None:
    source = from_iterable([1])
    with pytest.raises(TypeError, match=r"scan: accumulator must be callable.*seed comes first"):
        source.scan(operator.add, 0)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="scan: accumulator must be callable"):
        source.scan(5)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="scan: takes"):
        source.scan()  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="give the seed once"):
        source.scan(0, operator.add, seed=1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must not be None"):
        source.scan(None, operator.add)


def test_scan_demand_summing_to_long_max_passes_through() -> None:
    recorder = Recorder()
    from_iterable(range(5)).scan(operator.add).run(recorder)
    recorder.request(LONG_MAX)
    assert recorder.values == [0, 1, 3, 6, 10] and recorder.completed == 1
