"""Dispose (cascading, dropping work), recalculate_priority, and access checks."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from reaqtive.core.scheduler_interface import Scheduler, YieldToken
from reaqtive.scheduler import ActionTask, LogicalScheduler, PhysicalScheduler, SchedulerStatus, VirtualClock

from .conftest import WAIT, barrier, run_on


def test_dispose_cascades_and_drops_queued_and_timed_work() -> None:
    clock = VirtualClock()
    with PhysicalScheduler(workers=1, clock=clock) as physical:
        root = LogicalScheduler(physical)
        child = root.create_child()
        grandchild = child.create_child()
        other = LogicalScheduler(physical)
        ran: list[str] = []
        root.pause().result(WAIT)  # keep the immediate tasks queued
        for node, label in [(root, "root"), (child, "child"), (grandchild, "grandchild")]:
            node.schedule(ActionTask(ran.append, label))
            node.schedule(ActionTask(ran.append, f"{label}-timer"), timedelta(seconds=1))
        root.dispose()
        assert [node.status for node in (root, child, grandchild)] == [SchedulerStatus.DISPOSED] * 3
        assert root.pending_count == child.pending_count == grandchild.pending_count == 0
        root.resume()  # a no-op once disposed
        clock.advance_by(timedelta(seconds=5))
        barrier(other)
        assert ran == []


def test_dispose_of_a_child_cancels_its_timers_and_detaches_it(physical1: PhysicalScheduler) -> None:
    parent = LogicalScheduler(physical1)
    child = parent.create_child()
    fired = threading.Event()
    child.schedule(ActionTask(fired.set), timedelta(days=1))
    child.dispose()
    assert parent.children == ()
    assert physical1._timers.first() is None  # the timer entry is gone, not just muted
    barrier(parent)  # the parent goes on
    assert parent.status is SchedulerStatus.RUNNING


def test_a_disposed_scheduler_ignores_work_and_makes_disposed_children(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    scheduler.dispose()
    scheduler.dispose()  # idempotent
    ran = threading.Event()
    scheduler.schedule(ActionTask(ran.set))
    child = scheduler.create_child()
    assert child.status is SchedulerStatus.DISPOSED
    child.schedule(ActionTask(ran.set))
    assert child.pause().done() and scheduler.pause().done()
    child.resume()
    child.recalculate_priority()
    barrier(LogicalScheduler(physical1))
    assert not ran.is_set()


def test_a_running_task_finishes_after_dispose_sees_its_token_raised_and_cannot_reschedule(
    physical: PhysicalScheduler,
) -> None:
    scheduler = LogicalScheduler(physical)
    running = threading.Event()
    release = threading.Event()
    finished = threading.Event()
    seen: list[bool] = []
    rescheduled = threading.Event()

    def work(token: YieldToken) -> bool:
        running.set()
        release.wait(WAIT)
        seen.append(token.is_yield_requested)
        scheduler.schedule(ActionTask(rescheduled.set))
        finished.set()
        return False  # asks to run again; dropped because the scheduler is disposed

    from reaqtive.scheduler import YieldableActionTask

    scheduler.schedule(YieldableActionTask(work))
    assert running.wait(WAIT)
    scheduler.dispose()
    release.set()
    assert finished.wait(WAIT)
    barrier(LogicalScheduler(physical))
    assert seen == [True]
    assert not rescheduled.is_set()
    assert scheduler.pending_count == 0


def test_dispose_during_a_pause_still_completes_the_pause(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    running = threading.Event()
    release = threading.Event()
    scheduler.schedule(ActionTask(lambda: (running.set(), release.wait(WAIT))))
    assert running.wait(WAIT)
    pause = scheduler.pause()
    scheduler.dispose()
    assert not pause.done()  # its task still runs
    release.set()
    pause.result(WAIT)
    assert scheduler.status is SchedulerStatus.DISPOSED


def test_physical_dispose_disposes_logical_schedulers_and_joins_the_workers() -> None:
    physical = PhysicalScheduler(workers=2)
    scheduler = LogicalScheduler(physical)
    child = scheduler.create_child()
    threads = list(physical._threads)
    physical.dispose()
    physical.dispose()  # idempotent
    assert physical.is_disposed
    assert not any(thread.is_alive() for thread in threads)
    assert scheduler.status is child.status is SchedulerStatus.DISPOSED
    assert LogicalScheduler(physical).status is SchedulerStatus.DISPOSED


def test_physical_dispose_from_a_worker_does_not_join_itself() -> None:
    physical = PhysicalScheduler(workers=2)
    scheduler = LogicalScheduler(physical)
    done = threading.Event()
    scheduler.schedule(ActionTask(lambda: (physical.dispose(), done.set())))
    assert done.wait(WAIT)
    assert physical.is_disposed


class _Switchable:
    """A task whose priority and runnability the test changes."""

    def __init__(self, log: list[str], label: str, priority: int = 1, runnable: bool = True) -> None:
        self.log = log
        self.label = label
        self.priority = priority
        self.is_runnable = runnable
        self.recalculations = 0

    def execute(self, scheduler: Scheduler) -> bool:
        self.log.append(self.label)
        return True

    def recalculate_priority(self) -> None:
        self.recalculations += 1


def test_a_task_that_is_not_runnable_waits_for_recalculate_priority(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    log: list[str] = []
    task = _Switchable(log, "late", runnable=False)
    scheduler.schedule(task)
    barrier(scheduler)
    assert log == []
    task.is_runnable = True
    barrier(scheduler)
    assert log == []  # becoming runnable is not enough: the scheduler must be told
    scheduler.recalculate_priority()
    barrier(scheduler)
    assert log == ["late"]
    assert task.recalculations >= 1


class _RacyQueueTask:
    """Simulates a producer that feeds the queue and calls ``recalculate_priority`` in the window between the
    worker reading ``is_runnable`` (empty: False) after a run and the worker parking the task."""

    priority = 1

    def __init__(self, scheduler: LogicalScheduler) -> None:
        self.scheduler = scheduler
        self.items = 1
        self.reads = 0
        self.runs = 0
        self.ran_twice = threading.Event()

    @property
    def is_runnable(self) -> bool:
        self.reads += 1
        runnable = self.items > 0
        if self.reads == 2:  # the read right after the first run, on the worker
            self.items += 1  # the producer enqueues...
            self.scheduler.recalculate_priority()  # ...and wakes the task, while the worker holds a stale False
        return runnable

    def execute(self, scheduler: Scheduler) -> bool:
        self.items -= 1
        self.runs += 1
        if self.runs == 2:
            self.ran_twice.set()
        return False

    def recalculate_priority(self) -> None:
        pass


def test_a_wake_up_that_arrives_while_the_task_runs_is_not_lost(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    task = _RacyQueueTask(scheduler)
    scheduler.schedule(task)
    assert task.ran_twice.wait(WAIT)
    assert task.items == 0


def test_recalculate_priority_reorders_queued_tasks_and_is_not_recursive(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    child = scheduler.create_child()
    log: list[str] = []
    first, second = _Switchable(log, "first"), _Switchable(log, "second")
    parked = _Switchable(log, "child", runnable=False)
    child.schedule(parked)
    barrier(child)
    gate = threading.Event()
    scheduler.schedule(ActionTask(gate.wait, WAIT, priority=-1))
    scheduler.schedule(first)
    scheduler.schedule(second)
    second.priority = 0
    parked.is_runnable = True
    scheduler.recalculate_priority()
    gate.set()
    barrier(scheduler)
    assert log == ["second", "first"]  # the child's parked task was not woken by the parent
    child.recalculate_priority()
    barrier(child)
    assert log == ["second", "first", "child"]


def test_check_access_is_true_only_on_the_workers_of_the_same_physical_scheduler(
    physical: PhysicalScheduler,
) -> None:
    scheduler = LogicalScheduler(physical)
    sibling = LogicalScheduler(physical)
    assert not scheduler.check_access()
    with pytest.raises(RuntimeError, match="does not have access"):
        scheduler.verify_access()
    assert run_on(scheduler, scheduler.check_access) is True
    assert run_on(sibling, scheduler.check_access) is True  # any worker of the same pool
    run_on(scheduler, scheduler.verify_access)
    with PhysicalScheduler(workers=1) as elsewhere:
        assert run_on(LogicalScheduler(elsewhere), scheduler.check_access) is False
