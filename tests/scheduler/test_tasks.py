"""The ready-made tasks, on their own and through a scheduler."""

from __future__ import annotations

import threading

import pytest

from reaqtive.core.scheduler_interface import SchedulerTask, YieldableSchedulerTask, YieldToken
from reaqtive.scheduler import (
    ActionTask,
    ItemProcessingTask,
    LogicalScheduler,
    PhysicalScheduler,
    QueueProcessor,
    YieldableActionTask,
)

from .conftest import WAIT, barrier


class _Requested:
    is_yield_requested = True


def test_action_task_runs_its_action_once_at_priority_one() -> None:
    calls: list[tuple[int, str]] = []
    task = ActionTask(lambda a, b: calls.append((a, b)), 1, "x")
    assert isinstance(task, SchedulerTask)
    assert (task.priority, task.is_runnable) == (1, True)
    assert task.execute(None) is True  # type: ignore[arg-type]
    assert calls == [(1, "x")]
    assert ActionTask(print, priority=0).priority == 0


def test_yieldable_action_task_passes_the_token_and_returns_the_action_result() -> None:
    seen: list[tuple[str, bool]] = []

    def action(label: str, token: YieldToken) -> bool:
        seen.append((label, token.is_yield_requested))
        return token.is_yield_requested

    task = YieldableActionTask(action, "a")
    assert isinstance(task, YieldableSchedulerTask) and isinstance(task, SchedulerTask)
    assert task.priority == 1 and task.is_runnable
    assert task.execute(None) is False  # type: ignore[arg-type]
    assert task.execute(None, YieldToken(_Requested())) is True  # type: ignore[arg-type]
    assert seen == [("a", False), ("a", True)]


def test_item_processing_task_is_runnable_only_with_items_and_processes_one_batch() -> None:
    seen: list[int] = []
    queue: QueueProcessor[int] = QueueProcessor(seen.append)
    task = ItemProcessingTask(queue, batch_size=2)
    assert task.priority == 2
    assert not task.is_runnable
    assert queue.enqueue(1) is True  # was empty: the producer must wake the task
    assert queue.enqueue(2) is False
    queue.enqueue(3)
    assert task.is_runnable
    assert task.execute(None) is False  # type: ignore[arg-type]
    assert seen == [1, 2] and queue.item_count == 1


def test_tasks_reject_bad_arguments() -> None:
    with pytest.raises(TypeError):
        ActionTask(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        YieldableActionTask(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ItemProcessingTask(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size"):
        ItemProcessingTask(QueueProcessor(print), batch_size=0)
    with pytest.raises(TypeError):
        QueueProcessor(3)  # type: ignore[arg-type]


def test_item_processing_task_parks_when_empty_and_wakes_on_recalculate_priority(physical: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical)
    seen: list[int] = []
    all_seen = threading.Event()

    def handle(item: int) -> None:
        seen.append(item)
        if len(seen) == 300:
            all_seen.set()

    queue: QueueProcessor[int] = QueueProcessor(handle)
    scheduler.schedule(ItemProcessingTask(queue, batch_size=64))
    barrier(scheduler)
    assert seen == []  # not runnable: parked, not lost
    assert scheduler.pending_count == 1
    for item in range(300):
        if queue.enqueue(item):
            scheduler.recalculate_priority()
    assert all_seen.wait(WAIT)
    assert seen == list(range(300))
    barrier(scheduler)
    assert scheduler.pending_count == 1  # parked again, waiting for more


def test_a_task_that_does_not_finish_runs_again_behind_queued_work(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    order: list[str] = []
    gate = threading.Event()
    runs = [0]

    def periodic(token: YieldToken) -> bool:
        runs[0] += 1
        order.append(f"periodic{runs[0]}")
        return runs[0] == 2

    scheduler.schedule(ActionTask(gate.wait, WAIT))  # hold the worker while we queue
    scheduler.schedule(YieldableActionTask(periodic))
    scheduler.schedule(ActionTask(order.append, "other"))
    gate.set()
    barrier(scheduler)
    assert order == ["periodic1", "other", "periodic2"]
