"""Logical schedulers: hierarchical task groups that pause, resume and dispose together over shared workers.

A query engine owns one root logical scheduler; each query (or operator group) may get a child. Pausing the
root quiesces everything below it, which is what makes a checkpoint consistent; disposing a child drops its
pending work only.

All bookkeeping happens under the physical scheduler's lock (see :mod:`reaqtive.scheduler.physical`). What the
physical scheduler reads and writes of a logical one (status, running count, pending and parked tasks, the pauses
waiting for it) lives in the scheduler's :class:`~reaqtive.scheduler._contract.TaskGroup`; that module states
the whole contract between the two. This module uses only the physical scheduler's public methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.core.scheduler_interface import NEVER, PausableScheduler, SchedulerTask, YieldToken, deadline
from reaqtive.scheduler._contract import (
    DONE,
    PARKED,
    QUEUED,
    RUNNING,
    TIMER,
    SchedulerNode,
    TaskGroup,
    WorkItem,
    complete_futures,
)
from reaqtive.scheduler.clock import to_utc
from reaqtive.scheduler.physical import PhysicalScheduler
from reaqtive.scheduler.status import Event, SchedulerStatus, UnhandledExceptionArgs
from reaqtive.scheduler.tasks import is_yieldable

__all__ = ["LogicalScheduler", "PauseAwaitable"]

_RUNNING: Final = SchedulerStatus.RUNNING
_PAUSING: Final = SchedulerStatus.PAUSING
_PAUSED: Final = SchedulerStatus.PAUSED
_DISPOSED: Final = SchedulerStatus.DISPOSED
_ZERO: Final = timedelta(0)

_names = itertools.count(1)


class _PauseWaiter:
    """A pause in progress (a :class:`~reaqtive.scheduler._contract.PendingPause`): completes when the last busy
    scheduler of the subtree has no running task."""

    __slots__ = ("busy", "cancelled", "future", "root")

    def __init__(self, root: LogicalScheduler, future: Future[None], busy: int) -> None:
        self.root = root
        self.future = future
        self.busy = busy
        self.cancelled = False

    def count_off(self) -> Future[None] | None:
        """A busy scheduler of the subtree has no running task any more: the future, when it was the last one."""
        if self.cancelled:
            return None
        self.busy -= 1
        if self.busy:
            return None
        root = self.root
        root._pauses.remove(self)
        _mark_paused(root._subtree())
        return self.future


class PauseAwaitable:
    """What ``pause_async()`` returns: ``await`` it in asyncio. The pause has already started when it is created,
    so creating it needs no running event loop."""

    __slots__ = ("_future",)

    def __init__(self, future: Future[None]) -> None:
        self._future = future

    def __await__(self) -> Generator[Any, None, None]:
        import asyncio  # only a caller that awaits needs asyncio

        return asyncio.wrap_future(self._future).__await__()


class LogicalScheduler(SchedulerNode["LogicalScheduler"], PausableScheduler):
    """A pausable group of tasks on a :class:`~reaqtive.scheduler.PhysicalScheduler`, with children.

    >>> import threading
    >>> from reaqtive.scheduler import ActionTask, PhysicalScheduler
    >>> with PhysicalScheduler(workers=1) as physical:
    ...     root = LogicalScheduler(physical)
    ...     query = root.create_child()
    ...     root.pause().result(5)          # nothing of root or query runs now
    ...     ran = threading.Event()
    ...     query.schedule(ActionTask(ran.set))
    ...     ran.is_set()
    ...     root.resume()                   # the task scheduled while paused runs now
    ...     ran.wait(5)
    False
    True

    Semantics (see ``docs/scheduler.md``):

    * **Order**: ready tasks run by priority (lower first), FIFO among equals; timers by (due, priority, arrival).
    * **Pause** sets the subtree to ``PAUSING`` at once: no new task of it starts and the yield token of its
      running yieldable tasks is raised. The future completes when no task of the subtree runs, and the subtree
      is then ``PAUSED``. Work scheduled while paused (or whose timer comes due) waits for :meth:`resume`.
    * **Resume** resumes this scheduler and its descendants, unless an ancestor is still paused (then they stay
      paused until the ancestor resumes). A pause still in progress on a resumed scheduler is cancelled.
    * **Dispose** cascades to children, drops queued and timed tasks, and ignores later ones; a running task
      finishes. A child created from a disposed scheduler is born disposed.
    * **Errors**: a task that raises is dropped; the error goes to ``unhandled_exception`` here, then on each
      ancestor, then on the physical scheduler, until a handler sets ``handled``. Unhandled, it is logged and
      this scheduler is *faulted*: disposed, with the error in :attr:`fault`.
    """

    def __init__(self, physical: PhysicalScheduler, *, name: str | None = None) -> None:
        if not isinstance(physical, PhysicalScheduler):
            raise TypeError(f"LogicalScheduler needs a PhysicalScheduler, got {type(physical).__name__}")
        self._setup(physical, None, name or f"scheduler-{next(_names)}")
        with self._lock:
            if not physical.attach(self):
                self._mark_disposed()

    def _setup(self, physical: PhysicalScheduler, parent: LogicalScheduler | None, name: str) -> None:
        self._physical = physical
        self._lock = physical.lock
        self._clock = physical.clock
        self._parent = parent
        self._name = name
        self._children: dict[LogicalScheduler, None] = {}
        self._pauses: list[_PauseWaiter] = []  # pauses of this scheduler still in progress
        self._own_paused = False
        self.unhandled_exception: Event[UnhandledExceptionArgs] = Event(f"{name}.unhandled_exception")
        self._group = TaskGroup(self)  # status, tasks and waiting pauses: shared with the physical scheduler

    # -- properties --------------------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The physical scheduler's clock (aware, UTC)."""
        return self._clock.now()

    @property
    def status(self) -> SchedulerStatus:
        """Running, pausing, paused or disposed."""
        return self._group.status

    @property
    def is_yield_requested(self) -> bool:
        """The yield-token source: true while pausing, paused or disposed."""
        return self._group.status is not _RUNNING

    @property
    def yield_token(self) -> YieldToken:
        """The token handed to this scheduler's yieldable tasks."""
        return self._group.token


    @property
    def physical(self) -> PhysicalScheduler:
        """The worker pool."""
        return self._physical


    @property
    def fault(self) -> BaseException | None:
        """The unhandled error that faulted (disposed) this scheduler, if any."""
        return self._group.fault

    @property
    def pending_count(self) -> int:
        """Tasks of this scheduler (not its children) not yet done: queued, timed, parked or running."""
        with self._lock:
            self._physical.drain_inbox()
            return len(self._group.items)

    @property
    def children(self) -> tuple[LogicalScheduler, ...]:
        """The live children."""
        with self._lock:
            return tuple(self._children)

    # -- scheduling --------------------------------------------------------------------------------------------

    def create_child(self, name: str | None = None) -> LogicalScheduler:
        """A child task group; it starts in this scheduler's status (a child of a paused scheduler is paused)."""
        child = LogicalScheduler.__new__(LogicalScheduler)
        with self._lock:
            child._setup(self._physical, self, name or f"{self._name}/{len(self._children) + 1}")
            if self._group.disposed:
                child._mark_disposed()
            else:
                child._group.status = self._group.status
                self._children[child] = None
        return child

    def schedule(self, task: SchedulerTask, due: timedelta | datetime | None = None) -> None:
        """Run ``task`` now, after a delay (``timedelta``) or at a time (aware ``datetime``).

        A delay of zero or less, or a time not after ``now``, means as soon as possible. A task due at or after
        :data:`~reaqtive.core.scheduler_interface.NEVER` (a delay past ``datetime.max``) never runs and is not queued.
        Ignored
        once disposed.
        """
        if task is None:
            raise TypeError("schedule: task must not be None")
        due_at = None if due is None else self._due_time(due)
        if due_at is not None and due_at >= NEVER:
            return  # due after the end of time (a delay past datetime.max): it never runs, so it is not queued
        group = self._group
        item = WorkItem(task, group, task.priority, is_yieldable(task))
        physical = self._physical
        if due_at is None:
            if not group.disposed:
                physical.submit(item)  # no lock: a worker files it (or parks or drops it) under the lock
            return
        with self._lock:
            if group.disposed:
                return
            group.items.add(item)
            if physical.add_timer(due_at, item):
                physical.notify_one()  # an idle worker must shorten its wait

    def _due_time(self, due: timedelta | datetime) -> datetime | None:
        """The absolute due time, or ``None`` for "now"."""
        if isinstance(due, timedelta):
            return None if due <= _ZERO else deadline(self._clock.now(), due)  # past datetime.max: NEVER
        if isinstance(due, datetime):
            when = to_utc(due)
            return None if when <= self._clock.now() else when
        raise TypeError(f"due must be None, a timedelta or a datetime, got {type(due).__name__}")

    def recalculate_priority(self) -> None:
        """Re-read priority and runnability of this scheduler's waiting tasks (not its children's).

        Parked tasks that became runnable are queued again: a producer calls this after feeding the queue of an
        :class:`~reaqtive.scheduler.ItemProcessingTask`. The tasks' own ``recalculate_priority`` runs on the
        calling thread, outside the scheduler's lock.
        """
        physical = self._physical
        group = self._group
        with self._lock:
            if group.disposed:
                return
            physical.drain_inbox()  # so that tasks scheduled a moment ago are recalculated too
            waiting = []
            for item in group.items:
                if item.state in (QUEUED, PARKED):
                    waiting.append((item, item.entry))
                elif item.state == RUNNING:
                    item.recheck = True  # it may be about to park itself on a stale "not runnable"
        updates = []
        for item, entry in waiting:
            task = item.task
            task.recalculate_priority()
            updates.append((item, entry, task.priority, task.is_runnable))
        with self._lock:
            woken = False
            for item, entry, priority, runnable in updates:
                if item.state == QUEUED and item.entry is entry:
                    if priority != item.priority:
                        item.priority = priority
                        physical.push(item)  # the old lane entry is now stale
                elif item.state == PARKED and runnable and group.status is _RUNNING and item in group.parked:
                    del group.parked[item]
                    item.priority = priority
                    physical.push(item)
                    woken = True
            if woken:
                physical.notify_all()

    # -- pause, resume, dispose --------------------------------------------------------------------------------

    def pause(self) -> Future[None]:
        """Pause this scheduler and its descendants; the future completes when none of their tasks runs.

        Done callbacks run on the thread that completes the pause (a worker, or this caller): keep them short.
        Waiting for the future from inside a task of the subtree deadlocks.
        """
        future: Future[None] = Future()
        with self._lock:
            if self._group.disposed:
                done = True
            else:
                self._own_paused = True
                nodes = self._subtree()
                busy = 0
                for node in nodes:
                    group = node._group
                    if group.status is _RUNNING:
                        group.status = _PAUSING
                    if group.running:
                        busy += 1
                done = busy == 0
                if done:
                    _mark_paused(nodes)
                else:
                    waiter = _PauseWaiter(self, future, busy)
                    self._pauses.append(waiter)
                    for node in nodes:
                        if node._group.running:
                            node._group.waiters.append(waiter)
        if done:
            complete_futures([future])
        return future

    def pause_async(self) -> PauseAwaitable:
        """:meth:`pause`, awaitable from asyncio (``await scheduler.pause_async()``). Pausing starts at once."""
        return PauseAwaitable(self.pause())

    def resume(self) -> None:
        """Resume this scheduler and its descendants (they stay paused while an ancestor is paused)."""
        cancelled: list[Future[None]] = []
        physical = self._physical
        with self._lock:
            if self._group.disposed:
                return
            nodes = self._subtree()
            for node in nodes:
                node._own_paused = False
            parent = self._parent
            if parent is not None and parent._group.status is not _RUNNING:
                return  # an ancestor still holds the subtree paused
            for node in nodes:
                group = node._group
                group.status = _RUNNING
                parked = group.parked
                if parked:
                    items = list(parked)
                    parked.clear()
                    for item in reversed(items):  # taken from the lane heads: back there, in order
                        if item.front:
                            physical.push_front(item)
                    for item in items:  # scheduled, come due or re-run while paused: ready from now on
                        if item.state == PARKED:
                            physical.push(item)
                for waiter in node._pauses:
                    waiter.cancelled = True
                    cancelled.append(waiter.future)
                node._pauses.clear()
            physical.notify_all()
        for future in cancelled:
            future.cancel()

    def dispose(self) -> None:
        """Dispose this scheduler and its descendants: drop their queued and timed tasks; ignore later ones.

        Running tasks finish. Idempotent.
        """
        physical = self._physical
        with self._lock:
            if self._group.disposed:
                return
            nodes = self._subtree()
            for node in nodes:
                group = node._group
                for item in group.items:
                    if item.state == TIMER:
                        physical.remove_timer(item)
                    if item.state != RUNNING:
                        item.state = DONE
                    item.entry = None
                group.items.clear()
                group.parked.clear()
                node._children.clear()
                node._mark_disposed()
            parent = self._parent
            if parent is None:
                physical.detach(self)
            else:
                parent._children.pop(self, None)

    def _mark_disposed(self) -> None:
        group = self._group
        group.disposed = True
        group.status = _DISPOSED

    # -- access ------------------------------------------------------------------------------------------------

    def check_access(self) -> bool:
        """Whether the caller runs on a worker thread of this scheduler's physical scheduler."""
        return self._physical.check_access()

    def verify_access(self) -> None:
        """Raise :class:`RuntimeError` unless :meth:`check_access` is true."""
        if not self._physical.check_access():
            raise RuntimeError(f"the calling thread does not have access to scheduler {self._name!r}")

    # -- helpers (lock held) -----------------------------------------------------------------------------------


    def __repr__(self) -> str:
        return f"<LogicalScheduler {self._name!r} {self._group.status.name.lower()}>"


def _mark_paused(nodes: list[LogicalScheduler]) -> None:
    for node in nodes:
        group = node._group
        if group.status is _PAUSING:
            group.status = _PAUSED
