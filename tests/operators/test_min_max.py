"""min and max: as Python's min/max (first of equals wins), with a key, errors, checkpoints."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 9), on_next(210, 3), on_next(230, 1), on_next(240, 5), on_next(260, 1), on_completed(300)]
WORDS = [on_next(210, "bb"), on_next(220, "a"), on_next(230, "cc"), on_next(240, "d"), on_completed(300)]


def result_of(query: Any) -> list[Any]:
    recorder = Recorder(initial=1)
    query.run(recorder)
    return recorder.values or recorder.errors


def test_min_and_max_emit_at_completion_and_unsubscribe() -> None:
    for op, expected in (("min", 1), ("max", 5)):
        scheduler = TestScheduler()
        xs = scheduler.create_hot_observable(*HOT)
        result = scheduler.start(getattr(xs, op))
        assert result.messages == [on_next(300, expected), on_completed(300)]
        assert xs.subscriptions == [subscribe(200, 300)]


def test_with_a_key_the_element_is_emitted_and_the_first_of_equals_wins() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*WORDS)
    assert scheduler.start(lambda: xs.min(key=len)).messages == [on_next(300, "a"), on_completed(300)]
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*WORDS)
    assert scheduler.start(lambda: xs.max(key=len)).messages == [on_next(300, "bb"), on_completed(300)]


def test_a_comparer_becomes_a_key_with_cmp_to_key() -> None:
    def by_length(a: str, b: str) -> int:
        return len(a) - len(b)

    assert result_of(from_iterable(["ccc", "a", "bb"]).min(key=functools.cmp_to_key(by_length))) == ["a"]


def test_an_empty_source_is_a_value_error() -> None:
    for op in ("min", "max"):
        scheduler = TestScheduler()
        xs = scheduler.create_hot_observable(on_completed(250))
        result = scheduler.start(getattr(xs, op))
        assert result.messages == [on_error(250, ValueError(f"{op}: the source completed without any element"))]


def test_key_exception_is_an_error_at_the_same_tick_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.max(key=lambda x: 1 / (x - 5)))
    assert result.messages == [on_error(240, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 240)]


def test_elements_that_do_not_compare_are_an_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, "a"), on_completed(300))
    assert scheduler.start(xs.min).messages == [on_error(220, TypeError)]


def test_source_error_passes_through_and_disposal_stops_everything() -> None:
    failure = KeyError("upstream")
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    assert scheduler.start(xs.max).messages == [on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    assert scheduler.start(ys.min, disposed=240).messages == []
    assert ys.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize(
    ("create", "script"),
    [
        (lambda xs: xs.min(), HOT),
        (lambda xs: xs.max(), HOT),
        (lambda xs: xs.min(key=len), WORDS),
        (lambda xs: xs.max(key=len), WORDS),
    ],
    ids=["min", "max", "min key", "max key"],
)
def test_min_and_max_survive_a_checkpoint_anywhere(create: Any, script: list[Any]) -> None:
    assert_checkpoint_anywhere(create, script)


def test_the_key_of_the_best_is_recomputed_once_after_a_restart() -> None:
    calls: list[str] = []

    def key(word: str) -> int:
        calls.append(word)
        return len(word)

    assert_checkpoint_anywhere(lambda xs: xs.min(key=key), WORDS, ticks=[225], chained=False)
    # the uninterrupted run: one call per element; the restarted run: "a" once more, after the restart
    assert calls.count("a") == 3 and calls.count("cc") == 2


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.tuples(st.integers(0, 5), st.integers()), min_size=1, max_size=25))
def test_min_and_max_match_python(values: list[tuple[int, int]]) -> None:
    assert result_of(from_iterable(values).min()) == [min(values)]
    assert result_of(from_iterable(values).max()) == [max(values)]
    assert result_of(from_iterable(values).min(key=lambda v: v[0])) == [min(values, key=lambda v: v[0])]
    assert result_of(from_iterable(values).max(key=lambda v: v[0])) == [max(values, key=lambda v: v[0])]


def test_arguments_are_validated_when_the_query_is_built() -> None:
    with pytest.raises(TypeError, match="min: key must be callable"):
        from_iterable([1]).min(key=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max: key must be callable"):
        from_iterable([1]).max(key=3)  # type: ignore[arg-type]
