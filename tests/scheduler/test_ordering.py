"""Order of execution: priority, FIFO among equals, due times (relative, absolute, wall clock under freezegun)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive.scheduler import ActionTask, LogicalScheduler, PhysicalScheduler, VirtualClock

from .conftest import WAIT, barrier


def _hold(scheduler: LogicalScheduler) -> threading.Event:
    """Occupy the single worker until the returned event is set, so what we queue meanwhile is ordered."""
    gate = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(WAIT)

    scheduler.schedule(ActionTask(hold, priority=-1))
    assert started.wait(WAIT)
    return gate


def test_lower_priority_value_runs_first_and_equal_priorities_run_fifo(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    order: list[str] = []
    gate = _hold(scheduler)
    for label, priority in [("a2", 2), ("b1", 1), ("c0", 0), ("d1", 1), ("e2", 2), ("f0", 0)]:
        scheduler.schedule(ActionTask(order.append, label, priority=priority))
    gate.set()
    barrier(scheduler)
    assert order == ["c0", "f0", "b1", "d1", "a2", "e2"]


def test_priority_and_fifo_hold_across_logical_schedulers(physical1: PhysicalScheduler) -> None:
    first, second = LogicalScheduler(physical1), LogicalScheduler(physical1)
    order: list[str] = []
    gate = _hold(first)
    second.schedule(ActionTask(order.append, "second-p1"))
    first.schedule(ActionTask(order.append, "first-p1"))
    second.schedule(ActionTask(order.append, "second-p0", priority=0))
    gate.set()
    barrier(first)
    assert order == ["second-p0", "second-p1", "first-p1"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40))
def test_random_task_sets_run_in_priority_then_arrival_order(priorities: list[int]) -> None:
    with PhysicalScheduler(workers=1) as physical:
        scheduler = LogicalScheduler(physical)
        order: list[int] = []
        scheduler.pause().result(WAIT)  # queue everything first, then let it go at once
        for index, priority in enumerate(priorities):
            scheduler.schedule(ActionTask(order.append, index, priority=priority))
        scheduler.resume()
        barrier(scheduler)
        assert order == sorted(range(len(priorities)), key=lambda i: (priorities[i], i))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), min_size=1, max_size=30))
def test_timers_run_in_due_then_priority_then_arrival_order(tasks: list[tuple[int, int]]) -> None:
    clock = VirtualClock()
    with PhysicalScheduler(workers=1, clock=clock) as physical:
        scheduler = LogicalScheduler(physical)
        order: list[int] = []
        start = clock.now()
        for index, (seconds, priority) in enumerate(tasks):
            scheduler.schedule(ActionTask(order.append, index, priority=priority), timedelta(seconds=seconds + 1))
        for second in range(1, 8):
            clock.advance_to(start + timedelta(seconds=second))
            barrier(scheduler)  # priority 99: after every timer released at this second
        assert order == sorted(range(len(tasks)), key=lambda i: (tasks[i][0], tasks[i][1], i))


def test_relative_and_absolute_due_times_wait_for_the_clock() -> None:
    clock = VirtualClock()
    with PhysicalScheduler(workers=1, clock=clock) as physical:
        scheduler = LogicalScheduler(physical)
        start = clock.now()
        fired: list[tuple[str, datetime]] = []
        scheduler.schedule(ActionTask(lambda: fired.append(("relative", scheduler.now))), timedelta(seconds=30))
        scheduler.schedule(ActionTask(lambda: fired.append(("absolute", scheduler.now))), start + timedelta(seconds=20))
        scheduler.schedule(ActionTask(lambda: fired.append(("past", scheduler.now))), start - timedelta(days=1))
        scheduler.schedule(ActionTask(lambda: fired.append(("negative", scheduler.now))), timedelta(seconds=-5))
        barrier(scheduler)
        assert fired == [("past", start), ("negative", start)]  # past and negative due times run now
        clock.advance_to(start + timedelta(seconds=20))
        barrier(scheduler)
        assert fired[2:] == [("absolute", start + timedelta(seconds=20))]
        clock.advance_to(start + timedelta(seconds=29))
        barrier(scheduler)
        assert len(fired) == 3
        clock.advance_to(start + timedelta(seconds=30))
        barrier(scheduler)
        assert fired[3:] == [("relative", start + timedelta(seconds=30))]


def test_timers_that_come_due_together_run_by_priority_then_due_time() -> None:
    clock = VirtualClock()
    with PhysicalScheduler(workers=1, clock=clock) as physical:
        scheduler = LogicalScheduler(physical)
        order: list[str] = []
        scheduler.schedule(ActionTask(order.append, "due2-p1"), timedelta(seconds=2))
        scheduler.schedule(ActionTask(order.append, "due3-p0", priority=0), timedelta(seconds=3))
        scheduler.schedule(ActionTask(order.append, "due1-p1"), timedelta(seconds=1))
        clock.advance_by(timedelta(seconds=10))
        barrier(scheduler)
        assert order == ["due3-p0", "due1-p1", "due2-p1"]


def test_freezegun_controls_wall_clock_due_times(physical1: PhysicalScheduler) -> None:
    with freeze_time("2024-03-01 12:00:00") as frozen:
        scheduler = LogicalScheduler(physical1)
        start = scheduler.now
        assert start == datetime(2024, 3, 1, 12, tzinfo=UTC)
        absolute, relative = threading.Event(), threading.Event()
        fired: list[tuple[str, datetime]] = []

        def fire(label: str, event: threading.Event) -> None:
            fired.append((label, scheduler.now))
            event.set()

        scheduler.schedule(ActionTask(fire, "relative", relative), timedelta(minutes=10))
        scheduler.schedule(ActionTask(fire, "absolute", absolute), start + timedelta(minutes=5))
        barrier(scheduler)
        assert fired == []  # frozen: nothing is due, however long the real wait
        frozen.tick(timedelta(minutes=5))
        physical1.wake()
        assert absolute.wait(WAIT)
        barrier(scheduler)
        assert fired == [("absolute", start + timedelta(minutes=5))]
        frozen.tick(timedelta(minutes=5))
        physical1.wake()
        assert relative.wait(WAIT)
        assert fired[1] == ("relative", start + timedelta(minutes=10))


def test_a_long_delay_does_not_overflow_the_idle_wait(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    ran = threading.Event()
    scheduler.schedule(ActionTask(ran.set), timedelta(days=60))  # beyond any OS timer limit
    barrier(scheduler)
    assert not ran.is_set()
    assert scheduler.pending_count == 1


def test_schedule_rejects_bad_arguments(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    with pytest.raises(TypeError):
        scheduler.schedule(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="due"):
        scheduler.schedule(ActionTask(print), 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="naive"):
        scheduler.schedule(ActionTask(print), datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="workers"):
        PhysicalScheduler(workers=0)
    with pytest.raises(TypeError):
        LogicalScheduler(None)  # type: ignore[arg-type]
