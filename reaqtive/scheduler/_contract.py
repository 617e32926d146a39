"""The internal contract between the physical scheduler and the logical schedulers on it.

The physical scheduler (:mod:`reaqtive.scheduler.physical`) runs the tasks of every logical scheduler
(:mod:`reaqtive.scheduler.logical`) and, under its one lock, keeps part of their bookkeeping up to date: how many
tasks of each run, which are parked, which are pending. What crosses between the two modules is exactly this:

* :class:`WorkItem`: one scheduled task. The logical scheduler creates it, the physical one queues and runs it;
  both read and write its public fields.
* :class:`TaskGroup`: the bookkeeping of one logical scheduler that the physical scheduler reads and writes (its
  status, running count, pending and parked items, the pauses waiting for it, its fault). The logical scheduler
  owns one and keeps these facts nowhere else.
* :class:`GroupOwner`: what the physical scheduler asks of a logical scheduler itself (the error chain, dispose).
* :class:`PendingPause`: what a pause in progress does when a group it waits for goes idle.
* The public methods of :class:`~reaqtive.scheduler.PhysicalScheduler` marked "lock held" (``push``,
  ``add_timer``, ``attach``...) and its ``lock``.

So physical.py does not import logical.py, and neither module touches a private attribute of the other's objects.
Every field here is read and written with the physical scheduler's lock held, except where a docstring says why
a racy read is fine.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

from reaqtive.core.scheduler_interface import Scheduler, SchedulerTask, YieldToken
from reaqtive.scheduler.status import Event, SchedulerStatus, UnhandledExceptionArgs

if TYPE_CHECKING:
    from reaqtive.scheduler.timers import Entry

__all__ = [
    "DONE",
    "PARKED",
    "QUEUED",
    "RUNNING",
    "TIMER",
    "GroupOwner",
    "SchedulerNode",
    "LaneEntry",
    "PendingPause",
    "TaskGroup",
    "WorkItem",
    "complete_futures",
]

# Work item states.
QUEUED: Final = 0  # in a ready lane, through the entry held in ``item.entry``
TIMER: Final = 1  # in the due-time queue, through ``item.entry``
PARKED: Final = 2  # in its group's ``parked`` (paused, or not runnable)
RUNNING: Final = 3  # taken by a worker
DONE: Final = 4  # completed, failed or dropped

LaneEntry = tuple["WorkItem"]
"""An item's place in a ready lane: a fresh tuple per queueing, so an old place is recognisably stale."""


class GroupOwner(Scheduler, Protocol):
    """The logical scheduler a :class:`TaskGroup` belongs to, as the physical scheduler sees it: what its tasks
    get as their scheduler, the source of their yield token, a link of the exception chain, and a root that
    disposing the physical scheduler disposes."""

    unhandled_exception: Event[UnhandledExceptionArgs]

    @property
    def parent(self) -> GroupOwner | None:
        """The next link of the exception chain; ``None`` for a root."""
        ...

    @property
    def is_yield_requested(self) -> bool:
        """The yield-token source."""
        ...


class PendingPause(Protocol):
    """A pause in progress, listed in the ``waiters`` of every group of its subtree that had a task running."""

    def count_off(self) -> Future[None] | None:
        """One of those groups has no running task any more; the pause's future once this was the last one (the
        caller completes it outside the lock, see :func:`complete_futures`), else ``None``. Lock held."""
        ...


class WorkItem:
    """One scheduled task of a :class:`TaskGroup`. ``entry`` is the item's live queue entry: a lane entry that is
    not ``item.entry`` any more is stale and skipped (lazy deletion keeps dispose and re-prioritising cheap).
    ``front``: parked from the head of its lane, so it goes back there on resume. ``recheck``: a
    ``recalculate_priority`` came while the task ran, so it must not be parked on what it said before."""

    __slots__ = ("entry", "front", "group", "priority", "recheck", "runnable", "state", "task", "yieldable")

    def __init__(self, task: SchedulerTask, group: TaskGroup, priority: int, yieldable: bool) -> None:
        self.task = task
        self.group = group
        self.priority = priority
        self.yieldable = yieldable
        self.state = DONE
        self.runnable = True
        self.front = False
        self.recheck = False
        self.entry: LaneEntry | Entry | None = None

    def __repr__(self) -> str:
        return f"<WorkItem {self.task!r} state={self.state} priority={self.priority}>"


class TaskGroup:
    """The bookkeeping of one logical scheduler (``owner``) that the physical scheduler shares. Lock held.

    ``status`` and ``disposed`` are written by the owner only (pause, resume, dispose); the physical scheduler
    reads them to decide whether a task may start. ``running`` (tasks taken by a worker and not settled),
    ``items`` (tasks not done: queued, timed, parked or running) and ``parked`` (tasks waiting for resume or for
    ``recalculate_priority``, in the order they were parked) are written by both. ``waiters``: the pauses waiting
    for ``running`` to drop to zero. ``fault``: the unhandled task error that disposed the owner; set without the
    lock, by the worker that ran the failing task (one attribute write).
    """

    __slots__ = ("disposed", "fault", "items", "owner", "parked", "running", "status", "token", "waiters")

    def __init__(self, owner: GroupOwner) -> None:
        self.owner = owner
        self.status = SchedulerStatus.RUNNING
        self.disposed = False
        self.running = 0
        self.items: set[WorkItem] = set()
        self.parked: dict[WorkItem, None] = {}
        self.waiters: list[PendingPause] = []
        self.fault: BaseException | None = None
        self.token = YieldToken(owner)  # the owner is the source: tokens of one scheduler compare equal

    def release_waiters(self) -> list[Future[None]]:
        """The group's last running task ended: count it off every pause waiting for it; returns the futures of
        the pauses that completed. Lock held."""
        completed: list[Future[None]] = []
        for waiter in self.waiters:
            future = waiter.count_off()
            if future is not None:
                completed.append(future)
        self.waiters.clear()
        return completed

    def fail(self, error: BaseException) -> None:
        """An unhandled task error: remember the first one and dispose the owner. Lock not held (dispose takes it)."""
        if self.fault is None:
            self.fault = error
        self.owner.dispose()

    def __repr__(self) -> str:
        return f"<TaskGroup of {self.owner!r} running={self.running} items={len(self.items)}>"


def complete_futures(futures: list[Future[None]]) -> None:
    """Complete pause futures outside the lock: their callbacks may call back into the scheduler."""
    for future in futures:
        if future.set_running_or_notify_cancel():
            future.set_result(None)


N = TypeVar("N", bound="SchedulerNode[Any]")


class SchedulerNode(Generic[N]):
    """What the two scheduler trees share (:class:`~reaqtive.scheduler.LogicalScheduler`,
    :class:`~reaqtive.scheduler.VirtualTimeScheduler`): a parent, live children (keys of ``_children``) and a
    name. A subclass sets the three fields."""

    __slots__ = ()

    _parent: N | None
    _children: dict[N, None]
    _name: str

    @property
    def parent(self) -> N | None:
        """The parent, ``None`` for a root."""
        return self._parent

    @property
    def name(self) -> str:
        """For logs and ``repr``."""
        return self._name

    def _subtree(self) -> list[N]:
        """This scheduler and its live descendants, depth-first (under the tree's lock)."""
        nodes: list[N] = []
        stack: list[Any] = [self]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node._children)
        return nodes
