"""to_list: the whole source as one list, bounded by MAX_LIST_SIZE."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, from_iterable
from reaqtive.core.errors import InvalidSettingError, LimitExceededError
from reaqtive.operators.settings import MAX_LIST_SIZE
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def test_to_list_emits_every_element_in_order_at_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.to_list)
    assert result.messages == [on_next(300, [2, 3, 4]), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_to_list_of_an_empty_source_is_an_empty_list() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    assert scheduler.start(xs.to_list).messages == [on_next(250, []), on_completed(250)]


def test_more_than_max_list_size_is_a_limit_error_at_the_overflowing_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_LIST_SIZE: 2})
    result = scheduler.start(xs.to_list, context=context)
    assert result.messages == [on_error(260, LimitExceededError("reaqtive:to_list", MAX_LIST_SIZE, 2))]
    assert xs.subscriptions == [subscribe(200, 260)]
    message = str(result.messages[0].value.error)  # type: ignore[attr-defined]
    assert "to_list" in message and "2" in message and MAX_LIST_SIZE in message


def test_exactly_max_list_size_elements_is_fine() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_LIST_SIZE: 3})
    assert scheduler.start(xs.to_list, context=context).messages == [
        on_next(300, [2, 3, 4]),
        on_completed(300),
    ]


def test_an_invalid_setting_fails_loudly() -> None:
    recorder = Recorder(initial=1)
    with pytest.raises(InvalidSettingError):
        from_iterable([1]).to_list().run(recorder, context=OperatorContext("test://x", settings={MAX_LIST_SIZE: 0}))


def test_source_error_passes_through_and_disposal_stops_everything() -> None:
    failure = KeyError("upstream")
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    assert scheduler.start(xs.to_list).messages == [on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    assert scheduler.start(ys.to_list, disposed=240).messages == []
    assert ys.subscriptions == [subscribe(200, 240)]


def test_to_list_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.to_list(), HOT)


def test_the_limit_holds_across_a_restart() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.to_list(), HOT, settings={MAX_LIST_SIZE: 2})


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(), max_size=40))
def test_to_list_matches_list(values: list[int]) -> None:
    recorder = Recorder(initial=1)
    from_iterable(values).to_list().run(recorder)
    assert recorder.values == [values]
