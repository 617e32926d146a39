"""any, all, contains, is_empty: answered by the deciding element, at once, and the source is cancelled."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def run(create: Any, script: list[Any] = HOT) -> tuple[list[Any], list[Any]]:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script)
    result = scheduler.start(lambda: create(xs))
    return result.messages, xs.subscriptions


@pytest.mark.parametrize(
    ("create", "answer", "at"),
    [
        (lambda xs: xs.any(), True, 210),
        (lambda xs: xs.any(lambda x: x > 2), True, 230),
        (lambda xs: xs.any(lambda x: x > 9), False, 300),
        (lambda xs: xs.all(lambda x: x < 4), False, 260),
        (lambda xs: xs.all(lambda x: x > 1), True, 300),
        (lambda xs: xs.contains(3), True, 230),
        (lambda xs: xs.contains(9), False, 300),
        (lambda xs: xs.is_empty(), False, 210),
    ],
    ids=["any", "any pred", "any none", "all false", "all true", "contains", "contains not", "is_empty"],
)
def test_the_answer_comes_at_the_deciding_element_and_the_source_is_cancelled(
    create: Any, answer: bool, at: int
) -> None:
    messages, subscriptions = run(create)
    assert messages == [on_next(at, answer), on_completed(at)]
    assert subscriptions == [subscribe(200, at)]


@pytest.mark.parametrize(
    ("create", "answer"),
    [
        (lambda xs: xs.any(), False),
        (lambda xs: xs.all(lambda x: False), True),
        (lambda xs: xs.contains(1), False),
        (lambda xs: xs.is_empty(), True),
    ],
    ids=["any", "all", "contains", "is_empty"],
)
def test_over_an_empty_source(create: Any, answer: bool) -> None:
    messages, _ = run(create, [on_completed(250)])
    assert messages == [on_next(250, answer), on_completed(250)]


@pytest.mark.parametrize(
    "create",
    [lambda xs: xs.any(lambda x: 1 / (x - 3) > 5), lambda xs: xs.all(lambda x: 1 / (x - 3))],
    ids=["any", "all"],
)
def test_predicate_exception_is_an_error_at_the_same_tick_and_unsubscribes(create: Any) -> None:
    messages, subscriptions = run(create)
    assert messages == [on_error(230, ZeroDivisionError)]
    assert subscriptions == [subscribe(200, 230)]


def test_contains_with_an_eq_that_raises_is_an_error() -> None:
    class Touchy:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("do not compare me")

        __hash__ = object.__hash__

    messages, _ = run(lambda xs: xs.contains(Touchy()))
    assert messages == [on_error(210, RuntimeError)]


def test_source_error_passes_through_and_disposal_stops_everything() -> None:
    failure = KeyError("upstream")
    messages, _ = run(lambda xs: xs.all(lambda x: True), [on_next(210, 1), on_error(220, failure)])
    assert messages == [on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    assert scheduler.start(lambda: ys.any(lambda x: x > 9), disposed=240).messages == []
    assert ys.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize(
    "create",
    [
        lambda xs: xs.any(lambda x: x > 3),
        lambda xs: xs.all(lambda x: x < 4),
        lambda xs: xs.contains(4),
        lambda xs: xs.is_empty(),
        lambda xs: xs.any(lambda x: x > 9),
    ],
    ids=["any", "all", "contains", "is_empty", "any at completion"],
)
def test_survives_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, HOT)


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(0, 9), max_size=20), x=st.integers(0, 9))
def test_match_python(values: list[int], x: int) -> None:
    def answer(query: Any) -> Any:
        recorder = Recorder(initial=1)
        query.run(recorder)
        return recorder.values[0]

    xs = from_iterable(values)
    assert answer(xs.any(lambda v: v > x)) == any(v > x for v in values)
    assert answer(xs.all(lambda v: v > x)) == all(v > x for v in values)
    assert answer(xs.contains(x)) == (x in values)
    assert answer(xs.is_empty()) == (not values)


def test_arguments_are_validated_when_the_query_is_built() -> None:
    xs = from_iterable([1])
    with pytest.raises(TypeError, match="any: predicate must be callable"):
        xs.any(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="all: predicate must be callable"):
        xs.all(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="contains: value must not be None"):
        xs.contains(None)
