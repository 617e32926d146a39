"""Durations and due times that reach past ``datetime.max`` mean "never": ``take(timedelta.max)`` takes
everything, a timer due after the end of time never fires, a list that would close after it closes only at
completion. No time operator and no scheduler lets a raw OverflowError out; a ``shift`` too long to represent is
refused at bind, naming the operator and the argument."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from reaqtive import OperatorArgumentError, Query
from reaqtive.core.scheduler_interface import NEVER, deadline
from reaqtive.scheduler import ActionTask, LogicalScheduler, PhysicalScheduler, VirtualClock, VirtualTimeScheduler
from reaqtive.testing import TestScheduler, on_completed, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from reaqtive.testing.sources import TestableQuery

FOREVER = timedelta.max
SECONDS = timedelta(seconds=1)
HOT = [on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(300)]


def run(create: Callable[[TestableQuery[int]], Query[Any]], *, epoch: datetime | None = None) -> list[Any]:
    scheduler = TestScheduler() if epoch is None else TestScheduler(epoch=epoch)
    xs = scheduler.create_hot_observable(*HOT)
    return scheduler.start(lambda: create(xs)).messages


def lists(windows: Query[Any]) -> Query[Any]:
    return windows.flat_map(lambda window: window.to_list())


def test_deadline_past_datetime_max_is_never() -> None:
    assert deadline(datetime(2030, 1, 1, tzinfo=UTC), FOREVER) is NEVER
    assert deadline(NEVER - SECONDS, 2 * SECONDS) is NEVER
    assert deadline(datetime(2030, 1, 1, tzinfo=UTC), timedelta.min) == datetime.min.replace(tzinfo=UTC)


def test_take_for_a_duration_past_datetime_max_takes_everything() -> None:
    assert run(lambda xs: xs.take(FOREVER)) == [on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(300)]


def test_skip_for_a_duration_past_datetime_max_drops_every_element() -> None:
    assert run(lambda xs: xs.skip(FOREVER)) == [on_completed(300)]


def test_take_for_a_duration_past_datetime_max_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.take(FOREVER), HOT)


def test_buffers_and_windows_that_would_close_after_datetime_max_close_at_completion() -> None:
    everything = [on_next(300, [1, 2, 3]), on_completed(300)]
    assert run(lambda xs: xs.buffer(FOREVER)) == everything
    assert run(lambda xs: lists(xs.window(FOREVER))) == everything
    assert run(lambda xs: xs.buffer(FOREVER, 2)) == [on_next(220, [1, 2]), on_next(300, [3]), on_completed(300)]
    assert run(lambda xs: lists(xs.window(FOREVER, 2))) == [
        on_next(220, [1, 2]),
        on_next(300, [3]),
        on_completed(300),
    ]
    # A list opens every 40 seconds and none closes by time: at completion every open list goes out.
    opened = run(lambda xs: xs.buffer(FOREVER, 40 * SECONDS))
    assert opened == [on_next(300, [1, 2, 3]), on_next(300, []), on_next(300, []), on_completed(300)]


def test_a_shift_too_long_to_represent_is_refused_at_bind_naming_the_argument() -> None:
    source = Query.never()
    for query in (source.buffer(10 * SECONDS, FOREVER), source.window(10 * SECONDS, FOREVER)):
        with pytest.raises(OperatorArgumentError, match=r"args\[2\] \(shift\) must be at most 3652058 days"):
            query.subscribe(TestScheduler().create_observer())


def test_timers_due_after_datetime_max_never_fire() -> None:
    assert run(lambda xs: Query.timer(FOREVER)) == []
    assert run(lambda xs: Query.timer(NEVER)) == []
    assert run(lambda xs: Query.interval(FOREVER)) == []
    assert run(lambda xs: Query.timer(SECONDS, FOREVER)) == [on_next(201, 0)]
    assert run(lambda xs: xs.sample(FOREVER)) == []


def test_delays_past_datetime_max_never_end() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    assert scheduler.start(lambda: xs.delay_subscription(FOREVER)).messages == []
    assert xs.subscriptions == []
    assert run(lambda xs: xs.debounce(FOREVER)) == [on_next(300, 3), on_completed(300)]
    assert run(lambda xs: lists(xs.group_by(lambda x: x % 2, expire_after=FOREVER))) == [
        on_next(300, [2]),
        on_next(300, [1, 3]),
        on_completed(300),
    ]


def test_an_end_time_past_datetime_max_in_utc_never_comes() -> None:
    # datetime.max at UTC-5 is after datetime.max in UTC: not representable in UTC, and never reached.
    beyond = datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))
    assert run(lambda xs: xs.take_until(beyond)) == HOT
    assert run(lambda xs: Query.timer(beyond)) == []


def test_time_operators_near_the_end_of_virtual_time_never_reach_past_it() -> None:
    # Virtual time ends at tick 350 (datetime.max): deadlines after it never come, and neither does the
    # harness's disposal at tick 1000.
    epoch = (datetime.max - timedelta(seconds=350)).replace(tzinfo=UTC, microsecond=0)
    assert run(lambda xs: xs.take(200 * SECONDS), epoch=epoch) == HOT
    assert run(lambda xs: xs.skip(200 * SECONDS), epoch=epoch) == [on_completed(300)]
    assert run(lambda xs: xs.buffer(40 * SECONDS), epoch=epoch) == [
        on_next(240, [1, 2, 3]),
        on_next(280, []),
        on_next(300, []),
        on_completed(300),
    ]
    assert run(lambda xs: Query.interval(50 * SECONDS), epoch=epoch) == [
        on_next(250, 0),
        on_next(300, 1),
        on_next(350, 2),
    ]


def test_the_virtual_scheduler_never_queues_work_due_after_the_end_of_time() -> None:
    scheduler = VirtualTimeScheduler()
    ran: list[str] = []
    scheduler.schedule(ActionTask(ran.append, "never"), FOREVER)
    scheduler.schedule(ActionTask(ran.append, "never either"), NEVER)
    scheduler.schedule(ActionTask(ran.append, "soon"), 5 * SECONDS)
    scheduler.run()  # does not jump to the end of time
    assert ran == ["soon"] and scheduler.clock == 5 and scheduler.pending_count == 0
    with pytest.raises(ValueError, match="virtual time ends at tick"):
        scheduler.advance_to(10**12)


def test_the_threaded_schedulers_accept_a_due_time_past_datetime_max() -> None:
    clock = VirtualClock()
    with PhysicalScheduler(workers=1, clock=clock) as physical:
        scheduler = LogicalScheduler(physical)
        ran: list[str] = []
        scheduler.schedule(ActionTask(ran.append, "never"), FOREVER)
        scheduler.schedule(ActionTask(ran.append, "never either"), NEVER)
        assert scheduler.pending_count == 0
        clock.advance_by(FOREVER)  # the clock stops at the end of time
        assert clock.now() is NEVER
        done = threading.Event()
        scheduler.schedule(ActionTask(done.set))
        assert done.wait(10.0)
        assert ran == []


def test_the_source_of_a_never_ending_take_stays_subscribed_until_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    scheduler.start(lambda: xs.take(FOREVER))
    assert xs.subscriptions == [subscribe(200, 300)]
