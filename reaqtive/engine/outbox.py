"""Outputs on their way to an observer function: in order, at least once, retried with backoff, never skipped.

A subscription whose observer is a function (``define_observer``) does not call it from inside the query: its
outputs go to an :class:`Outbox`, and the engine delivers what waits there after each batch of events. If the
function raises, the output stays first in line; the next attempt comes after a backoff that doubles each time
(``backoff``, ``2 * backoff``, ...), and after ``retries`` failed attempts in a row the outbox gives up: the
engine then stops that subscription, under its failure policy, with its undelivered outputs kept. So one
failing observer never stops the others, never loses an output, and never makes ``process()`` raise.

Outputs still waiting at a checkpoint are written to the store with it, together with how far delivery got, so
that a restart delivers them again; outputs produced after the checkpoint are produced again by the replay, with
the same sequence numbers. An observer therefore sees each output at least once, in order, and can drop the
repeats by ``seq``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

from reaqtive.engine.egress import Output
from reaqtive.engine.engine_errors import EngineError

__all__ = ["DEFAULT_OBSERVER_BACKOFF", "DEFAULT_OBSERVER_RETRIES", "ObserverFailedError", "Outbox"]

DEFAULT_OBSERVER_RETRIES: Final = 5
"""Failed attempts in a row after which an observer's subscription is stopped."""
DEFAULT_OBSERVER_BACKOFF: Final = 0.05
"""Seconds before the first retry (doubling with each further failure)."""


class ObserverFailedError(EngineError):
    """An observer function kept raising: its subscription was stopped with the outputs it had not received
    kept in the store. ``seq`` is the output it failed on; the cause is ``__cause__``."""

    def __init__(self, subscription: str, observer: str, seq: int, attempts: int, error: BaseException) -> None:
        super().__init__(
            f"subscription {subscription!r}: observer {observer!r} raised on output #{seq} {attempts} times in a "
            f"row ({type(error).__name__}: {error}); the subscription was stopped and its undelivered outputs kept"
        )
        self.subscription = subscription
        self.observer = observer
        self.seq = seq
        self.attempts = attempts


class Outbox:
    """The outputs of one subscription waiting for its observer function (see the module)."""

    __slots__ = ("_attempts", "_backoff", "_clock", "_function", "_last_error", "_newest", "_next_attempt",
                 "_retries", "delivered", "observer", "pending", "subscription")

    def __init__(
        self,
        subscription: str,
        observer: str,
        function: Callable[[Output], object],
        *,
        retries: int = DEFAULT_OBSERVER_RETRIES,
        backoff: float = DEFAULT_OBSERVER_BACKOFF,
        delivered: int = -1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.subscription = subscription
        self.observer = observer
        self._function = function
        self._retries = retries
        self._backoff = backoff
        self._clock = clock
        self.pending: deque[Output] = deque()
        self.delivered = delivered
        """The highest sequence number the observer received (``-1``: none)."""
        self._newest = delivered
        self._attempts = 0
        self._next_attempt = 0.0
        self._last_error: BaseException | None = None

    def add(self, output: Output) -> None:
        """Queue an output; one the outbox already had (replayed after a restart) is not queued twice."""
        if output.seq > self._newest:
            self._newest = output.seq
            self.pending.append(output)

    def restore(self, outputs: Iterable[Output]) -> None:
        """Outputs a checkpoint stored undelivered (after a restart), in sequence order."""
        for output in outputs:
            if output.seq > self.delivered:
                self.add(output)

    @property
    def waiting(self) -> bool:
        """Whether outputs wait for delivery."""
        return bool(self.pending)

    def deliver(self) -> ObserverFailedError | None:
        """Hand the waiting outputs to the function, in order, until it raises or none is left (unless a backoff
        after a failure is still running). Returns the error when the outbox gives up."""
        pending = self.pending
        if not pending or (self._attempts and self._clock() < self._next_attempt):
            return None
        function = self._function
        while pending:
            output = pending[0]
            try:
                function(output)
            except Exception as error:
                return self._failed(output, error)
            pending.popleft()
            self.delivered = output.seq
            self._attempts = 0
        return None

    def _failed(self, output: Output, error: Exception) -> ObserverFailedError | None:
        self._attempts += 1
        self._last_error = error
        if self._attempts >= self._retries:
            failure = ObserverFailedError(self.subscription, self.observer, output.seq, self._attempts, error)
            failure.__cause__ = error
            return failure
        self._next_attempt = self._clock() + self._backoff * (2 ** (self._attempts - 1))
        return None

    @property
    def attempts(self) -> int:
        """Failed attempts in a row on the first waiting output."""
        return self._attempts
