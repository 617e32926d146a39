"""Subscribers that end a query: the no-op sink and a callback sink that requests in batches."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar, final

from reaqtive.core.streams import LONG_MAX, Subscriber, Subscription, require_not_none

__all__ = ["NOP_SUBSCRIBER", "CallbackSubscriber", "NopSubscriber"]

T = TypeVar("T")

_LOG: Final = logging.getLogger("reaqtive.subscribers")


@final
class NopSubscriber(Subscriber[Any]):
    """Ignores every signal and requests nothing. Operators swap it in for their downstream when disposed, so
    output after dispose is dropped and the real subscriber is no longer referenced (rule 3.13)."""

    __slots__ = ()

    def on_subscribe(self, subscription: Subscription) -> None:
        pass

    def on_next(self, value: Any) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass

    def on_complete(self) -> None:
        pass

    def __repr__(self) -> str:
        return "NOP_SUBSCRIBER"


NOP_SUBSCRIBER: Final = NopSubscriber()
"""The shared no-op subscriber."""


class CallbackSubscriber(Subscriber[T], Generic[T]):
    """A sink that calls your functions, with unbounded or batched demand.

    >>> from reaqtive import from_iterable
    >>> seen = []
    >>> handle = from_iterable([1, 2, 3]).run(CallbackSubscriber(seen.append, batch_size=2))
    >>> seen
    [1, 2, 3]

    With ``batch_size=None`` (the default) it requests unbounded demand (``LONG_MAX``), the fast path. With a
    ``batch_size`` it requests that many first and then tops the demand up each time three quarters of a batch
    has arrived, so a slow consumer never has more than ``batch_size`` elements in flight.

    An exception raised by ``on_next`` cancels the subscription and is passed to ``on_error`` (the Reactive
    Streams rules forbid raising back into the publisher, rule 2.13). Errors with no ``on_error`` callback are
    logged, never dropped silently.
    """

    __slots__ = (
        "_batch",
        "_lock",
        "_on_complete",
        "_on_error",
        "_on_next",
        "_received",
        "_refill",
        "_subscription",
        "_terminated",
    )

    def __init__(
        self,
        on_next: Callable[[T], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
        on_complete: Callable[[], object] | None = None,
        *,
        batch_size: int | None = None,
    ) -> None:
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        self._on_next = on_next
        self._on_error = on_error
        self._on_complete = on_complete
        self._batch = LONG_MAX if batch_size is None else batch_size
        # Replenish after three quarters of a batch: the producer never waits for a full round trip.
        self._refill = LONG_MAX if batch_size is None else batch_size - (batch_size >> 2)
        self._received = 0
        self._subscription: Subscription | None = None
        self._terminated = False
        self._lock = threading.Lock()

    @property
    def is_terminated(self) -> bool:
        """Whether ``on_error``/``on_complete`` arrived, or the subscription was cancelled."""
        return self._terminated

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        with self._lock:
            duplicate = self._subscription is not None or self._terminated
            if not duplicate:
                self._subscription = subscription
        if duplicate:
            subscription.cancel()  # rule 2.5
            return
        self.request(self._batch)

    def request(self, n: int) -> None:
        """Ask the upstream for ``n`` more elements (a hook for subclasses that trace demand)."""
        subscription = self._subscription
        if subscription is not None:
            subscription.request(n)

    def cancel(self) -> None:
        """Cancel the subscription; later signals are ignored."""
        self._terminated = True
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.cancel()

    def on_next(self, value: T) -> None:
        if value is None:  # inline: this is the per-element path
            raise TypeError("rule 2.13: value must not be None")
        if self._terminated:
            return
        on_next = self._on_next
        if on_next is not None:
            try:
                on_next(value)
            except Exception as error:
                self.cancel()
                self._deliver_error(error)
                return
        if self._batch != LONG_MAX:
            self._received += 1
            if self._received == self._refill:
                self._received = 0
                self.request(self._refill)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        if self._terminated:
            return
        self._terminated = True
        self._subscription = None
        self._deliver_error(error)

    def on_complete(self) -> None:
        if self._terminated:
            return
        self._terminated = True
        self._subscription = None
        if self._on_complete is not None:
            self._on_complete()

    def _deliver_error(self, error: BaseException) -> None:
        if self._on_error is not None:
            self._on_error(error)
        else:
            _LOG.error("unhandled error at the end of a query", exc_info=error)
