"""count: all elements, or those satisfying a predicate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def test_count_emits_the_number_of_elements_at_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.count)
    assert result.messages == [on_next(300, 3), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_count_with_a_predicate_counts_the_matching_ones() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.count(lambda x: x % 2 == 0))
    assert result.messages == [on_next(300, 2), on_completed(300)]


def test_count_of_an_empty_source_is_zero() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    result = scheduler.start(xs.count)
    assert result.messages == [on_next(250, 0), on_completed(250)]


def test_predicate_exception_is_an_error_at_the_same_tick_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.count(lambda x: 1 / (x - 3)))
    assert result.messages == [on_error(230, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_source_error_passes_through_and_disposal_stops_everything() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    assert scheduler.start(xs.count).messages == [on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    assert scheduler.start(ys.count, disposed=240).messages == []
    assert ys.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize("predicate", [None, lambda x: x > 2], ids=["all", "predicate"])
def test_count_survives_a_checkpoint_anywhere(predicate: object) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.count(predicate), HOT)  # type: ignore[arg-type]


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(0, 9), max_size=40))
def test_count_matches_len(values: list[int]) -> None:
    recorder = Recorder(initial=1)
    from_iterable(values).count(lambda x: x > 4).run(recorder)
    assert recorder.values == [len([v for v in values if v > 4])]


def test_arguments_are_validated_when_the_query_is_built() -> None:
    with pytest.raises(TypeError, match="count: predicate must be callable"):
        from_iterable([1]).count(3)  # type: ignore[arg-type]
