"""Fixtures and helpers for the threaded scheduler tests: wait on events and futures, never sleep."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from reaqtive.scheduler import ActionTask, LogicalScheduler, PhysicalScheduler

WAIT = 10.0
"""Seconds to wait for something that should happen at once; only a broken scheduler waits that long."""


@pytest.fixture
def physical() -> Iterator[PhysicalScheduler]:
    """Two workers (the machine's core count)."""
    with PhysicalScheduler(workers=2, name="test") as scheduler:
        yield scheduler


@pytest.fixture
def physical1() -> Iterator[PhysicalScheduler]:
    """One worker: tasks run one at a time, in queue order."""
    with PhysicalScheduler(workers=1, name="test1") as scheduler:
        yield scheduler


def barrier(scheduler: LogicalScheduler, priority: int = 99) -> None:
    """Schedule a task behind everything queued now (a high priority value runs last) and wait for it."""
    done = threading.Event()
    scheduler.schedule(ActionTask(done.set, priority=priority))
    assert done.wait(WAIT), f"{scheduler!r} did not run a barrier task"


def run_on(scheduler: LogicalScheduler, action: Callable[[], object]) -> object:
    """Run ``action`` as a task and return its result (re-raising its exception)."""
    result: list[object] = []
    error: list[BaseException] = []
    done = threading.Event()

    def task() -> None:
        try:
            result.append(action())
        except BaseException as exc:
            error.append(exc)
        finally:
            done.set()

    scheduler.schedule(ActionTask(task))
    assert done.wait(WAIT)
    if error:
        raise error[0]
    return result[0]
