"""Pause and resume: quiescence, yield tokens, the hierarchy, asyncio."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from reaqtive.core.scheduler_interface import PausableScheduler, YieldToken
from reaqtive.scheduler import (
    ActionTask,
    ItemProcessingTask,
    LogicalScheduler,
    PhysicalScheduler,
    QueueProcessor,
    SchedulerStatus,
    VirtualClock,
    YieldableActionTask,
)

from .conftest import WAIT, barrier


def test_logical_scheduler_satisfies_the_pausable_protocol(physical: PhysicalScheduler) -> None:
    assert isinstance(LogicalScheduler(physical), PausableScheduler)


def test_pausing_an_idle_scheduler_completes_at_once(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    child = scheduler.create_child()
    future = scheduler.pause()
    assert future.done()
    assert scheduler.status is SchedulerStatus.PAUSED
    assert child.status is SchedulerStatus.PAUSED
    scheduler.resume()
    assert scheduler.status is child.status is SchedulerStatus.RUNNING


def test_pause_completes_while_two_workers_run_yieldable_tasks_within_one_batch(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    batches = [0, 0]
    in_third_batch = [threading.Event(), threading.Event()]
    release = threading.Event()
    finished = [threading.Event(), threading.Event()]

    def work(index: int, token: YieldToken) -> bool:
        while True:
            batches[index] += 1  # one batch of work...
            if batches[index] == 3:
                in_third_batch[index].set()
                release.wait(WAIT)  # ...that is still running when the pause starts
            if batches[index] == 6:
                finished[index].set()
                return True
            if token.is_yield_requested:  # checked between batches
                return False

    scheduler.schedule(YieldableActionTask(work, 0))
    scheduler.schedule(YieldableActionTask(work, 1))
    assert in_third_batch[0].wait(WAIT) and in_third_batch[1].wait(WAIT)  # both workers busy with our tasks

    pause = scheduler.pause()
    assert scheduler.status is SchedulerStatus.PAUSING
    assert scheduler.yield_token.is_yield_requested  # the running tasks' token is raised
    assert not pause.done()  # both tasks are mid-batch

    release.set()
    pause.result(WAIT)
    assert scheduler.status is SchedulerStatus.PAUSED
    assert batches == [3, 3]  # each finished the batch it was in and started no other

    scheduler.resume()
    assert not scheduler.yield_token.is_yield_requested  # the token resets
    assert finished[0].wait(WAIT) and finished[1].wait(WAIT)
    assert batches == [6, 6]


def test_pause_waits_for_at_most_one_item_processing_batch(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    processed: list[int] = []
    inside = threading.Event()
    release = threading.Event()

    def handle(item: int) -> None:
        processed.append(item)
        if item == 150:  # in the second batch of 100
            inside.set()
            release.wait(WAIT)

    queue: QueueProcessor[int] = QueueProcessor(handle)
    for item in range(1000):
        queue.enqueue(item)
    scheduler.schedule(ItemProcessingTask(queue, batch_size=100))
    assert inside.wait(WAIT)
    pause = scheduler.pause()
    assert not pause.done()
    release.set()
    pause.result(WAIT)
    assert len(processed) == 200  # the batch in progress ended; no further batch began

    scheduler.resume()
    barrier(scheduler)
    assert processed == list(range(1000))


def test_nothing_of_the_paused_subtree_runs_until_resume() -> None:
    clock = VirtualClock()
    with PhysicalScheduler(workers=1, clock=clock) as physical:
        root = LogicalScheduler(physical)
        child = root.create_child()
        grandchild = child.create_child()
        other = LogicalScheduler(physical)
        root.pause().result(WAIT)
        assert [node.status for node in (root, child, grandchild)] == [SchedulerStatus.PAUSED] * 3

        ran: list[str] = []
        for node, label in [(root, "root"), (child, "child"), (grandchild, "grandchild")]:
            node.schedule(ActionTask(ran.append, label))
            node.schedule(ActionTask(ran.append, f"{label}-timer"), timedelta(seconds=1))
        clock.advance_by(timedelta(seconds=5))  # the timers come due while paused
        barrier(other)  # the worker is free and ran later work of another scheduler...
        assert ran == []  # ...but nothing of the paused subtree

        root.resume()
        barrier(root)
        assert sorted(ran) == sorted(
            ["root", "child", "grandchild", "root-timer", "child-timer", "grandchild-timer"]
        )


def test_work_queued_before_a_pause_does_not_run_after_it_completes(physical1: PhysicalScheduler) -> None:
    scheduler, other = LogicalScheduler(physical1), LogicalScheduler(physical1)
    gate = threading.Event()
    other.schedule(ActionTask(gate.wait, WAIT))  # the worker is busy elsewhere...
    ran: list[int] = []
    for index in range(3):
        scheduler.schedule(ActionTask(ran.append, index))  # ...so these wait in the ready queue
    assert scheduler.pause().done()  # none of its tasks is running
    gate.set()
    barrier(other)  # the worker went through the whole queue
    assert ran == []
    scheduler.resume()
    barrier(scheduler)
    assert ran == [0, 1, 2]


def test_pausing_a_parent_raises_the_token_of_a_child_task_and_waits_for_it(physical: PhysicalScheduler) -> None:
    parent = LogicalScheduler(physical)
    child = parent.create_child()
    running = threading.Event()
    release = threading.Event()
    saw_yield: list[bool] = []

    def child_work(token: YieldToken) -> bool:
        running.set()
        release.wait(WAIT)
        saw_yield.append(token.is_yield_requested)
        return True

    child.schedule(YieldableActionTask(child_work))
    assert running.wait(WAIT)
    pause = parent.pause()
    assert child.status is SchedulerStatus.PAUSING
    assert not pause.done()
    release.set()
    pause.result(WAIT)
    assert saw_yield == [True]
    assert parent.status is child.status is SchedulerStatus.PAUSED


def test_a_child_created_while_paused_starts_paused_and_resumes_with_its_parent(physical: PhysicalScheduler) -> None:
    parent = LogicalScheduler(physical)
    parent.pause().result(WAIT)
    child = parent.create_child()
    assert child.status is SchedulerStatus.PAUSED
    ran = threading.Event()
    child.schedule(ActionTask(ran.set))
    barrier(LogicalScheduler(physical))
    assert not ran.is_set()
    parent.resume()
    assert ran.wait(WAIT)
    assert child.status is SchedulerStatus.RUNNING


def test_resuming_a_child_keeps_it_paused_while_its_parent_is_paused(physical1: PhysicalScheduler) -> None:
    parent = LogicalScheduler(physical1)
    child = parent.create_child()
    parent.pause().result(WAIT)
    child.pause().result(WAIT)
    ran = threading.Event()
    child.schedule(ActionTask(ran.set))
    child.resume()
    assert child.status is SchedulerStatus.PAUSED
    barrier(LogicalScheduler(physical1))
    assert not ran.is_set()
    parent.resume()
    assert ran.wait(WAIT)


def test_pausing_one_scheduler_does_not_stop_another(physical1: PhysicalScheduler) -> None:
    paused, other = LogicalScheduler(physical1), LogicalScheduler(physical1)
    paused.pause().result(WAIT)
    held = threading.Event()
    ran = threading.Event()
    paused.schedule(ActionTask(held.set))
    other.schedule(ActionTask(ran.set))
    assert ran.wait(WAIT)
    assert not held.is_set()


def test_a_yieldable_task_keeps_its_state_across_pause_and_resume_cycles(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    cycles = 5
    reached = [threading.Event() for _ in range(cycles)]
    proceed = [threading.Event() for _ in range(cycles)]
    values: list[int] = []
    tokens_at_start: list[bool] = []
    done = threading.Event()

    def count(token: YieldToken) -> bool:
        tokens_at_start.append(token.is_yield_requested)
        while len(values) < 100:
            values.append(len(values))
            cycle = len(values) // 10 - 1
            if len(values) % 10 == 0 and cycle < cycles:
                reached[cycle].set()
                proceed[cycle].wait(WAIT)
            if token.is_yield_requested:
                return False
        done.set()
        return True

    scheduler.schedule(YieldableActionTask(count))
    for cycle in range(cycles):
        assert reached[cycle].wait(WAIT)
        pause = scheduler.pause()
        proceed[cycle].set()
        pause.result(WAIT)
        assert len(values) == (cycle + 1) * 10  # it yielded right after the chunk in progress
        scheduler.resume()
    assert done.wait(WAIT)
    assert values == list(range(100))  # nothing lost, nothing repeated
    assert tokens_at_start == [False] * (cycles + 1)  # every run starts with the token reset


def test_pause_async_is_awaitable_from_asyncio(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    running = threading.Event()
    release = threading.Event()
    scheduler.schedule(ActionTask(lambda: (running.set(), release.wait(WAIT))))
    assert running.wait(WAIT)

    async def main() -> SchedulerStatus:
        pausing = scheduler.pause_async()  # pausing starts here, before any await

        async def wait_for_pause() -> None:
            await pausing

        task = asyncio.ensure_future(wait_for_pause())
        await asyncio.sleep(0)  # let the wait begin (a yield to the loop, not a timed wait)
        assert not task.done()
        release.set()
        await asyncio.wait_for(task, WAIT)
        return scheduler.status

    assert asyncio.run(main()) is SchedulerStatus.PAUSED


def test_resume_cancels_a_pause_still_in_progress(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    running = threading.Event()
    release = threading.Event()
    scheduler.schedule(ActionTask(lambda: (running.set(), release.wait(WAIT))))
    assert running.wait(WAIT)
    pause = scheduler.pause()
    scheduler.resume()
    assert pause.cancelled()
    assert scheduler.status is SchedulerStatus.RUNNING
    release.set()
    barrier(scheduler)
    assert scheduler.status is SchedulerStatus.RUNNING


def test_a_task_can_pause_its_own_scheduler(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    futures = []
    later = threading.Event()

    def pause_myself() -> None:
        futures.append(scheduler.pause())
        futures.append(futures[0].done())
        scheduler.schedule(ActionTask(later.set))

    scheduler.schedule(ActionTask(pause_myself))
    other = LogicalScheduler(physical)
    barrier(other)
    futures[0].result(WAIT)
    assert futures[1] is False  # it could not complete while the pausing task ran
    assert scheduler.status is SchedulerStatus.PAUSED
    barrier(other)
    assert not later.is_set()
    scheduler.resume()
    assert later.wait(WAIT)
