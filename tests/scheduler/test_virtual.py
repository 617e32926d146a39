"""VirtualTimeScheduler is usable on its own (the engine's event-time mode), without the test helpers."""

from __future__ import annotations

from datetime import timedelta

import pytest

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
