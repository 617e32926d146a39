"""element_at and element_at_or_default."""

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


@pytest.mark.parametrize(("index", "value", "at"), [(0, 2, 210), (1, 3, 230), (2, 4, 260)])
def test_element_at_emits_at_once_and_cancels_the_source(index: int, value: int, at: int) -> None:
    for create in (lambda xs: xs.element_at(index), lambda xs: xs.element_at_or_default(index, 0)):
        messages, subscriptions = run(create)
        assert messages == [on_next(at, value), on_completed(at)]
        assert subscriptions == [subscribe(200, at)]


def test_past_the_end_is_an_index_error_or_the_default() -> None:
    messages, _ = run(lambda xs: xs.element_at(3))
    assert messages == [
        on_error(300, IndexError("element_at: index 3 is out of range: the source completed after 3 elements"))
    ]
    messages, _ = run(lambda xs: xs.element_at(0), [on_completed(250)])
    assert messages == [on_error(250, IndexError)]
    messages, _ = run(lambda xs: xs.element_at_or_default(3, -1))
    assert messages == [on_next(300, -1), on_completed(300)]


def test_source_error_passes_through_and_disposal_stops_everything() -> None:
    failure = KeyError("upstream")
    messages, _ = run(lambda xs: xs.element_at(5), [on_next(210, 1), on_error(220, failure)])
    assert messages == [on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    assert scheduler.start(lambda: ys.element_at(2), disposed=240).messages == []
    assert ys.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize(
    "create",
    [lambda xs: xs.element_at(2), lambda xs: xs.element_at(7), lambda xs: xs.element_at_or_default(7, 0)],
    ids=["found", "index error", "default"],
)
def test_survives_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, HOT)


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(), max_size=10), index=st.integers(0, 12))
def test_matches_indexing(values: list[int], index: int) -> None:
    recorder = Recorder(initial=1)
    from_iterable(values).element_at(index).run(recorder)
    if index < len(values):
        assert recorder.values == [values[index]]
    else:
        assert isinstance(recorder.errors[0], IndexError)
    recorder = Recorder(initial=1)
    from_iterable(values).element_at_or_default(index, -1).run(recorder)
    assert recorder.values == [values[index] if index < len(values) else -1]


def test_arguments_are_validated_when_the_query_is_built() -> None:
    xs = from_iterable([1])
    with pytest.raises(ValueError, match="element_at: index must be >= 0"):
        xs.element_at(-1)
    with pytest.raises(TypeError, match="element_at: index must be an int"):
        xs.element_at(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="element_at_or_default: index must be >= 0"):
        xs.element_at_or_default(-1, 0)
    with pytest.raises(TypeError, match="element_at_or_default: default must not be None"):
        xs.element_at_or_default(1, None)
