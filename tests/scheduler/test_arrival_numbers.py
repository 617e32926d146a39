"""The virtual scheduler tells a task its place in line (``task.arrival``, its number among the tasks armed in its
tick) and takes it back when a recovered task is re-armed: the recovered task then runs exactly where it stood,
also among tasks armed and due in the same instant, whatever order recovery re-arms them in."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from reaqtive.scheduler import ActionTask, ItemProcessingTask, QueueProcessor, YieldableActionTask
from reaqtive.testing import TestScheduler


@dataclass(frozen=True)
class Timer:
    name: int
    armed: int  # the tick it is armed at (by a harness action, in the order of the list within a tick)
    due: int


def run_all(scheduler: TestScheduler, timers: list[Timer], after: int, seen: list[int],
            tasks: dict[int, ActionTask]) -> None:
    """Arm every timer armed after tick ``after`` at its tick, in list order; each records its name when it runs."""
    for timer in timers:
        if timer.armed > after:
            scheduler.schedule_absolute(timer.armed, arm, scheduler, timer, seen, tasks)


def arm(scheduler: TestScheduler, timer: Timer, seen: list[int], tasks: dict[int, ActionTask]) -> None:
    task = tasks[timer.name] = ActionTask(seen.append, timer.name)
    scheduler.schedule(task, timedelta(seconds=timer.due - timer.armed))


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[Timer], list[int], int]:
    count = draw(st.integers(1, 12))
    timers = []
    for name in range(count):
        armed = draw(st.integers(1, 6))
        timers.append(Timer(name, armed, armed + draw(st.integers(0, 3))))
    restarts = sorted(draw(st.sets(st.integers(1, 9), min_size=1, max_size=2)))
    return timers, restarts, draw(st.integers(0, 2**16))


def never_stopped(timers: list[Timer]) -> list[int]:
    scheduler = TestScheduler()
    seen: list[int] = []
    run_all(scheduler, timers, 0, seen, {})
    scheduler.advance_to(20)
    return seen


def restarted(timers: list[Timer], restarts: list[int], seed: int) -> list[int]:
    """Run to each restart tick, then re-arm what is pending in a new scheduler, in a shuffled order, each with
    when it was armed and the number it was told."""
    shuffle = random.Random(seed).shuffle
    seen: list[int] = []
    pending: list[tuple[Timer, int | None]] = []  # (timer, number) re-armed at the restart
    start = 0
    for stop in (*restarts, None):
        scheduler = TestScheduler()
        scheduler.advance_to(start)
        tasks: dict[int, ActionTask] = {}
        for timer, number in pending:
            task = tasks[timer.name] = ActionTask(seen.append, timer.name, armed=scheduler.to_datetime(timer.armed),
                                                  arrival=number)
            scheduler.schedule(task, timedelta(seconds=timer.due - start))
        run_all(scheduler, timers, start, seen, tasks)
        if stop is None:
            scheduler.advance_to(20)
            break
        scheduler.advance_to(stop)
        pending = [(timer, tasks[timer.name].arrival) for timer in timers
                   if timer.armed <= stop < timer.due]
        shuffle(pending)
        start = stop
    return seen


@settings(max_examples=150, deadline=None)
@given(schedules())
@example(([Timer(0, 2, 3), Timer(1, 2, 3)], [2], 1))  # armed in one instant, due in one instant, re-armed swapped
@example(([Timer(0, 1, 3), Timer(1, 2, 3), Timer(2, 2, 3)], [2, 3], 7))
def test_tasks_given_back_their_numbers_run_in_the_never_stopped_order(
    case: tuple[list[Timer], list[int], int],
) -> None:
    timers, restarts, seed = case
    assert restarted(timers, restarts, seed) == never_stopped(timers)


def test_a_task_is_told_its_number_and_keeps_a_number_given_back() -> None:
    scheduler = TestScheduler()
    first, second = ActionTask(print), YieldableActionTask(lambda token: True)
    scheduler.schedule(first, timedelta(seconds=5))
    scheduler.schedule(second, timedelta(seconds=5))
    assert first.arrival is not None and second.arrival is not None and first.arrival < second.arrival
    again = ActionTask(print, armed=scheduler.now, arrival=1234)
    scheduler.schedule(again, timedelta(seconds=5))
    assert again.arrival == 1234


def test_what_is_armed_after_a_number_given_back_in_the_same_tick_comes_after_it() -> None:
    scheduler = TestScheduler()
    seen: list[str] = []
    scheduler.advance_to(10)
    scheduler.schedule(ActionTask(seen.append, "recovered", armed=scheduler.now, arrival=900), timedelta(seconds=2))
    later = ActionTask(seen.append, "armed after it")
    scheduler.schedule(later, timedelta(seconds=2))
    assert later.arrival is not None and later.arrival > 900
    scheduler.advance_to(20)
    assert seen == ["recovered", "armed after it"]


def test_two_tasks_with_the_same_place_both_run_in_the_order_they_were_queued() -> None:
    # (two processes' counters can give two tasks the same tick and number: the queue keeps both)
    scheduler = TestScheduler()
    seen: list[str] = []
    scheduler.advance_to(10)
    armed = scheduler.to_datetime(8)
    for name in ("a", "b"):
        scheduler.schedule(ActionTask(seen.append, name, armed=armed, arrival=3), timedelta(seconds=1))
    scheduler.schedule(ActionTask(seen.append, "earlier number", armed=armed, arrival=2), timedelta(seconds=1))
    scheduler.schedule(ActionTask(seen.append, "no number"), timedelta(seconds=1))
    scheduler.advance_to(20)
    assert seen == ["earlier number", "a", "b", "no number"]


def test_a_recovered_task_without_a_number_goes_after_the_numbered_ones_of_its_tick() -> None:
    scheduler = TestScheduler()
    seen: list[str] = []
    scheduler.advance_to(10)
    armed = scheduler.to_datetime(8)
    scheduler.schedule(ActionTask(seen.append, "unnumbered", armed=armed), timedelta(seconds=1))
    scheduler.schedule(ActionTask(seen.append, "numbered", armed=armed, arrival=5), timedelta(seconds=1))
    scheduler.schedule(ActionTask(seen.append, "armed earlier", armed=scheduler.to_datetime(7)), timedelta(seconds=1))
    scheduler.advance_to(20)
    assert seen == ["armed earlier", "numbered", "unnumbered"]


def test_a_task_moved_again_is_told_its_new_number() -> None:
    scheduler = TestScheduler()
    queue: QueueProcessor[int] = QueueProcessor(lambda item: None)
    task = ItemProcessingTask(queue)  # (no arrival slot: not told, and no error)
    queue.enqueue(1)
    scheduler.schedule(task)
    runs: list[int] = []

    def twice(token: object) -> bool:
        runs.append(scheduler.clock)
        return len(runs) == 2  # not done the first time: it runs again, behind the work of its tick

    again = YieldableActionTask(twice)
    scheduler.schedule(again)
    told = again.arrival
    scheduler.advance_by(1)
    assert runs == [1, 1] and again.arrival is not None and again.arrival != told
