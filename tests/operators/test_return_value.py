"""return_value: one element then completion; on the scheduler at tick + 1 when hosted, synchronously standalone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, Query
from reaqtive.core.visitors import initialize
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.support import Recorder


def start_standalone(query: Query[Any], recorder: Recorder) -> None:
    initialize(query.subscribe(recorder), OperatorContext("test://return_value"))


def test_return_value_emits_one_tick_after_the_subscription_and_completes() -> None:
    result = TestScheduler().start(lambda: Query.return_value(42))
    assert result.messages == [on_next(201, 42), on_completed(201)]


def test_return_value_standalone_emits_inside_start() -> None:
    recorder = Recorder(initial=1)
    start_standalone(Query.return_value("x"), recorder)
    assert recorder.values == ["x"] and recorder.completed == 1


def test_return_value_waits_for_demand() -> None:
    recorder = Recorder()
    start_standalone(Query.return_value(5), recorder)
    assert recorder.values == [] and recorder.completed == 0, "no element before a request"
    recorder.request(1)
    assert recorder.values == [5] and recorder.completed == 1 and not recorder.violations


def test_return_value_one_at_a_time_on_the_scheduler_emits_when_requested() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, lambda: observer.request(1))
    result = scheduler.start(lambda: Query.return_value(7), observer=observer)
    assert result.messages == [on_next(251, 7), on_completed(251)], "hosted: on the scheduler, after the request"


def test_return_value_disposed_before_it_emits_emits_nothing() -> None:
    result = TestScheduler().start(lambda: Query.return_value(1), disposed=200)
    assert result.messages == []


def test_return_value_non_positive_request_is_a_rule_3_9_error() -> None:
    recorder = Recorder()
    start_standalone(Query.return_value(1), recorder)
    recorder.request(0)
    assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])
    assert recorder.values == []


def test_return_value_refuses_none() -> None:
    with pytest.raises(TypeError, match="return_value: value must not be None"):
        Query.return_value(None)


@settings(max_examples=25, deadline=None)
@given(value=st.one_of(st.integers(), st.text(), st.lists(st.integers(), max_size=3), st.booleans()))
def test_return_value_emits_any_value_unchanged(value: object) -> None:
    result = TestScheduler().start(lambda: Query.return_value(value))
    assert result.messages == [on_next(201, value), on_completed(201)]


def test_return_value_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda: Query.return_value(3), ticks=[200, 201, 202])


def test_return_value_checkpointed_without_demand_still_emits_after_recovery() -> None:
    from reaqtive.state import CheckpointMode, save_subscription, state_loader

    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    query = Query.return_value(9)
    handle = initialize(query.subscribe(observer), scheduler.create_context())
    scheduler.advance_to(10)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None and observer.messages == []
    recovered = scheduler.create_observer(request=1)
    initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(20)
    assert recovered.messages == [on_next(11, 9), on_completed(11)]


def test_return_value_recovered_before_anybody_asked_emits_one_tick_after_the_request() -> None:
    report = assert_checkpoint_anywhere(
        lambda: Query.return_value(7), demand=Demand(requests=((206, 1),)), ticks=[200, 205]
    )
    assert report.expected == (on_next(207, 7), on_completed(207))
