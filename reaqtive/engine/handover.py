"""The engine's lock, with a hand-over: a pause request waits for one bounded slice of processing, not a batch.

Every public call of the engine but an append runs under one re-entrant lock, and the processing loop
(``process()``, ``serve()``, the asyncio face's task) holds it while it delivers a batch of events. A plain lock is
not fair: the loop releases it between batches and takes it again at once, so a checkpoint or a ``pause(uri)`` from
another thread could wait for several batches (and, under the GIL, for switch intervals on top).

:class:`EngineLock` counts the threads that had to wait for it (``waiting``). The delivery loop looks at that
count at its **yield points** — after every event delivered to several readers, after every slice of
:data:`SLICE_EVENTS` events delivered to a stream's only reader, before the next run — and, when someone waits,
stops at that point (a consistent one: every event before it delivered with the work due at its instant), releases
the lock, and :meth:`EngineLock.let_waiters_in` waits until each waiter has taken it before it goes on. So a
thread that needs the engine waits for at most one slice (plus the lock's own hand-over), whatever the batch size.

A slice cannot split less than one event and the work due at its instant (a timer that closes many windows at
once runs whole): see ``docs/engine.md`` ("Pauses and slices") for the measured sizes.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Final

__all__ = ["DELIVERY_BATCH", "HANDOVER_WAIT_SECONDS", "SLICE_EVENTS", "EngineLock"]

DELIVERY_BATCH: Final = 4096
"""The events of one slice of ``process()``: the engine is let go between slices."""
SLICE_EVENTS: Final = 512
"""Events a stream's only reader takes between two yield points (see the module)."""

HANDOVER_WAIT_SECONDS: Final = 0.05
"""How long the processing loop waits for the waiters to take the lock before it competes for it again: a bound
against a waiter that never comes (it timed out), not a delay (it goes on as soon as they took it)."""


class EngineLock:
    """A re-entrant lock that knows how many threads wait for it (see the module)."""

    __slots__ = ("_count", "_depth", "_lock", "_taken", "waiting")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._count = threading.Lock()
        self._taken = threading.Condition(self._count)
        self._depth = 0  # how many times the owner holds it (only the owner changes it)
        self.waiting = 0  # read without the count's lock by the delivery loop: an int read is atomic

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock (re-entrant); a thread that cannot take it at once counts itself as waiting."""
        if self._lock.acquire(False):
            self._depth += 1
            return True
        if not blocking:
            return False
        with self._count:
            self.waiting += 1
        try:
            taken = self._lock.acquire(True, timeout)
            if taken:
                self._depth += 1
            return taken
        finally:
            with self._taken:
                self.waiting -= 1
                if not self.waiting:
                    self._taken.notify_all()

    def release(self) -> None:
        """Release one level of the lock."""
        self._depth -= 1
        self._lock.release()

    def __enter__(self) -> EngineLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()

    def wants_turn(self) -> bool:
        """Asked by the owner: whether a thread waits and the owner can let it in (it holds the lock once)."""
        return self.waiting > 0 and self._depth == 1

    def hand_over(self, timeout: float = HANDOVER_WAIT_SECONDS) -> bool:
        """Asked by the owner at a yield point: if threads wait and it holds the lock once, release it, let them
        in (see :meth:`let_waiters_in`), take it again and return ``True`` (what the lock guards may have
        changed); otherwise ``False``."""
        if not self.wants_turn():
            return False
        self.release()
        try:
            self.let_waiters_in(timeout)
        finally:
            self.acquire()
        return True

    def let_waiters_in(self, timeout: float = HANDOVER_WAIT_SECONDS) -> None:
        """Called by the processing loop *without* the lock: return once no thread waits for it any more (each
        took it), or after ``timeout`` seconds."""
        with self._taken:
            self._taken.wait_for(lambda: not self.waiting, timeout)
