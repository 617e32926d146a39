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
    * Virtual time ends at the last tick not after ``datetime.max`` (:data:`~reaqtive.core.scheduler_interface.NEVER`):
    a task
      due later (``timedelta.max`` from now, ``NEVER`` itself) never runs, so it is not queued at all (``run``
      does not jump to the end of time for it), and advancing past that tick is a :class:`ValueError`.

Order at equal times
    Work due at the same tick runs by priority, lower first: **0** host or test-harness actions (hot-source
    messages, ``start``'s create/subscribe/dispose, checkpoint steps), then **1** operator actions and timers,
    then **2** item processing; FIFO among equals (by the tick a task was armed at, then by the time ``schedule``
    was called in it: its *number*, told to the task as ``task.arrival`` and taken back from a recovered one, see
    :func:`_arrival` and :func:`_given_back`). A task that returns ``False``
    (run again) queues at the current tick behind work of the same priority, or, if it called
    :meth:`~VirtualTimeScheduler.run_again_at_us`, at that time, in line as if scheduled then.

Running
    Nothing runs until :meth:`advance_to`, :meth:`advance_by`, :meth:`run` or :meth:`start`. The clock jumps to
    each task's due time before it runs, and to the target time at the end of ``advance_to``.

Pause, resume, dispose, children
    As :class:`reaqtive.scheduler.LogicalScheduler`: children share the clock and the queue; a paused subtree's
    tasks wait (even if due) until ``resume``; ``pause()`` returns a completed future, unless it is called from
    inside a task of the subtree, when it completes as soon as that task returns. Unlike it, a pause is kept where
    it was asked for (O(1) with any number of descendants: a descendant is held while an ancestor is paused) and
    ``resume()`` lifts that pause only: a descendant paused on its own stays paused.

A timeline of its own
    ``child.detach(clock=None)`` gives a child and its descendants a clock and a queue of their own (their tasks
    leave the shared queue in their order); they run only when the child is advanced itself, and the shared
    clock's advances skip them. ``child.attach()`` puts them back in the shared queue (advance the child to the
    shared clock first). Pauses of an ancestor still hold a detached child. The engine lets a query that fell
    behind catch up through its log this way, on its own clock.

Priorities of schedulers
    ``create_child(priority=p)`` (or the ``priority`` property): a child's work goes before the work of children
    with a higher number due at the same tick; within one priority, tasks keep their own order.

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
from typing import Any, Final, Protocol, TypeGuard

from reaqtive.core.scheduler_interface import NEVER, PausableScheduler, SchedulerTask, YieldToken
from reaqtive.scheduler._contract import SchedulerNode
from reaqtive.scheduler.clock import EPOCH, to_utc
from reaqtive.scheduler.logical import PauseAwaitable
from reaqtive.scheduler.status import Event, SchedulerStatus, UnhandledExceptionArgs
from reaqtive.scheduler.tasks import HARNESS_PRIORITY, TOLD, YIELDABLE, ActionTask, task_kind
from reaqtive.scheduler.timers import TickQueue

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
_MICROSECOND: Final = timedelta(microseconds=1)
_PRIORITY_STRIDE: Final = 8  # more than any task priority: a scheduler's priority orders before its tasks' own
MAX_PRIORITY: Final = 1_000_000  # scheduler priorities run from -MAX_PRIORITY to MAX_PRIORITY


def is_priority(value: object) -> TypeGuard[int]:
    """Whether ``value`` can be a scheduler's priority: a whole number from -MAX_PRIORITY to MAX_PRIORITY."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_PRIORITY <= value <= MAX_PRIORITY


def _check_priority(value: object) -> None:
    if not is_priority(value):
        raise ValueError(f"a scheduler priority must be a whole number from {-MAX_PRIORITY} to {MAX_PRIORITY}, "
                         f"got {value!r}")


_ARRIVALS_PER_TICK: Final = 1 << 32
_ARRIVAL_MASK: Final = _ARRIVALS_PER_TICK - 1
_DRAWS: Final = 1 << 32  # the lowest part of an arrival: a fresh draw of the queue's counter, unique per queue
_TICK_WEIGHT: Final = _ARRIVALS_PER_TICK * _DRAWS  # an arrival is armed tick * this + number * _DRAWS + draw


def _draw(core: _Core) -> tuple[int, int]:
    """A fresh draw of the queue's counter and the number it gives a task armed now: its place among the tasks
    armed in the clock's tick, counted from the tick's first draw. Counted within the tick, not over the queue's
    life, the number follows from what happened in that tick alone: a saved state does not depend on how many
    tasks came before (messages a test harness scheduled up front, another query's timers), so a run and a run
    that skipped failing elements earlier save the same bytes."""
    draw = core.queue.next_arrival()
    if core.number_tick != core.clock:
        core.number_tick = core.clock
        core.number_base = draw
    return draw, (draw - core.number_base) & _ARRIVAL_MASK


def _arrival(core: _Core, armed: int) -> int:
    """A task's place in line among the tasks due with it at one priority: first by the tick it was armed at, then
    in the order it came (its *number*, the queue's counter masked to 32 bits: compared only among the tasks of
    one armed tick, so a wrap past 2**32 matters only within a tick), then by the draw that makes it unique (the
    number itself, here). In a run that never stopped that is the order tasks came; a recovered operator that
    re-arms a timer at load passes when it was first armed (``task.armed``), and it goes back in line where it
    stood, not after every timer of the instant that recovery re-armed before it (and with its number,
    ``task.arrival``, exactly where it stood: :func:`_given_back`)."""
    draw, number = _draw(core)
    return armed * _TICK_WEIGHT + number * _DRAWS + (draw & _ARRIVAL_MASK)


def _given_back(core: _Core, armed: int, number: int) -> int:
    """The place of a recovered task armed at tick ``armed`` (at or before the clock) with ``number``, as the
    scheduler told it when it was first queued. The counter is raised above ``number`` when it was armed in the
    current tick, so that what is armed after it in this tick still comes after it; a fresh draw keeps the
    arrival unique where another task has the same tick and number (one queued before the restart, by a process
    whose counter started elsewhere)."""
    draw, now = _draw(core)
    if armed == core.clock and now <= number < _ARRIVAL_MASK:
        core.queue.restart_arrivals(core.number_base + number + 1)
    return (armed * _ARRIVALS_PER_TICK + number) * _DRAWS + (draw & _ARRIVAL_MASK)


def _number(arrival: int) -> int:
    """The number (the place in its armed tick) of an arrival, as a task is told it."""
    return (arrival // _DRAWS) & _ARRIVAL_MASK


class _Item:
    """A scheduled task: due tick, priority and its place in line (``arrival``) survive parking."""

    __slots__ = ("arrival", "due", "entry", "priority", "scheduler", "state", "task", "told", "yieldable")

    def __init__(
        self, task: SchedulerTask, scheduler: VirtualTimeScheduler, due: int, priority: int, arrival: int
    ) -> None:
        self.task = task
        self.scheduler = scheduler
        self.due = due
        self.priority = priority
        self.arrival = arrival
        kind = task_kind(task)
        self.yieldable = kind & YIELDABLE != 0
        self.told = kind & TOLD != 0  # whether the task has a slot to be told its place (task.arrival)
        self.state = _DONE
        self.entry: Any = None


class Timeline(Protocol):
    """See :attr:`VirtualTimeScheduler.timeline`."""

    clock: int

    @property
    def queue(self) -> TickQueue[Any]: ...


class _Core:
    """What a root test scheduler and its children share: the clock and the queue."""

    __slots__ = ("again", "clock", "detached", "end", "epoch", "epoch_us", "in_loop", "number_base", "number_tick",
                 "owner", "parked_nodes", "pending_pauses", "queue", "running", "tick", "tick_us", "yield_source")

    def __init__(self, tick: timedelta, epoch: datetime) -> None:
        self.tick = tick
        self.epoch = epoch
        self.clock = 0
        self.end = (NEVER - epoch) // tick  # the last tick whose time is representable: later ones never come
        self.epoch_us = (epoch - EPOCH) // _MICROSECOND  # (timedeltas are whole microseconds: exact)
        self.tick_us = tick // _MICROSECOND
        self.again: int | None = None  # the tick the running task asked to run again at (run_again_at_us)
        self.queue: TickQueue[_Item] = TickQueue()
        self.running: _Item | None = None
        self.in_loop = False
        self.owner = threading.get_ident()
        self.pending_pauses: list[tuple[VirtualTimeScheduler, Future[None]]] = []
        # The schedulers holding parked tasks: a resume looks only at these, not at every descendant.
        self.parked_nodes: dict[VirtualTimeScheduler, None] = {}
        self.yield_source: Callable[[], bool] | None = None
        # Children on a timeline of their own (see VirtualTimeScheduler.detach) whose parent is on this one: a
        # resume here releases their parked work too.
        self.detached: dict[VirtualTimeScheduler, None] = {}
        # A task's number counts from the first draw of its tick (see _draw): the tick and that draw.
        self.number_tick = -1
        self.number_base = 0


_names = itertools.count(1)
_NO_ENTRIES: Final[dict[Any, None]] = {}  # never added to (see VirtualTimeScheduler._setup)


class VirtualTimeScheduler(SchedulerNode["VirtualTimeScheduler"], PausableScheduler):
    """A virtual-time scheduler for deterministic tests (see the module docstring for the rules).

    >>> from reaqtive.scheduler import ActionTask
    >>> scheduler = VirtualTimeScheduler()
    >>> seen = []
    >>> scheduler.schedule(ActionTask(lambda: seen.append(scheduler.clock)), timedelta(seconds=5))
    >>> scheduler.advance_to(10)
    >>> seen, scheduler.clock
    ([5], 10)
    """

    # Slots, and the token and the error event made when first asked for: the engine keeps one child per query.
    __slots__ = ("_children", "_core", "_disposed", "_items", "_name", "_own_paused", "_parent", "_parked",
                 "_priority", "_rank", "_status", "_token", "_unhandled")

    def __init__(self, tick: timedelta = _ONE_TICK_DEFAULT, *, epoch: datetime = EPOCH, name: str = "test") -> None:
        if not isinstance(tick, timedelta) or tick <= timedelta(0):
            raise ValueError(f"tick must be a positive timedelta, got {tick!r}")
        self._setup(_Core(tick, to_utc(epoch)), None, name)

    def _setup(self, core: _Core, parent: VirtualTimeScheduler | None, name: str, priority: int = 0) -> None:
        self._core = core
        self._parent = parent
        self._name = name
        self._priority = priority
        self._rank = priority * _PRIORITY_STRIDE  # added to its tasks' own priorities in the queue
        # Shared empty until the first child or parked task (most of the engine's children never have either);
        # only the two methods that add to them replace it.
        self._children: dict[VirtualTimeScheduler, None] = _NO_ENTRIES
        self._items: dict[_Item, None] = {}
        self._parked: dict[_Item, None] = _NO_ENTRIES
        self._own_paused = False
        self._status = _RUNNING
        self._disposed = False
        self._token: YieldToken | None = None
        self._unhandled: Event[UnhandledExceptionArgs] | None = None

    @property
    def unhandled_exception(self) -> Event[UnhandledExceptionArgs]:
        """Raised with the error of a task of this scheduler or of a descendant (see the module)."""
        event = self._unhandled
        if event is None:
            event = self._unhandled = Event(f"{self._name}.unhandled_exception")
        return event

    @unhandled_exception.setter
    def unhandled_exception(self, event: Event[UnhandledExceptionArgs]) -> None:
        self._unhandled = event  # for ``scheduler.unhandled_exception += handler``

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
    def now_us(self) -> int:
        """:attr:`now` in microseconds from the Unix epoch, in integer arithmetic (no datetime made)."""
        core = self._core
        return core.epoch_us + core.tick_us * core.clock

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
        """The datetime of absolute tick ``ticks`` (:data:`~reaqtive.core.scheduler_interface.NEVER` past the end of
        time)."""
        core = self._core
        return NEVER if ticks > core.end else core.epoch + core.tick * ticks

    def to_timedelta(self, ticks: int) -> timedelta:
        """The duration of ``ticks`` ticks."""
        return self._core.tick * ticks

    # -- properties --------------------------------------------------------------------------------------------

    @property
    def status(self) -> SchedulerStatus:
        """Running, pausing, paused or disposed: its own status, or an ancestor's pause that holds it."""
        status = self._status
        node = self._parent
        while node is not None and status is not _DISPOSED:
            status = max(status, node._status)
            node = node._parent
        return status

    @property
    def is_yield_requested(self) -> bool:
        """The yield-token source: true while this scheduler or an ancestor is paused, or while the tree's
        :attr:`yield_source` asks for a yield."""
        if self._held():
            return True
        source = self._core.yield_source
        return source is not None and source()

    @property
    def yield_source(self) -> Callable[[], bool] | None:
        """A function the yield tokens of the whole tree also ask (``None``: none): a host that runs this
        scheduler on one thread and wants to let another thread in (the engine: a checkpoint waiting for its lock)
        makes it return true; a yieldable task then gives way, and ``advance_to(..., yielding=True)`` stops there.
        Set on any scheduler of the tree, it applies to all of them."""
        return self._core.yield_source

    @yield_source.setter
    def yield_source(self, source: Callable[[], bool] | None) -> None:
        self._core.yield_source = source

    def _held(self) -> bool:
        """Whether this scheduler or an ancestor is not running (a pause is kept where it was asked for, so that
        pausing a scheduler with many descendants costs nothing per descendant)."""
        node: VirtualTimeScheduler | None = self
        while node is not None:
            if node._status is not _RUNNING:
                return True
            node = node._parent
        return False

    def _is_within(self, ancestor: VirtualTimeScheduler) -> bool:
        """Whether ``ancestor`` is this scheduler or one of its ancestors."""
        node: VirtualTimeScheduler | None = self
        while node is not None:
            if node is ancestor:
                return True
            node = node._parent
        return False

    @property
    def yield_token(self) -> YieldToken:
        """The token handed to this scheduler's yieldable tasks."""
        token = self._token
        if token is None:
            token = self._token = YieldToken(self)
        return token



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

    def create_child(self, name: str | None = None, *, priority: int | None = None) -> VirtualTimeScheduler:
        """A child sharing this clock; it starts in this scheduler's status. ``priority`` (default: this
        scheduler's): see :attr:`priority`."""
        if priority is None:
            priority = self._priority
        _check_priority(priority)
        child = type(self).__new__(type(self))
        child._setup(self._core, self, name or f"{self._name}/{next(_names)}", priority)
        if self._disposed:
            child._mark_disposed()
        else:
            if self._children is _NO_ENTRIES:
                self._children = {}
            self._children[child] = None  # a pause of this scheduler holds it from birth (see _held)
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

    def run_again_at_us(self, due_us: int) -> bool:
        """Called by the running task of this scheduler before it returns ``False`` (not done): it runs again at
        ``due_us`` (microseconds from the Unix epoch; rounded up to a tick, the current tick if past) rather than
        at once, in line as if :meth:`schedule` d now. Its task and queue entry are reused: a periodic timer moves
        instead of scheduling a new task each period. ``False`` (and the task ends when it returns) if ``due_us``
        is past the end of virtual time, or if no task of this scheduler is running."""
        core = self._core
        running = core.running
        if running is None or running.scheduler is not self:
            return False
        tick = -((core.epoch_us - due_us) // core.tick_us)  # rounded up
        if tick > core.end:
            return False
        core.again = max(tick, core.clock)
        return True

    @property
    def priority(self) -> int:
        """Where this scheduler's work goes among other schedulers' work due at the same tick: lower first (0 by
        default; children get their parent's). Within one priority, tasks keep their own order (harness, actions,
        item processing) and FIFO. The engine gives each query's scheduler the query's priority."""
        return self._priority

    @priority.setter
    def priority(self, value: int) -> None:
        _check_priority(value)
        self._priority = value
        self._rank = value * _PRIORITY_STRIDE
        self.recalculate_priority()

    def _add(self, task: SchedulerTask, tick: int) -> None:
        if self._disposed or tick > self._core.end:  # past the end of time: it never runs
            return
        core = self._core
        armed = getattr(task, "armed", None)
        if armed is None:  # (the common case, inlined: _arrival at the clock)
            draw = core.queue.next_arrival()
            if core.number_tick != core.clock:
                core.number_tick = core.clock
                core.number_base = draw
            number = (draw - core.number_base) & _ARRIVAL_MASK
            arrival = core.clock * _TICK_WEIGHT + number * _DRAWS + (draw & _ARRIVAL_MASK)
        else:  # a recovered timer: back in line where it stood (a time after now is now)
            armed_tick = self.to_ticks(armed)
            given: int | None = getattr(task, "arrival", None)
            if armed_tick > core.clock:
                arrival = _arrival(core, core.clock)
            elif given is None:  # (a state that saved no number: after the timers of its tick that have one)
                arrival = _arrival(core, armed_tick) if armed_tick == core.clock \
                    else _given_back(core, armed_tick, _ARRIVAL_MASK)
            else:
                arrival = _given_back(core, armed_tick, given)
            number = _number(arrival)
        item = _Item(task, self, tick, task.priority + self._rank, arrival)
        if item.told:
            task.arrival = number  # type: ignore[attr-defined]  # (checked: task_kind)
        self._items[item] = None
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
            priority = task.priority + self._rank
            if item.state == _QUEUED and priority != item.priority:
                queue.remove(item.entry)
                item.priority = priority
                self._enqueue(item)
            elif item.state == _PARKED and not self._held() and task.is_runnable:
                del self._parked[item]
                item.priority = priority
                item.due = max(item.due, self._core.clock)
                self._enqueue(item)

    # -- running -----------------------------------------------------------------------------------------------

    def advance_to(self, time: int | datetime, *, yielding: bool = False) -> bool:
        """Run everything due up to tick ``time`` (or a datetime, rounded up), then set the clock to it.

        ``yielding``: stop early where a yieldable task gave way to a yield request of :attr:`yield_source` (it
        returned "not done" while one was pending): the clock stays at that task's tick, the task waits at the
        head of its tick, and this returns ``False``; a later call goes on from there. Otherwise ``True``."""
        target = self.to_ticks(time) if isinstance(time, datetime) else int(time)
        core = self._core
        if target > core.end:
            raise ValueError(
                f"cannot advance to tick {target}: virtual time ends at tick {core.end} ({self.to_datetime(core.end)}, "
                "the last before datetime.max)"
            )
        if target < core.clock:
            raise ValueError(f"cannot advance back in time from tick {core.clock} to {target}")
        if core.queue.next_due > target and not core.in_loop:
            core.clock = target  # nothing due on the way (the common case of a host advancing per event)
            return True
        if not self._run(target, yielding):
            return False
        core.clock = target
        return True

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

    def _run(self, limit: int | None, yielding: bool = False) -> bool:
        core = self._core
        if core.in_loop:
            raise RuntimeError("advance_to/run cannot be called from inside a task of the test scheduler")
        core.in_loop = True
        try:
            queue = core.queue
            nothing = queue.NO_DUE
            while True:
                due = queue.next_due  # (kept up to date by the queue: no call per task)
                if due == nothing or (limit is not None and due > limit):
                    break
                entry = queue.pop()
                item: _Item = entry[3]
                item.entry = None
                scheduler = item.scheduler
                if scheduler._status is not _RUNNING or (scheduler._parent is not None and scheduler._held()):
                    scheduler._park(item)
                    continue
                if item.due > core.clock:  # noqa: PLR1730  (a comparison, not max(): a call per task)
                    core.clock = item.due
                scheduler._execute(item)
                if yielding and item.yieldable and item.state == _QUEUED and item.due == core.clock \
                        and core.yield_source is not None and core.yield_source():
                    return False  # it gave way: the host's turn (see advance_to)
        finally:
            core.in_loop = False
        return True

    def _execute(self, item: _Item) -> None:
        core = self._core
        task = item.task
        item.state = _RUNNING_ITEM
        core.running = item
        core.again = None
        runnable = True
        try:
            if not task.is_runnable:
                done = False
            elif item.yieldable:
                done = task.execute(self, self._token or self.yield_token)  # type: ignore[call-arg]
            else:
                done = task.execute(self)
            if not done:
                task.recalculate_priority()
                item.priority = task.priority + self._rank
                runnable = task.is_runnable
        except BaseException as error:
            self._settle(item, True, False)
            self._on_error(item, error)
            return
        again: int | None = getattr(core, "again")  # noqa: B009  (set by the task: mypy narrowed it to None)
        if not done and again is not None and runnable and not core.pending_pauses and not self._disposed \
                and self._status is _RUNNING and (self._parent is None or not self._held()):
            # The common case of a timer that moved itself (run_again_at_us), inlined: back in line at its time.
            core.running = None
            item.due = again
            item.state = _QUEUED
            queue = core.queue
            item.arrival = arrival = _arrival(core, core.clock)
            number = _number(arrival)
            if item.told:
                item.task.arrival = number  # type: ignore[attr-defined]  # (checked: task_kind)
            item.entry = queue.add(again, item.priority, item, arrival)
            return
        self._settle(item, bool(done), runnable)

    def _settle(self, item: _Item, done: bool, runnable: bool) -> None:
        core = self._core
        core.running = None
        if not done and core.again is not None:
            item.due = core.again  # it asked for a time (run_again_at_us); parked, it waits for that time too
        if done or self._disposed:
            item.state = _DONE
            self._items.pop(item, None)
        elif runnable and not self._held():
            if core.again is None:
                item.due = core.clock
            item.arrival = _arrival(core, core.clock)
            if item.told:
                item.task.arrival = _number(item.arrival)  # type: ignore[attr-defined]  # (checked: task_kind)
            self._enqueue(item)
        else:
            self._park(item)
        if core.pending_pauses:
            pauses, core.pending_pauses = core.pending_pauses, []
            for root, future in pauses:
                if root._status is _PAUSING:
                    root._status = _PAUSED
                future.set_result(None)

    def _park(self, item: _Item) -> None:
        item.state = _PARKED
        if self._parked is _NO_ENTRIES:
            self._parked = {}
        self._parked[item] = None
        self._core.parked_nodes[self] = None

    def _on_error(self, item: _Item, error: BaseException) -> None:
        args = UnhandledExceptionArgs(self, item.task, error)
        level: VirtualTimeScheduler | None = self
        while level is not None:
            if level._unhandled is not None:
                level._unhandled.emit(args)
            if args.handled:
                return
            level = level._parent
        raise error

    # -- pause, resume, dispose --------------------------------------------------------------------------------

    def pause(self) -> Future[None]:
        """Pause this scheduler and its descendants (in O(1): the pause is kept here, and holds every descendant);
        the future is complete unless a task of the subtree is running (a task pausing its own scheduler), and
        then completes when that task returns."""
        future: Future[None] = Future()
        if self._disposed:
            future.set_result(None)
            return future
        self._own_paused = True
        if self._status is _RUNNING:
            self._status = _PAUSING
        running = self._core.running
        if running is not None and running.scheduler._is_within(self):
            self._core.pending_pauses.append((self, future))
        else:
            if self._status is _PAUSING:
                self._status = _PAUSED
            future.set_result(None)
        return future

    def pause_async(self) -> PauseAwaitable:
        """:meth:`pause`, awaitable from asyncio."""
        return PauseAwaitable(self.pause())

    def resume(self) -> None:
        """Lift this scheduler's pause. Its work runs again unless an ancestor's pause still holds it; a
        descendant paused on its own stays paused (each pause is lifted by its own ``resume``)."""
        if self._disposed:
            return
        core = self._core
        self._own_paused = False
        self._status = _RUNNING
        pending = [(root, future) for root, future in core.pending_pauses if root is self]
        if pending:
            core.pending_pauses = [entry for entry in core.pending_pauses if entry not in pending]
            for _, future in pending:
                future.cancel()
        if self._held():
            return  # an ancestor still holds it: its parked work waits for that resume
        self._release_parked(core)

    def _release_parked(self, core: _Core) -> None:
        """Queue again the parked work of this subtree on timeline ``core`` that nothing holds any more, and that of
        its descendants on timelines of their own."""
        for node in list(core.parked_nodes):
            if node._is_within(self) and not node._held():
                for item in node._parked:
                    item.due = max(item.due, core.clock)
                    node._enqueue(item)
                node._parked.clear()
                del core.parked_nodes[node]
        for node in list(core.detached):
            if node._is_within(self):
                node._release_parked(node._core)

    def dispose(self) -> None:
        """Dispose this scheduler and its children: drop their tasks and ignore later ones. Idempotent."""
        if self._disposed:
            return
        for node in self._subtree():
            core = node._core  # a descendant on a timeline of its own has its tasks in its own queue
            core.parked_nodes.pop(node, None)
            core.detached.pop(node, None)
            for item in node._items:
                if item.state == _QUEUED:
                    core.queue.remove(item.entry)
                item.entry = None
                if item.state != _RUNNING_ITEM:
                    item.state = _DONE
            node._items.clear()
            node._parked.clear()
            node._children.clear()
            node._mark_disposed()
        if self._parent is not None:
            self._parent._children.pop(self, None)
            self._parent._core.detached.pop(self, None)

    def _mark_disposed(self) -> None:
        self._disposed = True
        self._status = _DISPOSED

    # -- a timeline of its own ---------------------------------------------------------------------------------

    @property
    def is_detached(self) -> bool:
        """Whether this child runs on a timeline of its own (see :meth:`detach`)."""
        parent = self._parent
        return parent is not None and self._core is not parent._core

    def detach(self, clock: int | None = None) -> None:
        """Give this child and its descendants a clock and a queue of their own, starting at ``clock`` (default:
        the shared clock): their tasks leave the shared queue, keeping their order, and run only when this child
        is advanced itself. A host lets a query that fell behind catch up on its own time this way (the engine:
        a paused query, see ``docs/engine.md``), then :meth:`attach` es it again. Pauses, priorities, errors and
        the yield source still go through the parent."""
        parent = self._parent
        if parent is None:
            raise RuntimeError(f"scheduler {self._name!r} is a root: only a child can have a timeline of its own")
        if self.is_detached:
            raise RuntimeError(f"scheduler {self._name!r} already has a timeline of its own")
        shared = self._core
        running = shared.running
        if running is not None and running.scheduler._is_within(self):
            raise RuntimeError(f"scheduler {self._name!r} cannot detach from inside one of its own tasks")
        own = _Core(shared.tick, shared.epoch)
        own.clock = shared.clock if clock is None else int(clock)
        own.owner = shared.owner
        own.yield_source = shared.yield_source
        self._move_subtree(shared, own)
        for node in [node for node in shared.detached if node._is_within(self)]:
            del shared.detached[node]  # detached descendants now hang off this child's line
            own.detached[node] = None
        shared.detached[self] = None

    def attach(self) -> None:
        """Run on the parent's timeline again (after :meth:`detach`): the tasks of the subtree join the shared
        queue in their order. The host first advances this child to the parent's clock; a task due before it
        runs at the shared clock's next advance."""
        parent = self._parent
        if parent is None or not self.is_detached:
            raise RuntimeError(f"scheduler {self._name!r} has no timeline of its own to leave")
        if self._core.in_loop:
            raise RuntimeError(f"scheduler {self._name!r} cannot attach while its timeline runs")
        own = self._core
        self._move_subtree(own, parent._core)
        parent._core.detached.pop(self, None)
        parent._core.detached.update(own.detached)  # its own detached descendants now hang off the shared line

    def _move_subtree(self, source: _Core, target: _Core) -> None:
        """Move this subtree's nodes and tasks from timeline ``source`` to ``target``: queued tasks are queued
        again in their order (due, priority, arrival), parked ones keep waiting, both numbered in ``target``'s
        line (arrival numbers are unique per queue only)."""
        nodes = self._subtree()
        queued: list[_Item] = []
        for node in nodes:
            for item in node._items:
                if item.state == _QUEUED:
                    source.queue.remove(item.entry)
                    queued.append(item)
            node._core = target
            if node in source.parked_nodes:
                del source.parked_nodes[node]
                target.parked_nodes[node] = None
        queued.sort(key=lambda item: (item.due, item.priority, item.arrival))
        for item in queued:
            self._renumber(item, target)
            item.entry = target.queue.add(item.due, item.priority, item, item.arrival)
        for node in nodes:
            for item in sorted(node._parked, key=lambda item: item.arrival):
                self._renumber(item, target)

    @staticmethod
    def _renumber(item: _Item, target: _Core) -> None:
        """Number ``item`` in ``target``'s line, at its clock, and tell its task (a later checkpoint saves that)."""
        item.arrival = _arrival(target, target.clock)
        if item.told:
            item.task.arrival = _number(item.arrival)  # type: ignore[attr-defined]  # (checked: task_kind)


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

