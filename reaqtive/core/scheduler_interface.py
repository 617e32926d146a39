"""Scheduler interfaces shared by the core and by :mod:`reaqtive.scheduler`.

Operators reach the scheduler only through their operator context (``context.scheduler``), typed as the
:class:`Scheduler` protocol below; :mod:`reaqtive.scheduler` provides the implementations (worker threads,
hierarchical pausable logical schedulers) and :mod:`reaqtive.testing` the virtual-time one. Like
:mod:`reaqtive.core.streams`, this module depends on nothing but the standard library, so both layers can use it
without either depending on the other.

Time is always an aware :class:`datetime.datetime` in UTC; durations are :class:`datetime.timedelta`.

**Deadlines past the end of time.** ``now + delay`` overflows once it passes ``datetime.max`` (year 9999):
``take(timedelta.max)``, a timer due in a million years. Every deadline is computed with :func:`deadline`,
which returns :data:`NEVER` then: a delay that reaches past the last representable time never ends, so
``take(timedelta.max)`` takes everything and a timer due past ``datetime.max`` never fires. The schedulers
never run a task due at :data:`NEVER` (the virtual-time one does not queue it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol, final, runtime_checkable

__all__ = [
    "EARLIEST",
    "NEVER",
    "PausableScheduler",
    "Scheduler",
    "SchedulerTask",
    "YieldToken",
    "YieldTokenSource",
    "YieldableSchedulerTask",
    "deadline",
    "earlier",
    "utc",
]

NEVER: Final = datetime.max.replace(tzinfo=UTC)
"""The last representable time, the due time that never comes: a deadline past it is clamped here."""
EARLIEST: Final = datetime.min.replace(tzinfo=UTC)
"""The first representable time: always past."""

_ZERO: Final = timedelta(0)


def deadline(now: datetime, delay: timedelta) -> datetime:
    """``now + delay``, or :data:`NEVER` when that passes ``datetime.max`` (:data:`EARLIEST` when a negative
    delay passes ``datetime.min``). Never raises :class:`OverflowError`.

    >>> deadline(NEVER - timedelta(days=1), timedelta.max) is NEVER
    True
    """
    try:
        return now + delay
    except OverflowError:
        return NEVER if delay > _ZERO else EARLIEST


def earlier(time: datetime, delay: timedelta) -> datetime:
    """``time - delay``, clamped like :func:`deadline` (``-timedelta.max`` itself does not exist)."""
    try:
        return time - delay
    except OverflowError:
        return EARLIEST if delay > _ZERO else NEVER


def utc(when: datetime) -> datetime:
    """An aware ``when`` in UTC, clamped to :data:`NEVER`/:data:`EARLIEST` when its UTC time is not
    representable (``datetime.max`` at a negative offset is after ``datetime.max`` in UTC)."""
    try:
        return when.astimezone(UTC)
    except OverflowError:
        offset = when.utcoffset()
        return NEVER if offset is not None and offset < _ZERO else EARLIEST


class YieldTokenSource(Protocol):
    """Something that can ask running tasks to yield: a logical scheduler that is pausing."""

    @property
    def is_yield_requested(self) -> bool:
        """Whether running yieldable tasks should return early."""
        ...


@final
class YieldToken:
    """A resettable request to yield, polled by long-running tasks.

    Unlike a cancellation token it can go back to "not requested" (after the scheduler resumes). Two tokens are
    equal when they share a source. ``YieldToken.NONE`` never requests a yield.
    """

    __slots__ = ("_source",)

    NONE: YieldToken

    def __init__(self, source: YieldTokenSource | None = None) -> None:
        self._source = source

    @property
    def is_yield_requested(self) -> bool:
        """Whether the task holding this token should stop and return ``False`` soon."""
        source = self._source
        return source is not None and source.is_yield_requested

    def __eq__(self, other: object) -> bool:
        return isinstance(other, YieldToken) and other._source is self._source

    def __hash__(self) -> int:
        return 0 if self._source is None else id(self._source)

    def __repr__(self) -> str:
        return f"YieldToken(requested={self.is_yield_requested})"


YieldToken.NONE = YieldToken()


@runtime_checkable
class SchedulerTask(Protocol):
    """A unit of work run by a scheduler.

    ``priority``: a lower value runs first. ``is_runnable``: whether the task has work now; a task that is not
    runnable is parked until ``recalculate_priority`` is called on its scheduler. ``execute`` returns ``True``
    when the task is done, ``False`` to be run again when runnable.
    """

    @property
    def priority(self) -> int:
        """Lower runs first."""
        ...

    @property
    def is_runnable(self) -> bool:
        """Whether the task has work to do now."""
        ...

    def execute(self, scheduler: Scheduler) -> bool:
        """Run; return ``True`` when done, ``False`` to run again."""
        ...

    def recalculate_priority(self) -> None:
        """Re-read priority and runnability (called by the scheduler)."""
        ...


class YieldableSchedulerTask(ABC):
    """A cooperative task: it polls the yield token inside its loops and returns ``False`` early when a yield is
    requested (for example because the engine is pausing to take a checkpoint).

    It is an abstract base class rather than a protocol so a scheduler can tell it from a plain task with
    ``isinstance`` and pass it the token: ``task.execute(scheduler, token)``. It also satisfies
    :class:`SchedulerTask`, so ``task.execute(scheduler)`` runs it with :data:`YieldToken.NONE`.
    """

    __slots__ = ()

    @property
    @abstractmethod
    def priority(self) -> int:
        """Lower runs first."""

    @property
    @abstractmethod
    def is_runnable(self) -> bool:
        """Whether the task has work to do now."""

    @abstractmethod
    def execute(self, scheduler: Scheduler, yield_token: YieldToken = YieldToken.NONE) -> bool:
        """Run until done (``True``) or until ``yield_token`` asks to yield (``False``)."""

    def recalculate_priority(self) -> None:  # noqa: B027  (a default, deliberately not abstract)
        """Re-read priority and runnability; nothing to do by default."""


@runtime_checkable
class Scheduler(Protocol):
    """The scheduler an operator gets from its context: its only clock and its only way to run work later.

    Implementations: ``reaqtive.scheduler.LogicalScheduler`` (worker threads) and
    ``reaqtive.testing.TestScheduler`` (virtual time).
    """

    @property
    def now(self) -> datetime:
        """The current time (aware, UTC); virtual under a test scheduler."""
        ...

    def create_child(self) -> Scheduler:
        """A child task group: it pauses, resumes and is disposed with this scheduler."""
        ...

    def schedule(self, task: SchedulerTask, due: timedelta | datetime | None = None) -> None:
        """Run ``task`` as soon as possible, after a relative delay, or at an absolute time."""
        ...

    def recalculate_priority(self) -> None:
        """Re-read the priority and runnability of this scheduler's tasks (wakes parked tasks)."""
        ...

    def check_access(self) -> bool:
        """Whether the caller runs on one of this scheduler's threads."""
        ...

    def verify_access(self) -> None:
        """Raise :class:`RuntimeError` unless :meth:`check_access` is true."""
        ...

    def dispose(self) -> None:
        """Drop queued tasks and dispose children; later schedules are ignored."""
        ...


@runtime_checkable
class PausableScheduler(Scheduler, Protocol):
    """What a host (the engine, the checkpoint protocol) needs beyond what operators use: pausing.

    Pausing raises the yield token of running yieldable tasks, keeps new work from starting, and completes once
    no task of this scheduler or its descendants is running. Work scheduled while paused runs after
    :meth:`resume`.
    """

    def pause(self) -> Future[None]:
        """Start pausing; the future completes when nothing of this subtree runs any more."""
        ...

    def pause_async(self) -> Awaitable[None]:
        """The same as :meth:`pause`, awaitable from asyncio."""
        ...

    def resume(self) -> None:
        """Resume this scheduler and its descendants."""
        ...
