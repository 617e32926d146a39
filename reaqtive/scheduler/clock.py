"""Clocks: where a physical scheduler reads the time, and how long its idle workers may sleep.

All times are aware :class:`~datetime.datetime` values in UTC. :class:`WallClock` reads
``datetime.now(UTC)`` on every call, so `freezegun <https://github.com/spulec/freezegun>`_ controls it in
tests. :class:`VirtualClock` only moves when told to, and wakes the schedulers that listen to it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

from reaqtive.core.scheduler_interface import deadline, utc

__all__ = ["EPOCH", "MAX_IDLE_WAIT", "Clock", "VirtualClock", "WallClock", "to_utc"]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""The start of virtual time unless told otherwise."""

MAX_IDLE_WAIT: Final = 30.0
"""Seconds an idle worker waits at most before re-reading the clock: a safety net against wall-clock jumps (NTP,
suspend) and for frozen test clocks that moved without a :meth:`PhysicalScheduler.wake`."""


def to_utc(when: datetime) -> datetime:
    """``when`` converted to UTC; a naive datetime is rejected because its zone is unknown."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"due time {when!r} is naive; pass an aware datetime (for example with tzinfo=UTC)")
    return utc(when)  # past datetime.max in UTC (a negative offset): NEVER


class Clock(ABC):
    """A source of the current time for a :class:`~reaqtive.scheduler.PhysicalScheduler`."""

    __slots__ = ()

    @abstractmethod
    def now(self) -> datetime:
        """The current time, aware, in UTC."""

    @abstractmethod
    def seconds_until(self, due: datetime) -> float | None:
        """Real seconds an idle worker may sleep before ``due`` may have come; ``None``: until woken."""

    def add_listener(self, listener: Callable[[], None]) -> None:  # noqa: B027  (a default, not abstract)
        """Call ``listener`` whenever the time jumps (virtual clocks); the wall clock never calls it."""

    def remove_listener(self, listener: Callable[[], None]) -> None:  # noqa: B027
        """Stop calling ``listener``."""


class WallClock(Clock):
    """The real time, ``datetime.now(UTC)`` (which freezegun patches)."""

    __slots__ = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def seconds_until(self, due: datetime) -> float | None:
        seconds = (due - datetime.now(UTC)).total_seconds()
        return 0.0 if seconds <= 0.0 else min(seconds, MAX_IDLE_WAIT)

    def __repr__(self) -> str:
        return "WallClock()"


class VirtualClock(Clock):
    """A clock that stands still until :meth:`advance_to` or :meth:`advance_by` moves it forward.

    Use it to drive a threaded :class:`~reaqtive.scheduler.PhysicalScheduler` with manual time: timers fire when
    the clock passes their due time, on the workers. (For single-threaded virtual time, use
    :class:`reaqtive.testing.TestScheduler`.)
    """

    __slots__ = ("_listeners", "_lock", "_now")

    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = to_utc(start)
        self._listeners: tuple[Callable[[], None], ...] = ()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self._now

    def seconds_until(self, due: datetime) -> float | None:
        return 0.0 if due <= self._now else None

    def advance_to(self, when: datetime) -> None:
        """Move to ``when``; moving backwards raises :class:`ValueError`."""
        when = to_utc(when)
        with self._lock:
            if when < self._now:
                raise ValueError(f"a virtual clock cannot go back from {self._now.isoformat()} to {when.isoformat()}")
            self._now = when
            listeners = self._listeners
        for listener in listeners:
            listener()

    def advance_by(self, delta: timedelta) -> None:
        """Move forward by ``delta`` (not negative); past ``datetime.max``, to
        :data:`~reaqtive.core.scheduler_interface.NEVER`."""
        if delta < timedelta(0):
            raise ValueError(f"a virtual clock cannot go back (advance_by({delta!r}))")
        with self._lock:
            target = deadline(self._now, delta)
        self.advance_to(target)

    def add_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners = tuple(item for item in self._listeners if item != listener)  # bound methods: ==

    def __repr__(self) -> str:
        return f"VirtualClock({self._now.isoformat()})"
