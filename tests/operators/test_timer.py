"""timer (single and periodic, relative and absolute) and interval, on virtual time (1 tick = 1 s)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import MissingSchedulerError, OperatorContext, Query
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.visitors import initialize
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import CheckpointMode, save_subscription, state_loader
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def at(tick: int) -> datetime:
    return EPOCH + s(tick)


def ticks(messages: list[Any]) -> list[tuple[int, object]]:
    return [(m.time, m.value.value) for m in messages]


# -- single ------------------------------------------------------------------------------------------------------


def test_single_relative_timer_emits_zero_then_completes_at_the_due_time() -> None:
    assert TestScheduler().start(lambda: Query.timer(s(50))).messages == [on_next(250, 0), on_completed(250)]


@pytest.mark.parametrize("due", [s(0), s(-15), timedelta(microseconds=-1)])
def test_single_timer_with_a_zero_or_negative_delay_fires_at_the_subscription_tick(due: timedelta) -> None:
    assert TestScheduler().start(lambda: Query.timer(due)).messages == [on_next(200, 0), on_completed(200)]


def test_single_absolute_timer_fires_at_its_time() -> None:
    assert TestScheduler().start(lambda: Query.timer(at(300))).messages == [on_next(300, 0), on_completed(300)]


def test_single_absolute_timer_in_the_past_fires_at_once() -> None:
    assert TestScheduler().start(lambda: Query.timer(at(150))).messages == [on_next(200, 0), on_completed(200)]


def test_single_timer_disposed_before_it_fires_emits_nothing_and_its_task_is_muted() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(lambda: Query.timer(s(100)), disposed=250)
    assert result.messages == []
    assert scheduler.clock == 300, "the pending task still ran at its due time, muted"


def test_single_timer_holds_its_tick_until_there_is_demand() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(280, lambda: observer.request(1))
    result = scheduler.start(lambda: Query.timer(s(30)), observer=observer)
    assert result.messages == [on_next(281, 0), on_completed(281)], "delivered on the scheduler after the request"


def test_due_time_overflow_is_clamped_and_never_fires() -> None:
    scheduler = TestScheduler()
    assert scheduler.start(lambda: Query.timer(timedelta.max)).messages == []
    scheduler = TestScheduler()
    assert scheduler.start(lambda: Query.timer(timedelta.max, timedelta.max)).messages == []


def test_a_periodic_timer_near_the_end_of_time_stops_instead_of_overflowing() -> None:
    end = datetime.max.replace(tzinfo=UTC)
    scheduler = TestScheduler(epoch=end - s(1000))
    result = scheduler.start(lambda: Query.timer(s(600), s(100)))
    assert ticks(result.messages) == [(800, 0), (900, 1)], "the next due time is clamped to the end: no tick"


# -- periodic ----------------------------------------------------------------------------------------------------


def test_periodic_timer_emits_a_counter_every_period_until_disposed() -> None:
    result = TestScheduler().start(lambda: Query.timer(s(5), s(10)), disposed=240)
    assert result.messages == [on_next(205, 0), on_next(215, 1), on_next(225, 2), on_next(235, 3)]


def test_interval_is_a_periodic_timer_starting_one_period_after_the_start() -> None:
    result = TestScheduler().start(lambda: Query.interval(s(20)), disposed=270)
    assert result.messages == [on_next(220, 0), on_next(240, 1), on_next(260, 2)]


def test_periodic_timer_with_a_negative_delay_fires_at_once_then_every_period() -> None:
    result = TestScheduler().start(lambda: Query.timer(s(-15), s(10)), disposed=225)
    assert ticks(result.messages) == [(200, 0), (210, 1), (220, 2)]


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (201, [(201, 0), (211, 1), (221, 2)]),  # in the future: no catch-up
        (195, [(200, 0), (205, 1), (215, 2)]),  # less than a period behind: the past tick fires, phase kept
        (190, [(200, 0), (210, 1), (220, 2)]),  # exactly a period behind (edge case): moved forward by one
        (185, [(200, 0), (205, 1), (215, 2)]),  # 1.5 periods behind: moved by one period, one past tick fires
        (13, [(200, 0), (203, 1), (213, 2), (223, 3)]),  # far behind: at most one past tick fires, the phase is kept
    ],
)
def test_periodic_absolute_start_in_the_past_is_caught_up(start: int, expected: list[tuple[int, int]]) -> None:
    result = TestScheduler().start(lambda: Query.timer(at(start), s(10)), disposed=225)
    assert ticks(result.messages) == expected


def test_periodic_ticks_missed_during_a_pause_fire_back_to_back_on_resume() -> None:
    scheduler = TestScheduler()
    query_scheduler = scheduler.create_child()
    scheduler.schedule_absolute(232, query_scheduler.pause)
    scheduler.schedule_absolute(265, query_scheduler.resume)
    result = scheduler.start(lambda: Query.interval(s(10)), disposed=285, context=query_scheduler.create_context())
    assert ticks(result.messages) == [(210, 0), (220, 1), (230, 2), (265, 3), (265, 4), (265, 5), (270, 6), (280, 7)]


def test_restoring_an_older_checkpoint_fires_the_past_ticks_back_to_back() -> None:
    scheduler = TestScheduler()
    query = Query.interval(s(10))
    first = scheduler.create_observer()
    handle = initialize(query.subscribe(first), scheduler.create_context())
    scheduler.advance_to(25)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    handle.dispose()
    scheduler.advance_to(62)
    recovered = scheduler.create_observer()
    initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(75)
    assert ticks(first.messages) == [(10, 0), (20, 1)]
    assert ticks(recovered.messages) == [(62, 2), (62, 3), (62, 4), (62, 5), (70, 6)]


def test_the_due_time_is_saved_as_an_absolute_time() -> None:
    """Recovered later than it was saved, a single timer still fires at its original due time."""
    scheduler = TestScheduler()
    query = Query.timer(s(30))
    handle = initialize(query.subscribe(scheduler.create_observer()), scheduler.create_context())
    scheduler.advance_to(10)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    handle.dispose()
    scheduler.advance_to(20)
    recovered = scheduler.create_observer()
    initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(100)
    assert recovered.messages == [on_next(30, 0), on_completed(30)]


@settings(max_examples=30, deadline=None)
@given(due=st.integers(-30, 60), period=st.integers(1, 40), disposed=st.integers(200, 400))
def test_periodic_relative_timer_ticks_at_due_plus_multiples_of_the_period(
    due: int, period: int, disposed: int
) -> None:
    result = TestScheduler().start(lambda: Query.timer(s(due), s(period)), disposed=disposed)
    first = 200 + max(due, 0)
    expected = [(t, i) for i, t in enumerate(range(first, disposed, period))]
    assert ticks(result.messages) == expected


# -- demand ------------------------------------------------------------------------------------------------------


def test_one_at_a_time_demand_gets_every_tick_and_never_more_than_requested() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: Query.interval(s(10)), observer=observer, disposed=245)
    assert ticks(result.messages) == [(210, 0), (220, 1), (230, 2), (240, 3)]


def test_ticks_without_demand_are_held_and_delivered_with_their_numbers_when_requested() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(245, lambda: observer.request(2))
    scheduler.schedule_absolute(265, lambda: observer.request(100))
    result = scheduler.start(lambda: Query.interval(s(10)), observer=observer, disposed=285)
    assert ticks(result.messages) == [(246, 0), (246, 1), (266, 2), (266, 3), (266, 4), (266, 5), (270, 6), (280, 7)]


def test_more_held_ticks_than_max_queue_size_is_an_error_at_the_overflowing_tick() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 3})
    result = scheduler.start(lambda: Query.interval(s(10)), observer=observer, context=context)
    assert result.messages == [on_error(240, LimitExceededError("reaqtive:timer+period", MAX_QUEUE_SIZE, 3))]


def test_held_ticks_within_the_limit_are_not_an_error() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(235, lambda: observer.request(10))
    context = scheduler.create_context({MAX_QUEUE_SIZE: 3})
    result = scheduler.start(lambda: Query.interval(s(10)), observer=observer, context=context, disposed=245)
    assert ticks(result.messages) == [(236, 0), (236, 1), (236, 2), (240, 3)]


def test_held_ticks_survive_a_checkpoint() -> None:
    scheduler = TestScheduler()
    query = Query.interval(s(10))
    observer = scheduler.create_observer(request=0)
    handle = initialize(query.subscribe(observer), scheduler.create_context())
    scheduler.advance_to(35)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None and observer.messages == []
    handle.dispose()
    recovered = scheduler.create_observer(request=2)
    initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(45)
    # The recovered subscriber asks at 35: the held ticks go out at 36, as a request at 35 is served in a run
    # that never stopped (see the test above), not in the starting instant.
    assert ticks(recovered.messages) == [(36, 0), (36, 1), (36, 2), (40, 3)]


def test_non_positive_request_is_a_rule_3_9_error() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(215, lambda: observer.request(0))
    result = scheduler.start(lambda: Query.interval(s(10)), observer=observer)
    assert result.messages == [on_error(216, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]


# -- checkpoint anywhere -----------------------------------------------------------------------------------------


def test_single_relative_timer_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda: Query.timer(s(30)), ticks=[200, 210, 229, 230, 231])


def test_single_absolute_timer_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda: Query.timer(at(260)), ticks=[200, 230, 260, 270])


def test_periodic_timers_survive_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda: Query.timer(s(5), s(10)), ticks=range(200, 400, 7))
    assert_checkpoint_anywhere(lambda: Query.timer(at(185), s(10)), ticks=range(200, 300, 5))
    assert_checkpoint_anywhere(lambda: Query.interval(s(25)), ticks=range(200, 1000, 30))


# -- arguments and context ---------------------------------------------------------------------------------------


def test_a_timer_needs_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError):
        Query.timer(s(1)).run(print, context=OperatorContext("test://none"))
    with pytest.raises(MissingSchedulerError):
        Query.interval(s(1)).run(print, context=OperatorContext("test://none"))


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Query.timer(5), TypeError, "timer: due must be a timedelta or a datetime"),
        (lambda: Query.timer(datetime(2024, 1, 1)), ValueError, "timer: due must be timezone-aware"),
        (lambda: Query.timer(s(1), s(0)), ValueError, "timer: period must be positive"),
        (lambda: Query.timer(s(1), s(-1)), ValueError, "timer: period must be positive"),
        (lambda: Query.timer(s(1), 10), TypeError, "timer: period must be a timedelta"),
        (lambda: Query.interval(s(0)), ValueError, "interval: period must be positive"),
        (lambda: Query.interval(1.5), TypeError, "interval: period must be a timedelta"),
    ],
)
def test_arguments_are_validated_when_the_query_is_built(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()


def test_an_interval_recovered_at_the_tick_of_a_request_delivers_its_held_ticks_one_tick_later() -> None:
    # Ticks 0 and 1 are held (no demand) until the request of 235, which is served at 236. A restart at 235
    # finds them held and the subscriber asking again: they still go out at 236, not in the restarting instant.
    report = assert_checkpoint_anywhere(
        lambda: Query.interval(s(10)).take(2), demand=Demand(requests=((235, 2),)), ticks=[235]
    )
    assert report.expected == (on_next(236, 0), on_next(236, 1), on_completed(236))


def test_a_timer_recovered_with_demand_and_nothing_held_delivers_the_next_tick_when_it_fires() -> None:
    # Demand asked at 206 waits for the tick of 207, which goes out as it fires, also after a restart at 206
    # (with another request at 207, the same instant).
    report = assert_checkpoint_anywhere(
        lambda: Query.interval(s(7)).take(2), demand=Demand(requests=((206, 1), (207, 1))), ticks=[206]
    )
    assert report.expected == (on_next(207, 0), on_next(214, 1), on_completed(214))
    single = assert_checkpoint_anywhere(
        lambda: Query.timer(s(7)), demand=Demand(requests=((206, 1), (207, 1))), ticks=[206]
    )
    assert single.expected == (on_next(207, 0), on_completed(207))
