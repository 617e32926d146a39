"""The virtual-time TestScheduler: ticks, rounding, ordering at equal times, pause/resume/dispose, errors."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reaqtive.core.scheduler_interface import PausableScheduler, Scheduler, YieldToken
from reaqtive.scheduler import (
    EPOCH,
    ActionTask,
    ItemProcessingTask,
    QueueProcessor,
    SchedulerStatus,
    UnhandledExceptionArgs,
    YieldableActionTask,
)
from reaqtive.testing import TestScheduler


def _at(scheduler: TestScheduler, log: list[tuple[int, str]], label: str) -> ActionTask:
    """A priority-1 task that records (clock, label)."""
    return ActionTask(lambda: log.append((scheduler.clock, label)))


def test_it_satisfies_the_pausable_scheduler_protocol_and_is_not_a_pytest_class() -> None:
    scheduler = TestScheduler()
    assert isinstance(scheduler, PausableScheduler)
    assert TestScheduler.__test__ is False


def test_time_is_integer_ticks_of_one_second_from_the_epoch_by_default() -> None:
    scheduler = TestScheduler()
    assert (scheduler.clock, scheduler.now, scheduler.tick) == (0, EPOCH, timedelta(seconds=1))
    scheduler.advance_to(90)
    assert scheduler.now == EPOCH + timedelta(seconds=90)
    assert scheduler.now.tzinfo is UTC


def test_a_custom_tick_and_epoch_round_durations_and_datetimes_up() -> None:
    epoch = datetime(2024, 1, 1, tzinfo=UTC)
    scheduler = TestScheduler(tick=timedelta(milliseconds=10), epoch=epoch)
    assert scheduler.to_ticks(timedelta(milliseconds=15)) == 2
    assert scheduler.to_ticks(timedelta(milliseconds=20)) == 2
    assert scheduler.to_ticks(epoch + timedelta(milliseconds=1)) == 1
    assert scheduler.to_datetime(3) == epoch + timedelta(milliseconds=30)
    assert scheduler.to_timedelta(4) == timedelta(milliseconds=40)
    log: list[tuple[int, str]] = []
    scheduler.schedule(_at(scheduler, log, "relative"), timedelta(milliseconds=15))
    scheduler.schedule(_at(scheduler, log, "absolute"), epoch + timedelta(milliseconds=31))
    scheduler.run()
    assert log == [(2, "relative"), (4, "absolute")]
    with pytest.raises(ValueError, match="tick"):
        TestScheduler(tick=timedelta(0))


def test_immediate_work_runs_one_tick_later_and_due_zero_runs_in_the_current_tick() -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(10)
    log: list[tuple[int, str]] = []
    scheduler.schedule(_at(scheduler, log, "immediate"))
    scheduler.schedule(_at(scheduler, log, "zero"), timedelta(0))
    scheduler.schedule(_at(scheduler, log, "negative"), timedelta(seconds=-3))
    scheduler.schedule(_at(scheduler, log, "past"), EPOCH)
    scheduler.schedule(_at(scheduler, log, "relative"), timedelta(seconds=5))
    scheduler.schedule(_at(scheduler, log, "absolute"), EPOCH + timedelta(seconds=12))
    scheduler.advance_to(10)
    assert log == [(10, "zero"), (10, "negative"), (10, "past")]
    scheduler.run()
    assert log[3:] == [(11, "immediate"), (12, "absolute"), (15, "relative")]


def test_at_equal_times_harness_runs_before_operator_tasks_before_item_processing_fifo_among_equals() -> None:
    scheduler = TestScheduler()
    log: list[str] = []
    queue: QueueProcessor[str] = QueueProcessor(log.append)
    queue.enqueue("item-processing")
    scheduler.schedule(ItemProcessingTask(queue), timedelta(seconds=5))  # priority 2
    scheduler.schedule(ActionTask(log.append, "operator-1"), timedelta(seconds=5))  # priority 1
    scheduler.schedule_absolute(5, log.append, "harness-1")  # priority 0
    scheduler.schedule(ActionTask(log.append, "operator-2"), timedelta(seconds=5))
    scheduler.schedule_absolute(5, log.append, "harness-2")
    scheduler.advance_to(5)
    assert log == ["harness-1", "harness-2", "operator-1", "operator-2", "item-processing"]


def test_harness_action_scheduled_during_a_tick_runs_before_operator_work_due_in_that_tick() -> None:
    scheduler = TestScheduler()
    log: list[str] = []

    def harness_step() -> None:
        log.append("harness")
        scheduler.schedule_relative(0, log.append, "harness-later-same-tick")

    scheduler.schedule(ActionTask(log.append, "operator"), timedelta(seconds=3))
    scheduler.schedule_absolute(3, harness_step)
    scheduler.advance_to(3)
    assert log == ["harness", "harness-later-same-tick", "operator"]


@given(
    st.lists(
        st.tuples(st.sampled_from(["now", "relative", "absolute", "harness"]), st.integers(0, 8), st.integers(0, 2)),
        min_size=1,
        max_size=40,
    )
)
def test_random_task_sets_run_in_tick_then_priority_then_arrival_order(
    specs: list[tuple[str, int, int]],
) -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(2)
    log: list[tuple[int, int]] = []
    expected: list[tuple[int, int, int]] = []
    for index, (kind, offset, priority) in enumerate(specs):
        task = ActionTask(lambda i=index: log.append((scheduler.clock, i)), priority=priority)
        if kind == "now":
            scheduler.schedule(task)
            tick = 3
        elif kind == "relative":
            scheduler.schedule(task, timedelta(seconds=offset))
            tick = 2 + offset
        elif kind == "absolute":
            scheduler.schedule(task, EPOCH + timedelta(seconds=offset))
            tick = max(2, offset)
        else:
            scheduler.schedule_absolute(offset, lambda i=index: log.append((scheduler.clock, i)), priority=priority)
            tick = max(2, offset)
        expected.append((tick, priority, index))
    scheduler.run()
    assert log == [(tick, index) for tick, _, index in sorted(expected)]


def test_advance_to_runs_what_is_due_and_sets_the_clock() -> None:
    scheduler = TestScheduler()
    log: list[tuple[int, str]] = []
    scheduler.schedule(_at(scheduler, log, "a"), timedelta(seconds=10))
    scheduler.schedule(_at(scheduler, log, "b"), timedelta(seconds=20))
    scheduler.advance_to(15)
    assert log == [(10, "a")] and scheduler.clock == 15
    scheduler.advance_by(5)
    assert log == [(10, "a"), (20, "b")] and scheduler.clock == 20
    scheduler.advance_by(timedelta(milliseconds=1))  # rounded up to one tick
    assert scheduler.clock == 21
    scheduler.advance_to(EPOCH + timedelta(seconds=30))
    assert scheduler.clock == 30
    with pytest.raises(ValueError, match="back"):
        scheduler.advance_to(29)
    with pytest.raises(ValueError, match="negative"):
        scheduler.advance_by(-1)


def test_run_leaves_the_clock_at_the_last_task_and_cannot_be_nested() -> None:
    scheduler = TestScheduler()
    errors: list[BaseException] = []

    def nested() -> None:
        try:
            scheduler.advance_by(1)
        except RuntimeError as error:
            errors.append(error)

    scheduler.schedule(ActionTask(nested), timedelta(seconds=7))
    scheduler.run()
    assert scheduler.clock == 7
    assert len(errors) == 1 and "inside a task" in str(errors[0])


def test_a_task_that_does_not_finish_runs_again_in_the_same_tick_behind_equal_work() -> None:
    scheduler = TestScheduler()
    log: list[tuple[int, str]] = []
    runs = [0]

    def periodic(token: YieldToken) -> bool:
        runs[0] += 1
        log.append((scheduler.clock, f"periodic{runs[0]}"))
        return runs[0] == 2

    scheduler.schedule(YieldableActionTask(periodic), timedelta(seconds=4))
    scheduler.schedule(_at(scheduler, log, "other"), timedelta(seconds=4))
    scheduler.run()
    assert log == [(4, "periodic1"), (4, "other"), (4, "periodic2")]


def test_a_task_that_is_not_runnable_is_parked_until_recalculate_priority() -> None:
    scheduler = TestScheduler()
    seen: list[tuple[int, int]] = []
    queue: QueueProcessor[int] = QueueProcessor(lambda item: seen.append((scheduler.clock, item)))
    scheduler.schedule(ItemProcessingTask(queue))
    scheduler.advance_to(5)
    assert scheduler.pending_count == 1 and scheduler.queue_length == 0  # parked, not queued
    queue.enqueue(1)
    scheduler.recalculate_priority()
    scheduler.advance_to(6)
    assert seen == [(5, 1)]  # woken at the current tick


def test_paused_work_waits_even_when_due_and_runs_at_the_current_tick_after_resume() -> None:
    scheduler = TestScheduler()
    child = scheduler.create_child()
    log: list[tuple[int, str]] = []
    child.schedule(_at(scheduler, log, "child"), timedelta(seconds=5))
    scheduler.schedule(_at(scheduler, log, "root"), timedelta(seconds=6))
    pause = scheduler.pause()
    assert pause.done() and scheduler.status is child.status is SchedulerStatus.PAUSED
    assert child.yield_token.is_yield_requested
    scheduler.advance_to(10)
    assert log == []
    scheduler.resume()
    assert not child.yield_token.is_yield_requested
    scheduler.advance_to(10)
    assert log == [(10, "child"), (10, "root")]


def test_resuming_a_child_keeps_it_paused_while_its_parent_is_paused() -> None:
    scheduler = TestScheduler()
    child = scheduler.create_child()
    scheduler.pause()
    child.pause()
    child.resume()
    assert child.status is SchedulerStatus.PAUSED  # the parent still holds it
    log: list[tuple[int, str]] = []
    child.schedule(_at(scheduler, log, "child"))
    scheduler.advance_to(3)
    assert log == []
    scheduler.resume()
    scheduler.advance_to(4)
    assert log == [(3, "child")]  # late work runs at the tick the scheduler resumed
    assert scheduler.create_child().status is SchedulerStatus.RUNNING


def test_a_child_paused_on_its_own_stays_paused_when_its_parent_resumes() -> None:
    scheduler = TestScheduler()
    child, other = scheduler.create_child(), scheduler.create_child()
    log: list[tuple[int, str]] = []
    child.schedule(_at(scheduler, log, "child"), timedelta(seconds=2))
    other.schedule(_at(scheduler, log, "other"), timedelta(seconds=2))
    child.pause()
    scheduler.pause()
    assert other.status is SchedulerStatus.PAUSED and other.yield_token.is_yield_requested
    scheduler.advance_to(5)
    scheduler.resume()  # lifts its own pause only
    assert child.status is SchedulerStatus.PAUSED and other.status is SchedulerStatus.RUNNING
    scheduler.advance_to(6)
    assert log == [(5, "other")]  # late work runs at the tick its scheduler resumed
    child.resume()
    scheduler.advance_to(7)
    assert log == [(5, "other"), (6, "child")]


def test_pause_from_inside_a_task_completes_when_the_task_returns() -> None:
    scheduler = TestScheduler()
    seen: list[bool] = []
    futures = []

    def pause_myself(token: YieldToken) -> bool:
        futures.append(scheduler.pause())
        seen.append(futures[0].done())
        seen.append(token.is_yield_requested)
        return True

    scheduler.schedule(YieldableActionTask(pause_myself))
    scheduler.run()
    assert seen == [False, True]
    assert futures[0].done() and scheduler.status is SchedulerStatus.PAUSED


def test_resume_cancels_a_pause_still_waiting_for_its_task() -> None:
    scheduler = TestScheduler()
    futures = []

    def pause_and_resume() -> None:
        futures.append(scheduler.pause())
        scheduler.resume()

    scheduler.schedule(ActionTask(pause_and_resume))
    scheduler.run()
    assert futures[0].cancelled()
    assert scheduler.status is SchedulerStatus.RUNNING


def test_pause_async_completes_in_asyncio() -> None:
    import asyncio

    scheduler = TestScheduler()

    async def main() -> None:
        await scheduler.pause_async()

    asyncio.run(main())
    assert scheduler.status is SchedulerStatus.PAUSED


def test_dispose_cascades_drops_work_and_ignores_later_schedules() -> None:
    scheduler = TestScheduler()
    child = scheduler.create_child()
    grandchild = child.create_child()
    log: list[tuple[int, str]] = []
    child.schedule(_at(scheduler, log, "child"), timedelta(seconds=3))
    grandchild.schedule(_at(scheduler, log, "grandchild"))
    scheduler.schedule(_at(scheduler, log, "root"), timedelta(seconds=4))
    child.dispose()
    child.dispose()
    child.schedule(_at(scheduler, log, "after"))
    assert child.status is grandchild.status is SchedulerStatus.DISPOSED
    assert child.create_child().status is SchedulerStatus.DISPOSED
    assert child.pause().done()
    scheduler.run()
    assert log == [(4, "root")]


def test_a_task_error_propagates_to_the_test_unless_a_handler_handles_it() -> None:
    scheduler = TestScheduler()
    child = scheduler.create_child()
    chain: list[str] = []
    child.unhandled_exception += lambda args: chain.append("child")
    scheduler.unhandled_exception += lambda args: chain.append("root")
    log: list[tuple[int, str]] = []

    def boom() -> None:
        raise KeyError("boom")

    child.schedule(ActionTask(boom), timedelta(seconds=2))
    child.schedule(_at(scheduler, log, "later"), timedelta(seconds=3))
    with pytest.raises(KeyError, match="boom"):
        scheduler.run()
    assert chain == ["child", "root"]
    assert scheduler.clock == 2
    scheduler.run()  # the failing task was dropped; the rest goes on
    assert log == [(3, "later")]

    def handle(args: UnhandledExceptionArgs) -> None:
        args.handled = True

    scheduler.unhandled_exception += handle
    child.schedule(ActionTask(boom))
    child.schedule(_at(scheduler, log, "after-handled"))
    scheduler.run()
    assert log[-1] == (4, "after-handled")


def test_check_access_is_true_on_the_test_thread_only() -> None:
    scheduler = TestScheduler()
    assert scheduler.check_access()
    scheduler.verify_access()
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(scheduler.check_access()))
    thread.start()
    thread.join()
    assert result == [False]


def test_an_operator_uses_the_scheduler_only_through_the_protocol() -> None:
    scheduler = TestScheduler()
    base: Scheduler = scheduler.create_context().scheduler
    log: list[tuple[datetime, str]] = []
    base.schedule(ActionTask(lambda: log.append((base.now, "timer"))), base.now + timedelta(seconds=30))
    scheduler.run()
    assert log == [(EPOCH + timedelta(seconds=30), "timer")]


def test_schedule_rejects_bad_arguments() -> None:
    scheduler = TestScheduler()
    with pytest.raises(TypeError):
        scheduler.schedule(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="due"):
        scheduler.schedule(ActionTask(print), 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="naive"):
        scheduler.schedule(ActionTask(print), datetime(2024, 1, 1))
