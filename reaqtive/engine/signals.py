"""Wake-ups: how a processing loop learns that events were appended, and a consumer that outputs were produced,
without polling.

A :class:`Signal` is a generation counter. Whoever changes something fires it (the counter moves on); whoever
waits remembers the generation it last saw and waits until the counter differs. Reading the generation *before*
doing the work and waiting on it *after* never misses a wake-up: a fire in between makes the wait return at once.

Threads wait with :meth:`Signal.wait`; asyncio code registers a listener (:meth:`Signal.listen`) that sets an
``asyncio.Event`` through ``loop.call_soon_threadsafe`` (see :mod:`reaqtive.engine.aio`). The engine fires
``appended`` after each append's events are handed to the ingress log (and when a new subscription may have
brought timers due sooner: the processing loop looks again), and ``produced`` when a batch produced outputs for
the durable sink; both fire when the engine closes, so that every waiter wakes up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Signal"]


class Signal:
    """A generation counter to wait on (see the module docstring). Thread-safe."""

    __slots__ = ("_condition", "_generation", "_listeners", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._condition = threading.Condition(threading.Lock())
        self._generation = 0
        self._listeners: tuple[Callable[[], None], ...] = ()

    @property
    def generation(self) -> int:
        """How many times it fired."""
        return self._generation

    def fire(self) -> None:
        """Move the counter on and wake every waiter and listener. A listener must be quick and must not raise
        (the engine calls this on its own threads); one that raises is dropped."""
        with self._condition:
            self._generation += 1
            self._condition.notify_all()
            listeners = self._listeners
        for listener in listeners:
            try:
                listener()
            except Exception:  # a listener of a closed event loop: it will never wait again
                self.unlisten(listener)

    def wait(self, seen: int, timeout: float | None = None) -> int:
        """Block until the generation differs from ``seen`` (or ``timeout`` seconds passed); return the generation
        then. Example: ``seen = signal.generation; work(); signal.wait(seen, 1.0)``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while self._generation == seen:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._condition.wait(remaining)
            return self._generation

    def listen(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` (on the firing thread) at every fire; returns the function that stops it."""
        with self._condition:
            self._listeners = (*self._listeners, listener)
        return lambda: self.unlisten(listener)

    def unlisten(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener`` once: one registration of it goes (another, listening to the same function,
        stays); nothing if it is not listening."""
        with self._condition:
            listeners = self._listeners
            for index, item in enumerate(listeners):
                if item is listener:
                    self._listeners = listeners[:index] + listeners[index + 1:]
                    return

    def __repr__(self) -> str:
        return f"Signal({self.name!r}, generation={self._generation}, listeners={len(self._listeners)})"
