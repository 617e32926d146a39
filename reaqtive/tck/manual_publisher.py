"""A publisher driven by the test itself: the upstream of a Subscriber or Processor under test."""

from __future__ import annotations

from typing import Generic, TypeVar

from reaqtive.core.streams import Subscriber
from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.sync import Latch, Promise, Receptacle

__all__ = ["ManualPublisher", "REQUEST_BUFFER_SIZE"]

T = TypeVar("T")

REQUEST_BUFFER_SIZE = 1024
"""How many ``request`` calls the manual publisher queues. Larger than the JVM kit's 32: a subscriber that
re-requests on every element (legal) must not overflow the kit while it signals up to 512 elements (rule 2.1)."""


class ManualPublisher(Generic[T]):
    """Accepts one subscriber, records its ``request``/``cancel`` calls, and signals it when the test says so.

    ``subscribe`` calls ``on_subscribe`` synchronously; ``send_next``/``send_completion``/``send_error`` call the
    subscriber synchronously on the test thread. The publisher does not check demand: tests call
    ``expect_request`` before they send.
    """

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self.subscriber: Promise[Subscriber[T]] = Promise(env)
        self.requests: Receptacle[int] = Receptacle(env, REQUEST_BUFFER_SIZE)
        self.cancelled = Latch(env)
        self.pending_demand = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}@{id(self):x}"

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        if self.subscriber.is_completed():
            self.env.flop("TestPublisher doesn't support more than one Subscriber")
            return
        self.subscriber.complete(subscriber)
        subscriber.on_subscribe(_ManualSubscription(self))

    # -- signalling the subscriber ------------------------------------------------------------------------------

    def send_next(self, element: T) -> None:
        if not self.subscriber.is_completed():
            self.env.flop_and_fail("Cannot send_next before having a Subscriber")
        self.subscriber.value().on_next(element)

    def send_completion(self) -> None:
        if not self.subscriber.is_completed():
            self.env.flop_and_fail("Cannot send_completion before having a Subscriber")
        self.subscriber.value().on_complete()

    def send_error(self, cause: BaseException) -> None:
        if not self.subscriber.is_completed():
            self.env.flop_and_fail("Cannot send_error before having a Subscriber")
        self.subscriber.value().on_error(cause)

    # -- expectations on the subscriber's calls -----------------------------------------------------------------

    def expect_request(self, timeout_ms: int | None = None, hint: str = "") -> int:
        """Wait for the next ``request(n)`` and return ``n``; ``n <= 0`` fails the test."""
        timeout = self.env.default_timeout_ms if timeout_ms is None else timeout_ms
        message = "Did not receive expected `request` call" + (f" ({hint})" if hint else "")
        requested = self.requests.next(timeout, message)
        if requested <= 0:
            self.env.flop_and_fail(f"Requests cannot be zero or negative but received request({requested})")
        self.pending_demand += requested
        return requested

    def expect_exact_request(self, expected: int, timeout_ms: int | None = None) -> None:
        requested = self.expect_request(timeout_ms)
        if requested != expected:
            self.env.flop(f"Received `request({requested})` on upstream but expected `request({expected})`")

    def expect_no_request(self, timeout_ms: int | None = None) -> None:
        within = self.env.default_no_signals_timeout_ms if timeout_ms is None else timeout_ms
        self.requests.expect_none(within, "Received an unexpected call to: request: ")

    def expect_cancelling(self, timeout_ms: int | None = None) -> None:
        self.cancelled.expect_close("Did not receive expected cancelling of upstream subscription", timeout_ms)

    def is_cancelled(self) -> bool:
        return self.cancelled.is_closed()


class _ManualSubscription(Generic[T]):
    """Records the subscriber's calls for the test; knows nothing else."""

    def __init__(self, publisher: ManualPublisher[T]) -> None:
        self._publisher = publisher

    def __repr__(self) -> str:
        return f"ManualSubscription({self._publisher!r})"

    def request(self, n: int) -> None:
        self._publisher.env.debug(f"{self}.request({n})")
        self._publisher.requests.add(n)

    def cancel(self) -> None:
        self._publisher.env.debug(f"{self}.cancel()")
        self._publisher.cancelled.close()
