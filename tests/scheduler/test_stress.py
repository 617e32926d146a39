"""Stress: 100,000 tasks over 4 logical schedulers while another thread pauses and resumes 1,000 times."""

from __future__ import annotations

import itertools
import random
import sys
import threading

import pytest

from reaqtive.scheduler import ActionTask, LogicalScheduler, PhysicalScheduler, SchedulerStatus

TASKS = 100_000
PAUSES = 1_000
WAIT = 15.0


@pytest.mark.slow
@pytest.mark.timeout(20)
def test_every_task_runs_once_and_none_runs_while_its_scheduler_is_paused() -> None:
    with PhysicalScheduler(workers=2, name="stress") as physical:
        root = LogicalScheduler(physical, name="root")
        child = root.create_child("child")
        grandchild = child.create_child("grandchild")
        other = LogicalScheduler(physical, name="other")
        schedulers = [root, child, grandchild, other]
        subtree = {0: (0, 1, 2), 1: (1, 2), 2: (2,), 3: (3,)}
        outside = {0: 3, 1: 3, 2: 0, 3: 0}  # a scheduler that keeps running during the pause

        runs = [0] * TASKS
        executed = [0] * len(schedulers)
        paused = [False] * len(schedulers)  # set once a pause completed, cleared before resume
        violations: list[tuple[int, int]] = []
        finished = itertools.count(1)
        all_done = threading.Event()
        failures: list[BaseException] = []
        # The producer hands out one pause per TASKS // PAUSES tasks scheduled, spreading the pauses over the run.
        pace = threading.Semaphore(0)

        def task(index: int, owner: int) -> None:
            if paused[owner]:
                violations.append((index, owner))
            runs[index] += 1
            executed[owner] += 1
            if next(finished) == TASKS:
                all_done.set()

        def produce() -> None:
            try:
                for index in range(TASKS):
                    owner = index % len(schedulers)
                    schedulers[owner].schedule(ActionTask(task, index, owner))
                    if index % (TASKS // PAUSES) == 0:
                        pace.release()
            except BaseException as error:
                failures.append(error)

        def pause_and_resume() -> None:
            rng = random.Random(4)
            try:
                for _ in range(PAUSES):
                    assert pace.acquire(timeout=WAIT)
                    target = rng.randrange(len(schedulers))
                    schedulers[target].pause().result(WAIT)  # a deadlock fails here, within the timeout
                    nodes = subtree[target]
                    for node in nodes:
                        paused[node] = True
                    # Checked at each pause completion: the whole subtree is quiet.
                    assert all(schedulers[node].status is SchedulerStatus.PAUSED for node in nodes)
                    before = [executed[node] for node in nodes]
                    # Let the workers take everything queued now (the barrier runs last, priority 99): any task
                    # of the paused subtree they took would have run in this window.
                    barrier = threading.Event()
                    schedulers[outside[target]].schedule(ActionTask(barrier.set, priority=99))
                    assert barrier.wait(WAIT)
                    assert [executed[node] for node in nodes] == before
                    for node in nodes:
                        paused[node] = False
                    schedulers[target].resume()
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=produce), threading.Thread(target=pause_and_resume)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert not failures, failures
        assert all_done.wait(WAIT), f"only {sum(runs)} of {TASKS} tasks ran"
        assert violations == []
        assert runs == [1] * TASKS
        assert sum(executed) == TASKS
        root.pause().result(WAIT)  # the last task may still be settling: wait until nothing runs
        other.pause().result(WAIT)
        assert all(scheduler.pending_count == 0 for scheduler in schedulers)


@pytest.mark.timeout(20)
def test_work_submitted_while_a_worker_goes_idle_is_never_lost() -> None:
    # Each round schedules one task right as the worker that ran the previous one is going back to sleep: the
    # window in which a lost wake-up would leave the task in the inbox with every worker asleep. A tiny GIL
    # switch interval makes thread switches inside that window likely.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with PhysicalScheduler(workers=1, name="wake") as physical:  # no second worker to rescue a lost wake-up
            scheduler = LogicalScheduler(physical)
            for round_ in range(3_000):
                ran = threading.Event()
                scheduler.schedule(ActionTask(ran.set))
                assert ran.wait(WAIT), f"round {round_}: a submitted task was never run"
    finally:
        sys.setswitchinterval(interval)


class _SubmitsWhileGoingIdle(PhysicalScheduler):
    """Schedules a task from inside the worker's way to sleep: after it found the inbox empty and before it
    joined the idle list, so the submit sees no idle worker to wake."""

    def __init__(self) -> None:
        self.pending: list[tuple[LogicalScheduler, ActionTask]] = []
        super().__init__(workers=1, name="idle-window")

    def _idle_timeout(self) -> float | None:
        if self.pending:
            scheduler, task = self.pending.pop()
            scheduler.schedule(task)  # lock-free submit: nobody is on the idle list right now
        return super()._idle_timeout()


def test_a_submit_between_the_last_inbox_check_and_sleeping_wakes_the_worker() -> None:
    with _SubmitsWhileGoingIdle() as physical:
        scheduler = LogicalScheduler(physical)
        ran = threading.Event()
        physical.pending.append((scheduler, ActionTask(ran.set)))
        physical.wake()  # the idle worker goes round its loop and back towards sleep
        assert ran.wait(WAIT)
