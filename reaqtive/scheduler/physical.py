"""The physical scheduler: a fixed pool of worker threads running the tasks of every logical scheduler on it.

One lock guards all queues, except the inbox: ``schedule`` of immediate work appends to a deque without taking
the lock (``deque.append`` is atomic), and a worker moves the inbox into the ready lanes under the lock. So
producer threads never convoy with the workers on the lock (each hand-over of a contended lock between threads
that also contend for the GIL costs context switches). Workers share one ready queue (one FIFO lane per
priority value, lowest value first: O(1) where a heap costs O(log n) tuple comparisons per task) and one
due-time queue (:class:`~reaqtive.scheduler.timers.DueQueue`). A worker takes the lock once per task: it
settles the task it just ran and takes the next one in the same critical section, then runs the task outside
the lock; when another thread holds the lock it yields the GIL rather than blocking (``_acquire_contended``).
The logical schedulers (:mod:`reaqtive.scheduler.logical`) share their bookkeeping (status, running count,
parked tasks) with this module through the internal contract in :mod:`reaqtive.scheduler._contract`: a
:class:`~reaqtive.scheduler._contract.TaskGroup` per logical scheduler, read and written under the same lock, and
the methods below marked "lock held". This module does not import the logical one.

Why a shared queue rather than per-worker queues as in the original: under the GIL only one worker runs Python
at a time, so a shared queue costs no parallelism, gives a global priority-then-FIFO order, and lets a pause
find every task of its subtree without asking each worker.

Pausing does not search the queue: a worker that takes a task of a pausing or paused scheduler parks it with
its scheduler instead of running it (``front=True``: it was at the head of its lane). ``resume`` puts those back
at the head of their lanes, and everything else that was parked (scheduled, come due or re-run while paused) at
the back, so each scheduler's tasks keep their FIFO order.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect
from collections import deque
from concurrent.futures import Future
from contextlib import suppress
from datetime import datetime
from queue import Empty, SimpleQueue
from time import sleep
from typing import Final

from reaqtive.scheduler._contract import (
    DONE,
    PARKED,
    QUEUED,
    RUNNING,
    TIMER,
    GroupOwner,
    LaneEntry,
    WorkItem,
    complete_futures,
)
from reaqtive.scheduler.clock import Clock, WallClock
from reaqtive.scheduler.status import Event, SchedulerStatus, UnhandledExceptionArgs
from reaqtive.scheduler.timers import DueQueue

__all__ = ["PhysicalScheduler"]

_LOG: Final = logging.getLogger("reaqtive.scheduler")

_CONTENDED_SPINS: Final = 50
"""GIL yields a worker tries before it blocks on a held lock (see ``_acquire_contended``)."""

_RUNNING_STATUS: Final = SchedulerStatus.RUNNING
_DISPOSED_STATUS: Final = SchedulerStatus.DISPOSED


class PhysicalScheduler:
    """A fixed pool of worker threads (default: one per CPU) shared by logical schedulers.

    >>> from reaqtive.scheduler import LogicalScheduler, ActionTask
    >>> with PhysicalScheduler(workers=2) as physical:
    ...     scheduler = LogicalScheduler(physical)
    ...     done = threading.Event()
    ...     scheduler.schedule(ActionTask(done.set))
    ...     done.wait(5)
    True

    ``dispose()`` (or leaving the ``with`` block) disposes every logical scheduler on it, lets running tasks
    finish, and joins the workers. Its ``unhandled_exception`` event is the last link of every logical
    scheduler's exception chain.
    """

    def __init__(self, workers: int | None = None, *, clock: Clock | None = None, name: str = "reaqtive") -> None:
        count = (os.cpu_count() or 1) if workers is None else workers
        if not isinstance(count, int) or count <= 0:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        self._lock = threading.Lock()
        self._inbox: deque[WorkItem] = deque()  # immediate work from schedule(), appended without the lock
        self._lanes: list[deque[LaneEntry]] = []  # ready lanes, by ascending priority
        self._lane_priorities: list[int] = []
        self._lane_of: dict[int, deque[LaneEntry]] = {}
        self._timers: DueQueue[datetime, WorkItem] = DueQueue()
        self._timer_count = 0  # len(self._timers), read on every take without a call
        # Idle workers wait on their own wake queue (a C-level SimpleQueue). A worker is in this list only while
        # it waits and nobody signalled it yet, so a burst of schedules signals each idle worker once.
        self._idle: list[SimpleQueue[None]] = []
        self._stopping = False
        self._roots: dict[GroupOwner, None] = {}
        self._clock: Clock = clock if clock is not None else WallClock()
        self._name = name
        self.unhandled_exception: Event[UnhandledExceptionArgs] = Event(f"{name}.unhandled_exception")
        self._clock.add_listener(self.wake)
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-worker-{index}", daemon=True) for index in range(count)
        ]
        for thread in self._threads:
            thread.start()
        self._thread_ids = frozenset(thread.ident for thread in self._threads)

    # -- public surface ----------------------------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        """Where ``now`` comes from."""
        return self._clock

    @property
    def lock(self) -> threading.Lock:
        """The lock that guards the queues and the :class:`~reaqtive.scheduler._contract.TaskGroup` of every logical
        scheduler on this one; the methods marked "lock held" need it."""
        return self._lock

    @property
    def now(self) -> datetime:
        """The clock's current time (aware, UTC)."""
        return self._clock.now()

    @property
    def worker_count(self) -> int:
        """How many worker threads run tasks."""
        return len(self._threads)

    @property
    def is_disposed(self) -> bool:
        """Whether :meth:`dispose` was called."""
        return self._stopping

    def check_access(self) -> bool:
        """Whether the caller runs on one of this scheduler's worker threads."""
        return threading.get_ident() in self._thread_ids

    def wake(self) -> None:
        """Make idle workers re-read the clock now (after a test moved a frozen or virtual clock)."""
        with self._lock:
            self.notify_all()

    def dispose(self) -> None:
        """Dispose every logical scheduler on this one, let running tasks finish, and join the workers.

        Idempotent. Called from a worker thread, it joins the other workers only.
        """
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            roots = list(self._roots)
        for root in roots:
            root.dispose()
        self.wake()
        self._clock.remove_listener(self.wake)
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:
                thread.join()

    def __enter__(self) -> PhysicalScheduler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        state = "disposed" if self._stopping else f"{len(self._threads)} workers"
        return f"<PhysicalScheduler {self._name!r} {state}>"

    # -- the contract with logical schedulers: queues and roots (callers hold the lock) -------------------------

    def attach(self, root: GroupOwner) -> bool:
        """Register a root logical scheduler, which :meth:`dispose` disposes; ``False`` once disposed. Lock held."""
        if self._stopping:
            return False
        self._roots[root] = None
        return True

    def detach(self, root: GroupOwner) -> None:
        """Forget a disposed root logical scheduler. Lock held."""
        self._roots.pop(root, None)

    def push(self, item: WorkItem) -> None:
        """Queue ``item`` at the back of its priority's lane."""
        entry = (item,)
        item.entry = entry
        item.state = QUEUED
        lane = self._lane_of.get(item.priority)
        if lane is None:
            lane = self._new_lane(item.priority)
        lane.append(entry)

    def push_front(self, item: WorkItem) -> None:
        """Queue ``item`` at the head of its priority's lane (where it was taken from)."""
        entry = (item,)
        item.entry = entry
        item.state = QUEUED
        item.front = False
        lane = self._lane_of.get(item.priority)
        if lane is None:
            lane = self._new_lane(item.priority)
        lane.appendleft(entry)

    def _new_lane(self, priority: int) -> deque[LaneEntry]:
        lane: deque[LaneEntry] = deque()
        index = bisect(self._lane_priorities, priority)
        self._lane_priorities.insert(index, priority)
        self._lanes.insert(index, lane)  # the same list object: workers iterate it under the lock
        self._lane_of[priority] = lane
        return lane

    def add_timer(self, due: datetime, item: WorkItem) -> bool:
        """Queue ``item`` until ``due``; ``True`` when it is now the earliest timer."""
        timers = self._timers
        item.state = TIMER
        item.entry = entry = timers.add(due, item.priority, item)
        self._timer_count += 1
        return timers.first() is entry

    def remove_timer(self, item: WorkItem) -> None:
        """Cancel a queued timer."""
        self._timers.remove(item.entry)  # type: ignore[arg-type]
        self._timer_count = len(self._timers)
        item.entry = None

    def submit(self, item: WorkItem) -> None:
        """Hand immediate work to the workers without taking the lock (called by ``LogicalScheduler.schedule``).

        The item's scheduler is checked when a worker takes it from the inbox: a paused scheduler's item is
        parked, a disposed one's dropped.
        """
        self._inbox.append(item)
        idle = self._idle
        if idle:
            try:  # noqa: SIM105  (a try is cheaper than contextlib.suppress on this path)
                idle.pop().put(None)
            except IndexError:
                pass  # another thread woke the last idle worker first

    def notify_one(self) -> None:
        """Wake one idle worker, if any is idle and not woken yet."""
        with suppress(IndexError):
            self._idle.pop().put(None)

    def notify_all(self) -> None:
        """Wake every idle worker."""
        idle = self._idle
        while idle:
            self.notify_one()

    # -- worker loop -------------------------------------------------------------------------------------------

    def _work(self) -> None:
        lock = self._lock
        wake: SimpleQueue[None] = SimpleQueue()
        item: WorkItem | None = None
        done = True
        acquire = lock.acquire
        while True:
            if not acquire(False):
                self._acquire_contended()
            try:
                if self._inbox:
                    self.drain_inbox()  # first: what was scheduled while a task ran is already waiting
                completed = self._settle(item, done) if item is not None else None
                # Complete finished pauses before taking more work: taking may wait for work indefinitely.
                item = None if completed else self._take(wake)
            finally:
                lock.release()
            if completed:
                complete_futures(completed)
                continue
            if item is None:
                return
            done = self._execute(item)

    def _acquire_contended(self) -> None:
        """Take the lock another thread holds, without blocking on it at first.

        A worker that blocked on the lock would be handed it while still waiting for the GIL, and from then on
        every hand-over between workers would cost context switches (a lock convoy: it halved throughput with
        two workers). The holder is usually in a short critical section, so yield the GIL to it (``sleep(0)``
        is a yield, not a wait for a result) and try again; block only if it holds the lock for long.
        """
        lock = self._lock
        for _ in range(_CONTENDED_SPINS):
            sleep(0)
            if lock.acquire(False):
                return
        lock.acquire()

    def _take(self, wake: SimpleQueue[None]) -> WorkItem | None:
        """The next task to run, waiting while there is none; ``None`` once stopping. Lock held."""
        lanes = self._lanes
        while not self._stopping:
            if self._inbox:
                self.drain_inbox()
            if self._timer_count:
                self._release_timers()
            for lane in lanes:
                while lane:
                    entry = lane.popleft()
                    item = entry[0]
                    if item.entry is not entry:
                        continue  # stale: re-prioritised or dropped
                    item.entry = None
                    group = item.group
                    if group.status is _RUNNING_STATUS:
                        item.state = RUNNING
                        group.running += 1
                        return item
                    item.state = PARKED  # pausing or paused: back to the head of the lane on resume()
                    item.front = True
                    group.parked[item] = None
            self._wait(wake)
        return None

    def drain_inbox(self) -> None:
        """Move submitted items to the ready lanes, in submission order. Lock held."""
        inbox = self._inbox
        while inbox:
            item = inbox.popleft()
            group = item.group
            if group.disposed:
                continue  # disposed after it was submitted
            group.items.add(item)
            if group.status is _RUNNING_STATUS:
                self.push(item)
            else:
                item.state = PARKED  # scheduled while pausing or paused: ready after resume()
                group.parked[item] = None

    def _wait(self, wake: SimpleQueue[None]) -> None:
        """Sleep until woken or until the next timer may be due. Lock held on entry and on return."""
        timeout = self._idle_timeout()
        idle = self._idle
        idle.append(wake)
        # Look at the inbox after joining the idle list: a submit() either saw us there (and wakes us) or put its
        # item in the inbox before this check (and we do not sleep). No wake-up is lost.
        if not self._inbox:
            self._lock.release()
            try:
                wake.get(timeout=timeout)
            except Empty:
                pass  # the next timer may be due
            finally:
                self._lock.acquire()
        with suppress(ValueError):  # not listed any more: someone woke us
            idle.remove(wake)  # still listed: timed out, or did not sleep
        # A wake token that arrives after we left the list only causes one spurious, harmless wake-up later.

    def _idle_timeout(self) -> float | None:
        first = self._timers.first_due()
        return None if first is None else self._clock.seconds_until(first)

    def _release_timers(self) -> None:
        """Move due timers to the ready lanes, in (due, priority, arrival) order. Lock held."""
        due = self._timers.pop_due(self._clock.now())
        self._timer_count -= len(due)
        for item in due:
            group = item.group
            if group.status is _RUNNING_STATUS:
                self.push(item)
            else:
                item.entry = None
                item.state = PARKED
                group.parked[item] = None

    def _execute(self, item: WorkItem) -> bool:
        """Run the task outside the lock; ``True`` when it is done (or failed)."""
        task = item.task
        group = item.group
        try:
            if not task.is_runnable:
                done = False
            elif item.yieldable:
                done = task.execute(group.owner, group.token)  # type: ignore[call-arg]
            else:
                done = task.execute(group.owner)
            if not done:
                task.recalculate_priority()
                item.priority = task.priority
                item.runnable = task.is_runnable
        except BaseException as error:  # the chain decides; a worker must survive any task
            self._on_task_error(item, error)
            return True
        return bool(done)

    def _settle(self, item: WorkItem, done: bool) -> list[Future[None]] | None:
        """Book the end of a run: drop, re-queue or park the item; release pause waiters. Lock held."""
        group = item.group
        group.running -= 1
        status = group.status
        if done or status is _DISPOSED_STATUS:
            item.state = DONE
            group.items.discard(item)
        elif status is _RUNNING_STATUS and (item.runnable or item.recheck):
            # A task that runs again goes behind the work already waiting. One that said "not runnable" but was
            # asked to recalculate while it ran (a producer fed its queue meanwhile) is queued to look again.
            item.recheck = False
            self.push(item)
        else:
            item.recheck = False
            item.state = PARKED
            group.parked[item] = None
        if group.running == 0 and group.waiters:
            return group.release_waiters()
        return None

    def _on_task_error(self, item: WorkItem, error: BaseException) -> None:
        """Raise ``unhandled_exception`` from the task's scheduler up to the root, then here; unhandled, log the
        error and fault the task's scheduler (other logical schedulers keep running)."""
        group = item.group
        scheduler = group.owner
        args = UnhandledExceptionArgs(scheduler, item.task, error)
        level: GroupOwner | None = scheduler
        while level is not None:
            level.unhandled_exception.emit(args)
            if args.handled:
                return
            level = level.parent
        self.unhandled_exception.emit(args)
        if args.handled:
            return
        _LOG.error(
            "unhandled exception in task %r on %r; the scheduler is faulted (disposed)",
            item.task,
            scheduler,
            exc_info=error,
        )
        group.fail(error)
