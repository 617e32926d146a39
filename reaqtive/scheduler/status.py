"""The life cycle of a logical scheduler, and its unhandled-exception event."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from reaqtive.core.scheduler_interface import Scheduler, SchedulerTask, YieldableSchedulerTask

__all__ = ["Event", "SchedulerStatus", "UnhandledExceptionArgs"]

_LOG: Final = logging.getLogger("reaqtive.scheduler")

A = TypeVar("A")


class SchedulerStatus(enum.IntEnum):
    """Where a scheduler is in its life cycle; ordered, so ``status >= PAUSING`` means "not running"."""

    RUNNING = 0
    """Tasks run."""
    PAUSING = 1
    """A pause was requested: no new task starts, yield tokens are raised, some task may still be running."""
    PAUSED = 2
    """No task of this scheduler or its descendants runs until :meth:`resume`."""
    DISPOSED = 3
    """Queued tasks were dropped and later ones are ignored."""


class UnhandledExceptionArgs:
    """What the handlers of an ``unhandled_exception`` event receive.

    ``scheduler`` is the scheduler the failing task ran on (the same at every level of the chain), ``task`` the
    task, ``exception`` what it raised. A handler sets ``handled = True`` to stop the chain; the failing task is
    dropped either way (its invariants may be broken, so it never runs again).
    """

    __slots__ = ("exception", "handled", "scheduler", "task")

    def __init__(self, scheduler: Scheduler, task: SchedulerTask | YieldableSchedulerTask, exception: BaseException):
        self.scheduler = scheduler
        self.task = task
        self.exception = exception
        self.handled = False

    def __repr__(self) -> str:
        return f"UnhandledExceptionArgs({self.exception!r}, handled={self.handled})"


class Event(Generic[A]):
    """A list of handlers called in the order they were added: ``event += handler``, ``event -= handler``.

    A handler that raises is logged and skipped; the others still run.
    """

    __slots__ = ("_handlers", "_lock", "_name")

    def __init__(self, name: str = "event") -> None:
        self._handlers: tuple[Callable[[A], object], ...] = ()
        self._lock = threading.Lock()
        self._name = name

    def add(self, handler: Callable[[A], object]) -> None:
        """Call ``handler`` on every raise of the event."""
        if not callable(handler):
            raise TypeError(f"{self._name}: a handler must be callable, got {type(handler).__name__}")
        with self._lock:
            self._handlers = (*self._handlers, handler)

    def remove(self, handler: Callable[[A], object]) -> None:
        """Stop calling ``handler`` (its last registration); unknown handlers are ignored."""
        with self._lock:
            handlers = list(self._handlers)
            for index in range(len(handlers) - 1, -1, -1):
                if handlers[index] == handler:
                    del handlers[index]
                    break
            self._handlers = tuple(handlers)

    def __iadd__(self, handler: Callable[[A], object]) -> Event[A]:
        self.add(handler)
        return self

    def __isub__(self, handler: Callable[[A], object]) -> Event[A]:
        self.remove(handler)
        return self

    def __len__(self) -> int:
        return len(self._handlers)

    def emit(self, args: A) -> None:
        """Call every handler with ``args``."""
        for handler in self._handlers:
            try:
                handler(args)
            except Exception:
                _LOG.exception("a handler of %s raised; ignored", self._name)

    def __repr__(self) -> str:
        return f"<Event {self._name} handlers={len(self._handlers)}>"
