"""first, last, single (+ predicate, + _or_default): values, timing, empty sources, errors, checkpoints."""

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
EMPTY = [on_completed(250)]


def run(create: Any, script: list[Any] = HOT) -> tuple[list[Any], list[Any]]:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script)
    result = scheduler.start(lambda: create(xs))
    return result.messages, xs.subscriptions


@pytest.mark.parametrize(
    ("create", "value", "at"),
    [
        (lambda xs: xs.first(), 2, 210),
        (lambda xs: xs.first(lambda x: x > 2), 3, 230),
        (lambda xs: xs.first_or_default(0), 2, 210),
        (lambda xs: xs.first_or_default(0, lambda x: x > 9), 0, 300),
        (lambda xs: xs.last(), 4, 300),
        (lambda xs: xs.last(lambda x: x < 4), 3, 300),
        (lambda xs: xs.last_or_default(0, lambda x: x > 9), 0, 300),
        (lambda xs: xs.single(lambda x: x == 3), 3, 300),
        (lambda xs: xs.single_or_default(0, lambda x: x > 9), 0, 300),
        (lambda xs: xs.single_or_default(0, lambda x: x == 4), 4, 300),
    ],
    ids=[
        "first",
        "first pred",
        "first_or_default found",
        "first_or_default default",
        "last",
        "last pred",
        "last_or_default",
        "single pred",
        "single_or_default default",
        "single_or_default found",
    ],
)
def test_values_and_timing(create: Any, value: int, at: int) -> None:
    messages, subscriptions = run(create)
    assert messages == [on_next(at, value), on_completed(at)]
    assert subscriptions == [subscribe(200, at)]


@pytest.mark.parametrize(
    ("create", "script", "message"),
    [
        (lambda xs: xs.first(), EMPTY, "first: the source completed without any element"),
        (lambda xs: xs.last(), EMPTY, "last: the source completed without any element"),
        (lambda xs: xs.single(), EMPTY, "single: the source completed without any element"),
        (
            lambda xs: xs.first(lambda x: x > 9),
            HOT,
            "first: the source completed without any element satisfying the predicate",
        ),
    ],
    ids=["first", "last", "single", "first pred"],
)
def test_nothing_found_is_a_value_error(create: Any, script: list[Any], message: str) -> None:
    messages, _ = run(create, script)
    assert messages == [on_error(script[-1].time, ValueError(message))]


@pytest.mark.parametrize("op", ["first_or_default", "last_or_default", "single_or_default"])
def test_or_default_over_an_empty_source_is_the_default(op: str) -> None:
    messages, _ = run(lambda xs: getattr(xs, op)("none"), EMPTY)
    assert messages == [on_next(250, "none"), on_completed(250)]


@pytest.mark.parametrize("op", ["single", "single_or_default"])
def test_single_with_a_second_element_is_an_error_at_once(op: str) -> None:
    args = ("x",) if op == "single_or_default" else ()
    messages, subscriptions = run(lambda xs: getattr(xs, op)(*args))
    assert messages == [on_error(230, ValueError(f"{op}: the source has more than one element"))]
    assert subscriptions == [subscribe(200, 230)]


def test_single_with_a_predicate_counts_only_matching_elements() -> None:
    messages, _ = run(lambda xs: xs.single(lambda x: x > 2))
    error = ValueError("single: the source has more than one element satisfying the predicate")
    assert messages == [on_error(260, error)]


@pytest.mark.parametrize("op", ["first", "last", "single"])
def test_predicate_exception_is_an_error_at_the_same_tick_and_unsubscribes(op: str) -> None:
    messages, subscriptions = run(lambda xs: getattr(xs, op)(lambda x: 1 / (x - 3) > 5))
    assert messages == [on_error(230, ZeroDivisionError)]
    assert subscriptions == [subscribe(200, 230)]


def test_source_error_passes_through_and_disposal_stops_everything() -> None:
    failure = KeyError("upstream")
    messages, _ = run(lambda xs: xs.last(), [on_next(210, 1), on_error(220, failure)])
    assert messages == [on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    assert scheduler.start(lambda: ys.single(lambda x: x > 9), disposed=240).messages == []
    assert ys.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize(
    "create",
    [
        lambda xs: xs.first(lambda x: x > 2),
        lambda xs: xs.first_or_default(0, lambda x: x > 9),
        lambda xs: xs.last(),
        lambda xs: xs.last_or_default(0, lambda x: x < 4),
        lambda xs: xs.single(lambda x: x == 3),
        lambda xs: xs.single_or_default(0, lambda x: x > 9),
        lambda xs: xs.single(),
    ],
    ids=["first", "first_or_default", "last", "last_or_default", "single", "single_or_default", "single error"],
)
def test_survives_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, HOT)


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(0, 9), max_size=12), x=st.integers(0, 9))
def test_match_python(values: list[int], x: int) -> None:
    def outcome(query: Any) -> Any:
        recorder = Recorder(initial=1)
        query.run(recorder)
        return recorder.values[0] if recorder.values else type(recorder.errors[0])

    xs = from_iterable(values)
    matching = [v for v in values if v > x]
    assert outcome(xs.first(lambda v: v > x)) == (matching[0] if matching else ValueError)
    assert outcome(xs.last(lambda v: v > x)) == (matching[-1] if matching else ValueError)
    assert outcome(xs.first_or_default(-1, lambda v: v > x)) == next(iter(matching), -1)
    assert outcome(xs.last_or_default(-1, lambda v: v > x)) == (matching[-1] if matching else -1)
    single = matching[0] if len(matching) == 1 else ValueError
    assert outcome(xs.single(lambda v: v > x)) == single
    assert outcome(xs.single_or_default(-1, lambda v: v > x)) == (-1 if not matching else single)


@pytest.mark.parametrize("op", ["first", "last", "single"])
def test_arguments_are_validated_when_the_query_is_built(op: str) -> None:
    xs = from_iterable([1])
    with pytest.raises(TypeError, match=f"{op}: predicate must be callable"):
        getattr(xs, op)(5)
    with pytest.raises(TypeError, match=f"{op}_or_default: default must not be None"):
        getattr(xs, f"{op}_or_default")(None)
    with pytest.raises(TypeError, match=f"{op}_or_default: predicate must be callable"):
        getattr(xs, f"{op}_or_default")(0, 5)
