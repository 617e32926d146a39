"""VirtualTimeScheduler is usable on its own (the engine's event-time mode), without the test helpers."""

from __future__ import annotations

from datetime import timedelta

from reaqtive.scheduler import ActionTask, VirtualTimeScheduler
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
