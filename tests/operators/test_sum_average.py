"""sum and average: ints, floats, Decimal, Fraction, timedelta; empty sources; checkpoints of exact numbers."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def result_of(query: Any) -> list[Any]:
    recorder = Recorder(initial=1)
    query.run(recorder)
    return recorder.values or recorder.errors


def test_sum_emits_the_total_at_completion_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.sum)
    assert result.messages == [on_next(300, 9), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_sum_of_an_empty_source_is_zero_or_the_start() -> None:
    assert result_of(from_iterable([]).sum()) == [0]
    assert result_of(from_iterable([]).sum(timedelta(0))) == [timedelta(0)]


def test_sum_keeps_the_type_of_exact_numbers() -> None:
    assert result_of(from_iterable([Decimal("0.1")] * 3).sum()) == [Decimal("0.3")]
    assert result_of(from_iterable([Fraction(1, 3)] * 3).sum()) == [Fraction(1)]
    assert result_of(from_iterable([2**64, 2**64]).sum()) == [2**65]
    assert result_of(from_iterable([timedelta(seconds=2)] * 2).sum(timedelta(0))) == [timedelta(seconds=4)]


def test_sum_of_something_that_does_not_add_is_an_error_at_that_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, "x"), on_completed(300))
    result = scheduler.start(xs.sum)
    assert result.messages == [on_error(220, TypeError)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_average_is_the_mean_with_true_division() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.average)
    assert result.messages == [on_next(300, 3.0), on_completed(300)]
    assert result_of(from_iterable([1, 2]).average()) == [1.5]
    assert result_of(from_iterable([Decimal("1"), Decimal("2")]).average()) == [Decimal("1.5")]
    assert result_of(from_iterable([Fraction(1), Fraction(2)]).average()) == [Fraction(3, 2)]
    assert result_of(from_iterable([timedelta(seconds=1), timedelta(seconds=2)]).average()) == [timedelta(seconds=1.5)]


def test_average_of_an_empty_source_is_a_value_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    result = scheduler.start(xs.average)
    assert result.messages == [on_error(250, ValueError("average: the source completed without any element"))]


def test_average_of_something_that_does_not_add_is_an_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, "x"), on_completed(300))
    assert scheduler.start(xs.average).messages == [on_error(220, TypeError)]


def test_source_errors_pass_through_and_disposal_stops_everything() -> None:
    failure = KeyError("upstream")
    for op in ("sum", "average"):
        scheduler = TestScheduler()
        xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
        assert scheduler.start(getattr(xs, op)).messages == [on_error(220, failure)]
        scheduler = TestScheduler()
        ys = scheduler.create_hot_observable(*HOT)
        assert scheduler.start(getattr(ys, op), disposed=240).messages == []
        assert ys.subscriptions == [subscribe(200, 240)]


EXACT = [on_next(210, Decimal("0.1")), on_next(220, Decimal("0.2")), on_next(230, Decimal("0.4")), on_completed(300)]
FRACTIONS = [on_next(210, Fraction(1, 3)), on_next(220, Fraction(1, 6)), on_completed(300)]


@pytest.mark.parametrize("script", [HOT, EXACT, FRACTIONS], ids=["int", "Decimal", "Fraction"])
@pytest.mark.parametrize("op", ["sum", "average"])
def test_sum_and_average_survive_a_checkpoint_anywhere(op: str, script: list[Any]) -> None:
    """Decimal and Fraction totals are state values too (registered by the library)."""
    assert_checkpoint_anywhere(lambda xs: getattr(xs, op)(), script)


def test_sum_with_a_float_start_checkpoints() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.sum(0.5), HOT)


def test_a_total_beyond_64_bits_checkpoints_exactly() -> None:
    script = [on_next(210, 2**70), on_next(220, -(2**80)), on_next(230, 1), on_completed(300)]
    report = assert_checkpoint_anywhere(lambda xs: xs.sum(), script)
    assert report.expected[0] == on_next(300, 2**70 - 2**80 + 1)


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(-(2**70), 2**70), max_size=30))
def test_sum_and_average_match_python(values: list[int]) -> None:
    assert result_of(from_iterable(values).sum()) == [sum(values)]
    if values:
        [mean] = result_of(from_iterable(values).average())
        # Exact: the int sum divided once (statistics.fmean goes through floats and loses digits when large
        # values cancel, e.g. [2**70, 1 - 2**70], so it is no oracle here).
        assert mean == sum(values) / len(values)


def test_arguments_are_validated_when_the_query_is_built() -> None:
    with pytest.raises(TypeError, match="sum: start must not be None"):
        from_iterable([1]).sum(None)
