"""The virtual-time scheduler: deterministic, single-threaded, in integer ticks.

The engine runs on it in event-time mode (its clock follows the events, so a replay after a crash sees the
same time as the original run); :class:`reaqtive.testing.TestScheduler` adds test helpers on top.

Time
    Virtual time is an integer number of *ticks* since ``epoch``; one tick lasts ``tick`` (default one second,
    so ``timedelta(seconds=50)`` is 50 ticks). ``now`` is ``epoch + clock * tick``. A delay or a datetime that
    does not fall on a tick boundary is rounded **up** to the next tick (a timer never fires early).

How ``schedule`` maps to ticks
    * ``schedule(task)`` (immediate): at ``clock + 1``. The bump keeps "immediate" work of an operator after
      the harness step that triggered it, as in the original (``Return`` emits at subscription time + 1).
    * ``schedule(task, due=timedelta)``: at ``clock + ceil(due / tick)``; zero or negative means the current
      tick (no bump), after what is already due now.
    * ``schedule(task, due=datetime)``: at ``ceil((due - epoch) / tick)``, or the current tick if that is past.
    * ``schedule_absolute(t, action)`` / ``schedule_relative(dt, action)``: harness actions (priority 0) at tick
      ``t`` (the current tick if ``t`` is past) or ``clock + dt``.
    * Virtual time ends at the last tick not after ``datetime.max`` (:data:`~reaqtive.scheduler_interface.NEVER`):
    a task
      due later (``timedelta.max`` from now, ``NEVER`` itself) never runs, so it is not queued at all (``run``
      does not jump to the end of time for it), and advancing past that tick is a :class:`ValueError`.

Order at equal times
    Work due at the same tick runs by priority, lower first: **0** host or test-harness actions (hot-source
    messages, ``start``'s create/subscribe/dispose, checkpoint steps), then **1** operator actions and timers,
    then **2** item processing; FIFO among equals (by the time ``schedule`` was called). A task that returns ``False``
    (run again) queues at the current tick behind work of the same priority.

Running
    Nothing runs until :meth:`advance_to`, :meth:`advance_by`, :meth:`run` or :meth:`start`. The clock jumps to
    each task's due time before it runs, and to the target time at the end of ``advance_to``.

Pause, resume, dispose, children
    As :class:`reaqtive.scheduler.LogicalScheduler`: children share the clock and the queue; a paused subtree's
    tasks wait (even if due) until ``resume``; ``pause()`` returns a completed future, unless it is called from
    inside a task of the subtree, when it completes as soon as that task returns.

Errors
    A task that raises is dropped and the error goes up the ``unhandled_exception`` chain (this scheduler, its
    ancestors). Unless a handler sets ``handled``, it propagates out of ``advance_to``/``run``/``start`` to the
    test.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from reaqtive.scheduler.clock import EPOCH, to_utc
from reaqtive.scheduler.logical import PauseAwaitable
from reaqtive.scheduler.status import Event, SchedulerStatus, UnhandledExceptionArgs
from reaqtive.scheduler.tasks import HARNESS_PRIORITY, ActionTask, is_yieldable
from reaqtive.scheduler.timers import TickQueue
from reaqtive.scheduler_interface import NEVER, PausableScheduler, SchedulerTask, YieldToken

__all__ = ["VirtualTimeScheduler"]

_RUNNING: Final = SchedulerStatus.RUNNING
_PAUSING: Final = SchedulerStatus.PAUSING
_PAUSED: Final = SchedulerStatus.PAUSED
_DISPOSED: Final = SchedulerStatus.DISPOSED

_QUEUED: Final = 0
_PARKED: Final = 2
_RUNNING_ITEM: Final = 3
_DONE: Final = 4

_ONE_TICK_DEFAULT: Final = timedelta(seconds=1)


class _Item:
    """A scheduled task: due tick, priority and its place in line (``arrival``) survive parking."""

    __slots__ = ("arrival", "due", "entry", "priority", "scheduler", "state", "task", "yieldable")

    def __init__(
        self, task: SchedulerTask, scheduler: VirtualTimeScheduler, due: int, priority: int, arrival: int
    ) -> None:
        self.task = task
        self.scheduler = scheduler
        self.due = due
        self.priority = priority
        self.arrival = arrival
        self.yieldable = is_yieldable(task)
        self.state = _DONE
        self.entry: Any = None


class Timeline(Protocol):
    """See :attr:`VirtualTimeScheduler.timeline`."""

    clock: int

    @property
    def queue(self) -> TickQueue[Any]: ...


class _Core:
    """What a root test scheduler and its children share: the clock and the queue."""

    __slots__ = ("clock", "end", "epoch", "in_loop", "owner", "pending_pauses", "queue", "running", "tick")

    def __init__(self, tick: timedelta, epoch: datetime) -> None:
        self.tick = tick
        self.epoch = epoch
        self.clock = 0
        self.end = (NEVER - epoch) // tick  # the last tick whose time is representable: later ones never come
        self.queue: TickQueue[_Item] = TickQueue()
        self.running: _Item | None = None
        self.in_loop = False
        self.owner = threading.get_ident()
        self.pending_pauses: list[tuple[VirtualTimeScheduler, Future[None]]] = []


_names = itertools.count(1)


class VirtualTimeScheduler(PausableScheduler):
    """A virtual-time scheduler for deterministic tests (see the module docstring for the rules).

    >>> from reaqtive.scheduler import ActionTask
    >>> scheduler = VirtualTimeScheduler()
    >>> seen = []
    >>> scheduler.schedule(ActionTask(lambda: seen.append(scheduler.clock)), timedelta(seconds=5))
    >>> scheduler.advance_to(10)
    >>> seen, scheduler.clock
    ([5], 10)
    """

    def __init__(self, tick: timedelta = _ONE_TICK_DEFAULT, *, epoch: datetime = EPOCH, name: str = "test") -> None:
        if not isinstance(tick, timedelta) or tick <= timedelta(0):
            raise ValueError(f"tick must be a positive timedelta, got {tick!r}")
        self._setup(_Core(tick, to_utc(epoch)), None, name)

    def _setup(self, core: _Core, parent: VirtualTimeScheduler | None, name: str) -> None:
        self._core = core
        self._parent = parent
        self._name = name
        self._children: dict[VirtualTimeScheduler, None] = {}
        self._items: set[_Item] = set()
        self._parked: dict[_Item, None] = {}
        self._own_paused = False
        self._status = _RUNNING
        self._disposed = False
        self._token = YieldToken(self)
        self.unhandled_exception: Event[UnhandledExceptionArgs] = Event(f"{name}.unhandled_exception")

    # -- time --------------------------------------------------------------------------------------------------

    @property
    def clock(self) -> int:
        """The current virtual time in ticks."""
        return self._core.clock

    @property
    def now(self) -> datetime:
        """``epoch + clock * tick`` (aware, UTC)."""
        core = self._core
        return core.epoch + core.tick * core.clock

    @property
    def tick(self) -> timedelta:
        """How long one tick lasts."""
        return self._core.tick

    @property
    def epoch(self) -> datetime:
        """The datetime of tick 0."""
        return self._core.epoch

    def to_ticks(self, value: timedelta | datetime) -> int:
        """A duration in ticks, or a datetime as an absolute tick; rounded up to a whole tick."""
        core = self._core
        if isinstance(value, datetime):
            value = to_utc(value) - core.epoch
        elif not isinstance(value, timedelta):
            raise TypeError(f"to_ticks needs a timedelta or a datetime, got {type(value).__name__}")
        whole, rest = divmod(value, core.tick)  # rounded up (not as -(-value // tick): -timedelta.max overflows)
        return whole + 1 if rest else whole

    def to_datetime(self, ticks: int) -> datetime:
        """The datetime of absolute tick ``ticks`` (:data:`~reaqtive.scheduler_interface.NEVER` past the end of
        time)."""
        core = self._core
        return NEVER if ticks > core.end else core.epoch + core.tick * ticks

    def to_timedelta(self, ticks: int) -> timedelta:
        """The duration of ``ticks`` ticks."""
        return self._core.tick * ticks

    # -- properties --------------------------------------------------------------------------------------------

    @property
    def status(self) -> SchedulerStatus:
        """Running, pausing, paused or disposed."""
        return self._status

    @property
    def is_yield_requested(self) -> bool:
        """The yield-token source: true unless running."""
        return self._status is not _RUNNING

    @property
    def yield_token(self) -> YieldToken:
        """The token handed to this scheduler's yieldable tasks."""
        return self._token

    @property
    def parent(self) -> VirtualTimeScheduler | None:
        """The parent, ``None`` for the root."""
        return self._parent

    @property
    def name(self) -> str:
        """For ``repr``."""
        return self._name

    @property
    def pending_count(self) -> int:
        """Tasks of this scheduler (not its children) not yet done."""
        return len(self._items)

    @property
    def queue_length(self) -> int:
        """Tasks queued across the whole tree (parked ones excluded)."""
        return len(self._core.queue)

    @property
    def next_due(self) -> int | None:
        """The tick of the earliest task queued across the whole tree (parked ones excluded), or ``None``: where
        a host that sleeps between batches must wake this clock next."""
        due: int | None = self._core.queue.first_due()
        return due

    @property
    def timeline(self) -> Timeline:
        """The clock and the due queue this scheduler tree shares, for a host's per-event delivery loop, which may
        set ``timeline.clock`` forward to tick ``t`` by assignment when ``timeline.queue.next_due > t`` (nothing
        would run on the way): a comparison and a store instead of a call to :meth:`advance_to` per event.
        Otherwise it must call :meth:`advance_to`."""
        return self._core

    # -- scheduling --------------------------------------------------------------------------------------------

    def create_child(self, name: str | None = None) -> VirtualTimeScheduler:
        """A child sharing this clock; it starts in this scheduler's status."""
        child = type(self).__new__(type(self))
        child._setup(self._core, self, name or f"{self._name}/{next(_names)}")
        if self._disposed:
            child._mark_disposed()
        else:
            child._status = self._status
            self._children[child] = None
        return child

    def schedule(self, task: SchedulerTask, due: timedelta | datetime | None = None) -> None:
        """Queue ``task``: immediate at ``clock + 1``; a delay or a time at its tick, rounded up (see module)."""
        if task is None:
            raise TypeError("schedule: task must not be None")
        core = self._core
        if due is None:
            tick = core.clock + 1
        elif isinstance(due, timedelta):
            tick = core.clock + max(0, self.to_ticks(due))
        elif isinstance(due, datetime):
            tick = max(core.clock, self.to_ticks(due))
        else:
            raise TypeError(f"due must be None, a timedelta or a datetime, got {type(due).__name__}")
        self._add(task, tick)

    def schedule_absolute(
        self, time: int, action: Callable[..., object], *args: Any, priority: int = HARNESS_PRIORITY
    ) -> None:
        """Run ``action(*args)`` at tick ``time`` (now if past), as a harness action (priority 0 by default)."""
        self._add(ActionTask(action, *args, priority=priority), max(int(time), self._core.clock))

    def schedule_relative(
        self, delay: int, action: Callable[..., object], *args: Any, priority: int = HARNESS_PRIORITY
    ) -> None:
        """Run ``action(*args)`` ``delay`` ticks from now (no bump), as a harness action by default."""
        self._add(ActionTask(action, *args, priority=priority), self._core.clock + max(0, int(delay)))

    def _add(self, task: SchedulerTask, tick: int) -> None:
        if self._disposed or tick > self._core.end:  # past the end of time: it never runs
            return
        core = self._core
        item = _Item(task, self, tick, task.priority, core.queue.next_arrival())
        self._items.add(item)
        self._enqueue(item)

    def _enqueue(self, item: _Item) -> None:
        item.state = _QUEUED
        item.entry = self._core.queue.add(item.due, item.priority, item, item.arrival)

    def recalculate_priority(self) -> None:
        """Re-read priority and runnability of this scheduler's waiting tasks; wake parked runnable ones."""
        if self._disposed:
            return
        queue = self._core.queue
        for item in [item for item in self._items if item.state in (_QUEUED, _PARKED)]:
            task = item.task
            task.recalculate_priority()
            priority = task.priority
            if item.state == _QUEUED and priority != item.priority:
                queue.remove(item.entry)
                item.priority = priority
                self._enqueue(item)
            elif item.state == _PARKED and self._status is _RUNNING and task.is_runnable:
                del self._parked[item]
                item.priority = priority
                item.due = max(item.due, self._core.clock)
                self._enqueue(item)

    # -- running -----------------------------------------------------------------------------------------------

    def advance_to(self, time: int | datetime) -> None:
        """Run everything due up to tick ``time`` (or a datetime, rounded up), then set the clock to it."""
        target = self.to_ticks(time) if isinstance(time, datetime) else int(time)
        core = self._core
        if target > core.end:
            raise ValueError(
                f"cannot advance to tick {target}: virtual time ends at tick {core.end} ({self.to_datetime(core.end)}, "
                "the last before datetime.max)"
            )
        if target < core.clock:
            raise ValueError(f"cannot advance back in time from tick {core.clock} to {target}")
        self._run(target)
        core.clock = target

    def advance_by(self, delta: int | timedelta) -> None:
        """Run everything due in the next ``delta`` ticks (or a duration, rounded up)."""
        ticks = self.to_ticks(delta) if isinstance(delta, timedelta) else int(delta)
        if ticks < 0:
            raise ValueError(f"cannot advance by a negative amount ({delta!r})")
        self.advance_to(self._core.clock + ticks)

    def run(self) -> None:
        """Run until no task is queued; the clock stays at the last task's tick. Work that reschedules itself
        forever makes this loop forever: use :meth:`advance_to` for it."""
        self._run(None)

    def _run(self, limit: int | None) -> None:
        core = self._core
        if core.in_loop:
            raise RuntimeError("advance_to/run cannot be called from inside a task of the test scheduler")
        core.in_loop = True
        try:
            queue = core.queue
            while queue:
                entry = queue.first()
                assert entry is not None
                if limit is not None and entry[0] > limit:
                    break
                queue.pop()
                item: _Item = entry[3]
                item.entry = None
                scheduler = item.scheduler
                if scheduler._status is not _RUNNING:
                    item.state = _PARKED
                    scheduler._parked[item] = None
                    continue
                core.clock = max(core.clock, item.due)
                scheduler._execute(item)
        finally:
            core.in_loop = False

    def _execute(self, item: _Item) -> None:
        core = self._core
        task = item.task
        item.state = _RUNNING_ITEM
        core.running = item
        runnable = True
        try:
            if not task.is_runnable:
                done = False
            elif item.yieldable:
                done = task.execute(self, self._token)  # type: ignore[call-arg]
            else:
                done = task.execute(self)
            if not done:
                task.recalculate_priority()
                item.priority = task.priority
                runnable = task.is_runnable
        except BaseException as error:
            self._settle(item, True, False)
            self._on_error(item, error)
            return
        self._settle(item, bool(done), runnable)

    def _settle(self, item: _Item, done: bool, runnable: bool) -> None:
        core = self._core
        core.running = None
        if done or self._disposed:
            item.state = _DONE
            self._items.discard(item)
        elif self._status is _RUNNING and runnable:
            item.due = core.clock
            item.arrival = core.queue.next_arrival()
            self._enqueue(item)
        else:
            item.state = _PARKED
            self._parked[item] = None
        if core.pending_pauses:
            pauses, core.pending_pauses = core.pending_pauses, []
            for root, future in pauses:
                _mark_paused(root._subtree())
                future.set_result(None)

    def _on_error(self, item: _Item, error: BaseException) -> None:
        args = UnhandledExceptionArgs(self, item.task, error)
        level: VirtualTimeScheduler | None = self
        while level is not None:
            level.unhandled_exception.emit(args)
            if args.handled:
                return
            level = level._parent
        raise error

    # -- pause, resume, dispose --------------------------------------------------------------------------------

    def pause(self) -> Future[None]:
        """Pause this scheduler and its children; the future is complete unless a task of the subtree is
        running (a task pausing its own scheduler), and then completes when that task returns."""
        future: Future[None] = Future()
        if self._disposed:
            future.set_result(None)
            return future
        self._own_paused = True
        nodes = self._subtree()
        for node in nodes:
            if node._status is _RUNNING:
                node._status = _PAUSING
        running = self._core.running
        if running is not None and running.scheduler in nodes:
            self._core.pending_pauses.append((self, future))
        else:
            _mark_paused(nodes)
            future.set_result(None)
        return future

    def pause_async(self) -> PauseAwaitable:
        """:meth:`pause`, awaitable from asyncio."""
        return PauseAwaitable(self.pause())

    def resume(self) -> None:
        """Resume this scheduler and its children (unless an ancestor is still paused)."""
        if self._disposed:
            return
        nodes = self._subtree()
        for node in nodes:
            node._own_paused = False
        parent = self._parent
        if parent is not None and parent._status is not _RUNNING:
            return
        core = self._core
        for node in nodes:
            node._status = _RUNNING
            for item in node._parked:
                item.due = max(item.due, core.clock)
                node._enqueue(item)
            node._parked.clear()
        pending = [(root, future) for root, future in core.pending_pauses if root in nodes]
        if pending:
            core.pending_pauses = [entry for entry in core.pending_pauses if entry not in pending]
            for _, future in pending:
                future.cancel()

    def dispose(self) -> None:
        """Dispose this scheduler and its children: drop their tasks and ignore later ones. Idempotent."""
        if self._disposed:
            return
        queue = self._core.queue
        for node in self._subtree():
            for item in node._items:
                if item.state == _QUEUED:
                    queue.remove(item.entry)
                item.entry = None
                if item.state != _RUNNING_ITEM:
                    item.state = _DONE
            node._items.clear()
            node._parked.clear()
            node._children.clear()
            node._mark_disposed()
        if self._parent is not None:
            self._parent._children.pop(self, None)

    def _mark_disposed(self) -> None:
        self._disposed = True
        self._status = _DISPOSED

    def _subtree(self) -> list[VirtualTimeScheduler]:
        nodes: list[VirtualTimeScheduler] = []
        stack = [self]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node._children)
        return nodes

    # -- access ------------------------------------------------------------------------------------------------

    def check_access(self) -> bool:
        """Whether the caller runs on the thread that created the scheduler (tests are single-threaded)."""
        return threading.get_ident() == self._core.owner

    def verify_access(self) -> None:
        """Raise :class:`RuntimeError` unless :meth:`check_access` is true."""
        if not self.check_access():
            raise RuntimeError(f"the calling thread does not have access to test scheduler {self._name!r}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} clock={self._core.clock} {self._status.name.lower()}>"


def _mark_paused(nodes: list[VirtualTimeScheduler]) -> None:
    for node in nodes:
        if node._status is _PAUSING:
            node._status = _PAUSED
