"""VirtualTimeScheduler is usable on its own (the engine's event-time mode), without the test helpers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reaqtive.core.scheduler_interface import YieldableSchedulerTask, YieldToken
from reaqtive.scheduler import ACTION_PRIORITY, ActionTask, VirtualTimeScheduler
from reaqtive.testing import TestScheduler


def test_virtual_scheduler_runs_tasks_in_virtual_time_order() -> None:
    scheduler = VirtualTimeScheduler(tick=timedelta(milliseconds=1))
    ran: list[tuple[str, int]] = []
    scheduler.schedule(ActionTask(lambda: ran.append(("late", scheduler.clock))), timedelta(seconds=2))
    scheduler.schedule(ActionTask(lambda: ran.append(("soon", scheduler.clock))), timedelta(milliseconds=5))
    scheduler.advance_to(scheduler.epoch + timedelta(seconds=1))
    assert ran == [("soon", 5)] and scheduler.clock == 1000
    scheduler.advance_by(timedelta(seconds=1))
    assert ran[-1] == ("late", 2000)


def test_children_have_the_class_of_their_parent() -> None:
    assert type(VirtualTimeScheduler().create_child()) is VirtualTimeScheduler
    assert type(TestScheduler().create_child()) is TestScheduler


# -- a timeline of its own: detach and attach (the engine's catch-up of a query behind it) --------------------------


def _note(ran: list[tuple[str, int]], scheduler: VirtualTimeScheduler, name: str) -> ActionTask:
    return ActionTask(lambda: ran.append((name, scheduler.clock)))


def test_a_detached_child_keeps_its_tasks_in_order_on_a_clock_of_its_own() -> None:
    root = VirtualTimeScheduler()
    child, other = root.create_child("child"), root.create_child("other")
    ran: list[tuple[str, int]] = []
    for name, due in (("c3", 3), ("c1", 1), ("c1b", 1), ("c5", 5)):
        child.schedule(_note(ran, child, name), timedelta(seconds=due))
    other.schedule(_note(ran, other, "o2"), timedelta(seconds=2))
    child.detach()
    assert child.is_detached and not other.is_detached
    root.advance_to(10)
    assert ran == [("o2", 2)], "the root's advance runs nothing of a detached child"
    assert child.clock == 0 and root.clock == 10
    child.advance_to(4)
    assert ran[1:] == [("c1", 1), ("c1b", 1), ("c3", 3)], "its own order, FIFO at equal times"
    grandchild = child.create_child("grandchild")
    grandchild.schedule(_note(ran, grandchild, "g4"), timedelta(0))
    child.advance_to(root.clock)
    child.attach()
    assert not child.is_detached and child.clock == root.clock == 10
    assert ran[4:] == [("g4", 4), ("c5", 5)], "a child created while detached lives on its timeline"
    child.schedule(_note(ran, child, "after"), timedelta(seconds=1))
    root.advance_to(11)
    assert ran[-1] == ("after", 11), "attached again: the root's advance runs its tasks"


def test_a_child_detached_at_an_earlier_clock_counts_its_delays_from_there() -> None:
    root = VirtualTimeScheduler()
    root.advance_to(100)
    child = root.create_child("behind")
    child.detach(clock=40)
    ran: list[tuple[str, int]] = []
    child.schedule(_note(ran, child, "t"), timedelta(seconds=5))
    child.advance_to(100)
    assert ran == [("t", 45)]


def test_detach_and_attach_are_refused_where_they_make_no_sense() -> None:
    root = VirtualTimeScheduler()
    child = root.create_child("child")
    with pytest.raises(RuntimeError, match="a root"):
        root.detach()
    with pytest.raises(RuntimeError, match="no timeline of its own"):
        child.attach()
    child.detach()
    with pytest.raises(RuntimeError, match="already has a timeline"):
        child.detach()


def test_a_paused_ancestor_holds_a_detached_child() -> None:
    root = VirtualTimeScheduler()
    child = root.create_child("child")
    ran: list[tuple[str, int]] = []
    child.schedule(_note(ran, child, "t"), timedelta(seconds=1))
    child.detach()
    root.pause()
    child.advance_to(5)
    assert ran == [], "a checkpoint's pause of the root holds it too"
    root.resume()  # its parked task goes back into its own line, due at its clock
    child.advance_to(6)
    assert ran == [("t", 5)]


def test_disposing_the_root_drops_the_tasks_of_a_detached_child_from_its_own_queue() -> None:
    """Found by the pause twins: a root disposed (an engine closed) while a query was paused removed the detached
    child's entries from the root's queue, where entries numbered alike compared their items."""
    root = VirtualTimeScheduler()
    child = root.create_child("paused")
    ran: list[tuple[str, int]] = []
    root.schedule(_note(ran, root, "root"), timedelta(seconds=5))
    child.schedule(_note(ran, child, "child"), timedelta(seconds=5))
    child.detach()
    other = root.create_child("other")
    other.schedule(_note(ran, other, "other"), timedelta(seconds=5))
    root.dispose()
    assert child.status.name == "DISPOSED" and child.pending_count == 0
    child.advance_to(10)
    assert ran == []


# -- a running task moved to a later time (run_again_at_us) ----------------------------------------------------------


class _Periodic(YieldableSchedulerTask):
    """Runs at the times in ``plan`` (microseconds), one after the other, moving itself each time."""

    priority = ACTION_PRIORITY
    is_runnable = True

    def __init__(self, scheduler: VirtualTimeScheduler, plan: list[int], seen: list[object]) -> None:
        self.scheduler, self.plan, self.seen = scheduler, plan, seen

    def execute(self, scheduler: Any, yield_token: YieldToken = YieldToken.NONE) -> bool:
        self.seen.append(("periodic", self.scheduler.clock))
        if not self.plan:
            return True
        return not self.scheduler.run_again_at_us(self.plan.pop(0))


def test_a_running_task_moves_itself_to_a_later_time_in_line_as_if_scheduled_then() -> None:
    scheduler = VirtualTimeScheduler()
    seen: list[object] = []
    scheduler.schedule(ActionTask(lambda: seen.append(("before", scheduler.clock))), timedelta(seconds=5))
    scheduler.schedule(_Periodic(scheduler, [5_000_000, 7_500_000], seen), timedelta(seconds=2))
    scheduler.advance_to(3)
    scheduler.schedule(ActionTask(lambda: seen.append(("after", scheduler.clock))), timedelta(seconds=2))
    assert scheduler.now_us == 3_000_000
    scheduler.advance_to(20)
    # at 5: the task scheduled before the move first, then the moved one, then the one scheduled after it; 7.5 s
    # is rounded up to tick 8
    assert seen == [("periodic", 2), ("before", 5), ("periodic", 5), ("after", 5), ("periodic", 8)]
    assert scheduler.queue_length == 0


def test_a_task_moved_while_its_scheduler_pauses_runs_at_its_time_after_the_resume() -> None:
    scheduler = VirtualTimeScheduler()
    seen: list[object] = []

    def pause_then_move() -> None:
        scheduler.pause()
        seen.append(("paused", scheduler.clock))

    task = _Periodic(scheduler, [10_000_000], seen)
    scheduler.schedule(task, timedelta(seconds=1))
    scheduler.schedule(ActionTask(pause_then_move), timedelta(seconds=1))
    scheduler.advance_to(12)
    assert seen == [("periodic", 1), ("paused", 1)]
    scheduler.resume()
    scheduler.advance_to(13)
    assert seen[-1] == ("periodic", 12)  # due at 10 while paused: it runs once resumed


def test_a_task_that_pauses_its_scheduler_and_moves_waits_for_its_new_time_after_an_early_resume() -> None:
    scheduler = VirtualTimeScheduler()
    seen: list[object] = []

    class PauseAndMove(_Periodic):
        def execute(self, scheduler: Any, yield_token: YieldToken = YieldToken.NONE) -> bool:
            if not self.seen:
                self.scheduler.pause()  # (a checkpoint's pause, asked from inside a task)
            return super().execute(scheduler, yield_token)

    scheduler.schedule(PauseAndMove(scheduler, [10_000_000], seen), timedelta(seconds=1))
    scheduler.advance_to(4)
    scheduler.resume()
    scheduler.advance_to(9)
    assert seen == [("periodic", 1)]  # resumed at 4: it still waits for 10
    scheduler.advance_to(11)
    assert seen == [("periodic", 1), ("periodic", 10)]


def test_moving_a_task_past_the_end_of_time_or_from_outside_a_task_is_refused() -> None:
    scheduler = VirtualTimeScheduler()
    assert not scheduler.run_again_at_us(5_000_000)  # no task runs
    seen: list[object] = []
    scheduler.schedule(_Periodic(scheduler, [2**62], seen), timedelta(seconds=1))
    scheduler.advance_to(2)
    assert seen == [("periodic", 1)]
    assert scheduler.queue_length == 0  # past the end of time: it ended


def test_a_task_moved_back_in_line_leaves_no_dead_twin_in_the_tick_queue() -> None:
    from reaqtive.scheduler.timers import TickQueue

    queue: TickQueue[str] = TickQueue()
    first = queue.add(5, 1, "a")
    queue.add(5, 1, "b")
    queue.remove(first)
    assert len(queue) == 1 and queue.next_due == 5
    queue.add(5, 1, "a again", arrival=first[2])  # the same place in line: its removed entry must not be met
    assert queue.pop_due(5) == ["a again", "b"]
    assert len(queue) == 0 and queue.next_due == TickQueue.NO_DUE and queue.first() is None
