"""aggregate: folding with and without a seed, the result selector, errors, checkpoints."""

from __future__ import annotations

import functools
import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def test_aggregate_without_seed_emits_the_fold_at_completion_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.aggregate(lambda acc, x: acc * x))
    assert result.messages == [on_next(300, 24), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_aggregate_without_seed_of_one_element_is_that_element_without_calling_the_accumulator() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 7), on_completed(250))
    result = scheduler.start(lambda: xs.aggregate(lambda acc, x: 1 / 0))
    assert result.messages == [on_next(250, 7), on_completed(250)]


def test_aggregate_without_seed_of_an_empty_source_is_a_value_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    result = scheduler.start(lambda: xs.aggregate(operator.add))
    assert result.messages == [on_error(250, ValueError("aggregate: the source completed without any element"))]


def test_aggregate_with_seed_starts_from_the_seed() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.aggregate(lambda acc, x: (*acc, x), ()))
    assert result.messages == [on_next(300, (2, 3, 4)), on_completed(300)]


def test_aggregate_with_seed_of_an_empty_source_is_the_seed_through_the_selector() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    result = scheduler.start(lambda: xs.aggregate(operator.add, 10, lambda acc: acc * 2))
    assert result.messages == [on_next(250, 20), on_completed(250)]


def test_aggregate_result_selector_without_seed() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.aggregate(operator.add, result_selector=lambda s: f"sum={s}"))
    assert result.messages == [on_next(300, "sum=9"), on_completed(300)]


def test_accumulator_exception_is_an_error_at_the_same_tick_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def accumulate(acc: int, x: int) -> int:
        if x == 3:
            raise boom
        return acc + x

    result = scheduler.start(lambda: xs.aggregate(accumulate, 0))
    assert result.messages == [on_error(230, boom)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_result_selector_exception_is_an_error_at_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.aggregate(operator.add, 0, lambda acc: acc / 0))
    assert result.messages == [on_error(300, ZeroDivisionError)]


def test_a_none_result_is_a_type_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.aggregate(operator.add, 0, lambda acc: None))
    assert result.messages == [on_error(300, lambda e: isinstance(e, TypeError) and "None" in str(e))]


def test_a_none_accumulation_in_between_is_fine() -> None:
    recorder = Recorder(initial=1)
    from_iterable([1, 2, 3]).aggregate(lambda acc, x: None if x < 3 else x, 0).run(recorder)
    assert recorder.values == [3]


def test_source_error_passes_through() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    result = scheduler.start(lambda: xs.aggregate(operator.add, 0))
    assert result.messages == [on_error(220, failure)]


def test_disposal_before_completion_emits_nothing() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.aggregate(operator.add), disposed=250)
    assert result.messages == []
    assert xs.subscriptions == [subscribe(200, 250)]


@pytest.mark.parametrize(
    "create",
    [
        lambda xs: xs.aggregate(operator.add),
        lambda xs: xs.aggregate(lambda acc, x: acc * 10 + x, 5),
        lambda xs: xs.aggregate(lambda acc, x: [*acc, x], [], tuple),
    ],
    ids=["no seed", "seed", "seed and selector"],
)
def test_aggregate_survives_a_checkpoint_anywhere(create: object) -> None:
    assert_checkpoint_anywhere(create, HOT)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(-50, 50), max_size=20), seed=st.integers(-5, 5))
def test_aggregate_equals_functools_reduce(values: list[int], seed: int) -> None:
    recorder = Recorder(initial=1)
    from_iterable(values).aggregate(lambda acc, x: acc * 3 - x, seed).run(recorder)
    assert recorder.values == [functools.reduce(lambda acc, x: acc * 3 - x, values, seed)]
    recorder = Recorder(initial=1)
    from_iterable(values).aggregate(operator.sub).run(recorder)
    if values:
        assert recorder.values == [functools.reduce(operator.sub, values)]
    else:
        assert isinstance(recorder.errors[0], ValueError)


def test_arguments_are_validated_when_the_query_is_built() -> None:
    xs = from_iterable([1])
    with pytest.raises(TypeError, match="aggregate: accumulator must be callable"):
        xs.aggregate(42)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="aggregate: result_selector must be callable"):
        xs.aggregate(operator.add, 0, 42)  # type: ignore[call-overload]


def test_an_explicit_none_seed_is_a_seed() -> None:
    recorder = Recorder(initial=1)
    from_iterable([1, 2]).aggregate(lambda acc, x: x if acc is None else acc + x, None).run(recorder)
    assert recorder.values == [3]
