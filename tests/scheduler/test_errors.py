"""Exceptions in tasks: the unhandled-exception chain, handled errors, and faulting."""

from __future__ import annotations

import logging
import threading

import pytest

from reaqtive.scheduler import (
    ActionTask,
    LogicalScheduler,
    PhysicalScheduler,
    SchedulerStatus,
    UnhandledExceptionArgs,
)

from .conftest import barrier


class BoomError(Exception):
    pass


def _raise(error: BaseException) -> None:
    raise error


def _recorder(log: list[tuple[str, UnhandledExceptionArgs]], name: str, handle: bool = False):  # type: ignore[no-untyped-def]
    def handler(args: UnhandledExceptionArgs) -> None:
        log.append((name, args))
        if handle:
            args.handled = True

    return handler


def test_the_chain_runs_child_to_root_to_physical(physical1: PhysicalScheduler) -> None:
    root = LogicalScheduler(physical1)
    c1 = root.create_child()
    c2 = c1.create_child()
    log: list[tuple[str, UnhandledExceptionArgs]] = []
    c2.unhandled_exception += _recorder(log, "c2")
    c1.unhandled_exception += _recorder(log, "c1")
    root.unhandled_exception += _recorder(log, "root")
    physical1.unhandled_exception += _recorder(log, "physical", handle=True)
    error = BoomError("x")
    c2.schedule(ActionTask(_raise, error))
    barrier(root)
    assert [name for name, _ in log] == ["c2", "c1", "root", "physical"]
    assert all(args.scheduler is c2 and args.exception is error for _, args in log)
    assert c2.status is SchedulerStatus.RUNNING and c2.fault is None  # handled: not faulted


def test_the_chain_stops_at_the_first_handler_that_handles(physical1: PhysicalScheduler) -> None:
    root = LogicalScheduler(physical1)
    child = root.create_child()
    log: list[tuple[str, UnhandledExceptionArgs]] = []
    child.unhandled_exception += _recorder(log, "child")
    root.unhandled_exception += _recorder(log, "root", handle=True)
    physical1.unhandled_exception += _recorder(log, "physical")
    child.schedule(ActionTask(_raise, BoomError()))
    barrier(root)
    assert [name for name, _ in log] == ["child", "root"]


def test_a_handled_error_drops_the_task_and_the_scheduler_goes_on(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    scheduler.unhandled_exception += lambda args: setattr(args, "handled", True)
    ran: list[int] = []
    scheduler.schedule(ActionTask(_raise, BoomError()))
    scheduler.schedule(ActionTask(ran.append, 1))
    scheduler.schedule(ActionTask(_raise, BoomError()))
    scheduler.schedule(ActionTask(ran.append, 2))
    barrier(scheduler)
    assert ran == [1, 2]
    assert scheduler.status is SchedulerStatus.RUNNING
    assert scheduler.pending_count == 0


def test_an_unhandled_error_is_logged_and_faults_only_its_scheduler(
    physical1: PhysicalScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    parent = LogicalScheduler(physical1)
    failing = parent.create_child()
    below = failing.create_child()
    other = LogicalScheduler(physical1)
    error = BoomError("unhandled")
    dropped = threading.Event()
    with caplog.at_level(logging.ERROR, logger="reaqtive.scheduler"):
        failing.schedule(ActionTask(_raise, error))
        failing.schedule(ActionTask(dropped.set))
        barrier(other)  # one worker: the failure was handled before this ran
    assert any(record.exc_info and record.exc_info[1] is error for record in caplog.records)
    assert failing.fault is error
    assert failing.status is below.status is SchedulerStatus.DISPOSED
    assert not dropped.is_set()
    assert parent.status is SchedulerStatus.RUNNING
    barrier(parent)
    barrier(other)  # other logical schedulers on the same worker keep running


def test_a_handler_that_raises_is_logged_and_the_chain_goes_on(
    physical1: PhysicalScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = LogicalScheduler(physical1)
    scheduler.unhandled_exception += lambda args: _raise(RuntimeError("handler bug"))
    handled: list[BaseException] = []

    def handle(args: UnhandledExceptionArgs) -> None:
        handled.append(args.exception)
        args.handled = True

    physical1.unhandled_exception += handle
    with caplog.at_level(logging.ERROR, logger="reaqtive.scheduler"):
        scheduler.schedule(ActionTask(_raise, BoomError()))
        barrier(scheduler)
    assert len(handled) == 1
    assert any("handler" in record.getMessage() for record in caplog.records)
    assert scheduler.status is SchedulerStatus.RUNNING


def test_handlers_can_be_removed(physical1: PhysicalScheduler) -> None:
    scheduler = LogicalScheduler(physical1)
    calls: list[str] = []

    def first(args: UnhandledExceptionArgs) -> None:
        calls.append("first")
        args.handled = True

    scheduler.unhandled_exception += first
    scheduler.unhandled_exception -= first
    physical1.unhandled_exception += lambda args: setattr(args, "handled", True)
    scheduler.schedule(ActionTask(_raise, BoomError()))
    barrier(scheduler)
    assert calls == []
    assert len(scheduler.unhandled_exception) == 0
