"""delay_subscription: relative and absolute, hot and cold sources, errors, disposal, demand, recovery."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reaqtive import MissingSchedulerError, OperatorContext, Query, UnknownOperatorError
from reaqtive.core.visitors import initialize, walk
from reaqtive.state import CheckpointMode, save_subscription, state_loader
from reaqtive.testing import INFINITE, Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BOOM = RuntimeError("boom")
COLD = [on_next(10, 1), on_next(20, 2), on_completed(30)]
HOT = [on_next(210, 1), on_next(230, 2), on_next(260, 3), on_next(280, 4), on_completed(300)]


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def test_relative_delay_subscribes_a_cold_source_at_the_due_time() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(lambda: xs.delay_subscription(s(50)))
    assert result.messages == [on_next(260, 1), on_next(270, 2), on_completed(280)]
    assert xs.subscriptions == [subscribe(250, 280)]


def test_absolute_delay_subscribes_at_that_time() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(lambda: xs.delay_subscription(EPOCH + s(300)))
    assert result.messages == [on_next(310, 1), on_next(320, 2), on_completed(330)]
    assert xs.subscriptions == [subscribe(300, 330)]


def test_a_hot_source_subscribed_late_misses_what_came_before() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.delay_subscription(s(40)))
    assert result.messages == [on_next(260, 3), on_next(280, 4), on_completed(300)]
    assert xs.subscriptions == [subscribe(240, 300)]


@pytest.mark.parametrize("due", [s(0), s(-10), EPOCH + s(100)])
def test_zero_negative_or_past_due_subscribes_at_once(due: Any) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(lambda: xs.delay_subscription(due))
    assert result.messages == [on_next(210, 1), on_next(220, 2), on_completed(230)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_source_error_passes_through_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(10, 1), on_error(20, BOOM))
    result = scheduler.start(lambda: xs.delay_subscription(s(30)))
    assert result.messages == [on_next(240, 1), on_error(250, BOOM)]
    assert xs.subscriptions == [subscribe(230, 250)]


def test_disposed_before_the_due_time_never_subscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(lambda: xs.delay_subscription(s(100)), disposed=250)
    assert result.messages == [] and xs.subscriptions == []


def test_disposed_after_the_due_time_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(10, 1), on_next(100, 2))
    result = scheduler.start(lambda: xs.delay_subscription(s(10)), disposed=250)
    assert result.messages == [on_next(220, 1)]
    assert xs.subscriptions == [subscribe(210, 250)]


def test_a_failure_to_subscribe_goes_downstream_at_the_due_time() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(lambda: Query("no_such_operator").delay_subscription(s(10)))
    assert result.messages == [on_error(210, UnknownOperatorError)]


def test_demand_requested_before_the_subscription_is_handed_over() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(5, 1), on_next(6, 2), on_next(7, 3), on_completed(8))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(220, lambda: observer.request(2))
    scheduler.schedule_absolute(270, lambda: observer.request(5))
    result = scheduler.start(lambda: xs.delay_subscription(s(50)), observer=observer)
    assert xs.requests == [Recorded(250, 2), Recorded(270, 5)]
    assert result.messages == [on_next(255, 1), on_next(256, 2), on_next(270, 3), on_completed(270)]


def test_one_at_a_time_demand_passes_through() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: xs.delay_subscription(s(20)), observer=observer)
    assert result.messages == [on_next(230, 2), on_next(260, 3), on_next(280, 4), on_completed(300)]
    assert [r.value for r in xs.requests] == [1, 1, 1, 1], "one at a time upstream: nothing is buffered here"


def test_needs_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError):
        Query.never().delay_subscription(s(1)).run(print, context=OperatorContext("test://none"))


@pytest.mark.parametrize(
    ("due", "error", "message"),
    [
        (5, TypeError, "delay_subscription: due must be a timedelta or a datetime"),
        (datetime(2024, 1, 1), ValueError, "delay_subscription: due must be timezone-aware"),
    ],
)
def test_arguments_are_validated(due: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Query.never().delay_subscription(due)


def test_relative_delay_survives_a_checkpoint_anywhere() -> None:
    report = assert_checkpoint_anywhere(lambda xs: xs.delay_subscription(s(25)), HOT, ticks=range(200, 320, 5))
    assert report.expected == (on_next(230, 2), on_next(260, 3), on_next(280, 4), on_completed(300))


def test_absolute_delay_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.delay_subscription(EPOCH + s(250)), HOT, ticks=range(200, 320, 5))


def test_the_subscribed_subtree_and_its_state_are_recovered() -> None:
    """After the due time the source's subtree exists; a recovered query re-creates it while loading and
    its operators get their state back (here the map stage under the delay)."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(30, 1), on_next(50, 2))
    query = xs.map(lambda x: x * 10).delay_subscription(s(20))
    observer = scheduler.create_observer()
    handle = initialize(query.subscribe(observer), scheduler.create_context())
    scheduler.advance_to(40)
    assert [type(node).__name__ for node in walk(handle)][:2] == ["DelaySubscription", "Map"]
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    handle.dispose()
    recovered = scheduler.create_observer()
    handle = initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
    assert [type(node).__name__ for node in walk(handle)][:2] == ["DelaySubscription", "Map"]
    scheduler.advance_to(60)
    assert observer.messages == [on_next(30, 10)]
    assert recovered.messages == [on_next(50, 20)], "subscribed at once on recovery, not 20 ticks later"
    assert xs.subscriptions == [subscribe(20, 40), subscribe(40, INFINITE)]
