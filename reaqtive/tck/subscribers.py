"""The kit's own subscribers: they record every signal and let the test thread wait for what it expects.

``TestSubscriber`` treats every signal as unexpected; the subclasses accept the signals a test wants and keep
recording the rest as failures. All of them are safe to call from any thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from reaqtive.core.streams import Subscription
from reaqtive.tck.sync import EndOfStream, Promise, Receptacle

if TYPE_CHECKING:  # annotations only: env imports this module (its new_*_subscriber factories)
    from reaqtive.tck.env import TestEnvironment

__all__ = [
    "BlackholeSubscriberWithSubscriptionSupport",
    "ManualSubscriber",
    "ManualSubscriberWithErrorCollection",
    "ManualSubscriberWithSubscriptionSupport",
    "TestSubscriber",
]

T = TypeVar("T")


class TestSubscriber(Generic[T]):
    """A subscriber for which every signal is unexpected; subclasses accept the ones their test expects."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, env: TestEnvironment) -> None:
        self.env = env
        self.subscription: Promise[Subscription] = Promise(env)
        self.terminated = False
        env.register_subscriber(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}@{id(self):x}"

    def on_subscribe(self, subscription: Subscription) -> None:
        self.env.flop(f"Unexpected Subscriber.on_subscribe({subscription!r})")

    def on_next(self, element: T) -> None:
        self.env.flop(f"Unexpected Subscriber.on_next({element!r})")

    def on_error(self, cause: BaseException) -> None:
        self.terminated = True
        # The cause itself is recorded, so a test can wait for it with env.expect_error(...).
        self.env.flop_error(cause)

    def on_complete(self) -> None:
        self.terminated = True
        self.env.flop("Unexpected Subscriber.on_complete()")

    def cancel(self) -> None:
        """Cancel the subscription received in ``on_subscribe``."""
        if self.subscription.is_completed():
            self.subscription.value().cancel()
        else:
            self.env.flop("Cannot cancel a subscription before having received it")

    def cancel_quietly(self) -> None:
        """Cancel an active subscription at the end of a test; what the publisher does then no longer matters."""
        if self.subscription.is_completed() and not self.terminated:
            try:
                self.subscription.value().cancel()
            except Exception as error:  # the test is over; a broken cancel was or will be reported elsewhere
                self.env.debug(f"cancel at test end failed: {error!r}")


class ManualSubscriber(TestSubscriber[T]):
    """Queues ``on_next``/``on_complete`` so the test thread can request and then wait for each signal."""

    def __init__(self, env: TestEnvironment) -> None:
        super().__init__(env)
        self.received: Receptacle[T] = Receptacle(env)

    def on_next(self, element: T) -> None:
        if element is None:
            self.env.flop("Subscriber.on_next(None) received: None is never a stream element (rule 2.13)")
            return
        self.received.add(element)

    def on_complete(self) -> None:
        self.terminated = True
        self.received.complete()

    # -- demand --------------------------------------------------------------------------------------------------

    def request(self, elements: int) -> None:
        self.env.debug(f"{self}.request({elements})")
        self.subscription.value().request(elements)

    def request_next_element(self, timeout_ms: int | None = None, message: str | None = None) -> T:
        self.request(1)
        return self.next_element(timeout_ms, message)

    def request_next_elements(
        self, elements: int, timeout_ms: int | None = None, message: str | None = None
    ) -> list[T]:
        self.request(elements)
        return self.next_elements(elements, timeout_ms, message)

    def request_next_element_or_end_of_stream(
        self, message: str = "Did not receive expected stream completion", timeout_ms: int | None = None
    ) -> T | EndOfStream | None:
        """``request(1)``, then an element or ``END_OF_STREAM``; ``None`` (and a recorded failure) on timeout."""
        self.request(1)
        return self.received.next_or_end_of_stream(self._timeout(timeout_ms), message)

    def request_end_of_stream(
        self, timeout_ms: int | None = None, message: str = "Did not receive expected stream completion"
    ) -> None:
        self.request(1)
        self.expect_completion(timeout_ms, message)

    # -- waiting for signals -------------------------------------------------------------------------------------

    def next_element(self, timeout_ms: int | None = None, message: str | None = None) -> T:
        return self.received.next(self._timeout(timeout_ms), message or "Did not receive expected element")

    def next_element_or_end_of_stream(
        self, timeout_ms: int | None = None, message: str = "Did not receive expected stream completion"
    ) -> T | EndOfStream | None:
        return self.received.next_or_end_of_stream(self._timeout(timeout_ms), message)

    def next_elements(self, elements: int, timeout_ms: int | None = None, message: str | None = None) -> list[T]:
        return self.received.next_n(
            elements, self._timeout(timeout_ms), message or f"Did not receive {elements} expected elements"
        )

    def expect_next(self, expected: T, timeout_ms: int | None = None) -> None:
        received = self.next_element(timeout_ms, f"Did not receive expected element {expected!r}")
        if received != expected:
            self.env.flop(f"Expected element {expected!r} but got {received!r}")

    def expect_completion(
        self, timeout_ms: int | None = None, message: str = "Did not receive expected stream completion"
    ) -> None:
        self.received.expect_completion(self._timeout(timeout_ms), message)

    def expect_error(
        self, error_type: type[BaseException] | tuple[type[BaseException], ...], timeout_ms: int | None = None
    ) -> BaseException:
        """Wait for ``on_error`` with an instance of ``error_type`` (the cause is recorded by ``on_error``)."""
        return self.env.expect_error(error_type, timeout_ms)

    def expect_error_with_message(
        self, error_type: type[BaseException] | tuple[type[BaseException], ...], message_parts: list[str],
        timeout_ms: int | None = None,
    ) -> BaseException:
        """As ``expect_error``, and the message must contain one of ``message_parts``."""
        error = self.expect_error(error_type, timeout_ms)
        text = str(error)
        if not any(part in text for part in message_parts):
            self.env.flop_and_fail(
                f"Got expected exception {type(error).__name__} but missing message part "
                f"{' or '.join(repr(p) for p in message_parts)}, was: {text!r}"
            )
        return error

    def expect_none(
        self, within_ms: int | None = None, message: str = "Did not expect an element but got element"
    ) -> None:
        """Watch for the no-signals timeout: nothing may arrive."""
        within = self.env.default_no_signals_timeout_ms if within_ms is None else within_ms
        self.received.expect_none(within, message)

    def _timeout(self, timeout_ms: int | float | None) -> float:
        return self.env.default_timeout_ms if timeout_ms is None else timeout_ms


class ManualSubscriberWithSubscriptionSupport(ManualSubscriber[T]):
    """The kit's default subscriber: a :class:`ManualSubscriber` that also checks ``on_subscribe`` comes first."""

    def on_subscribe(self, subscription: Subscription | None) -> None:
        self.env.debug(f"{self}.on_subscribe({subscription!r})")
        if subscription is None:
            self.env.flop("Subscriber.on_subscribe(None) received: the subscription must not be None (rule 2.13)")
            return
        if self.subscription.is_completed():
            self.env.flop("Subscriber.on_subscribe called on an already-subscribed Subscriber")
            return
        self.subscription.complete(subscription)

    def on_next(self, element: T) -> None:
        self.env.debug(f"{self}.on_next({element!r})")
        if not self.subscription.is_completed():
            self.env.flop(f"Subscriber.on_next({element!r}) called before Subscriber.on_subscribe")
        super().on_next(element)

    def on_complete(self) -> None:
        self.env.debug(f"{self}.on_complete()")
        if not self.subscription.is_completed():
            self.env.flop("Subscriber.on_complete() called before Subscriber.on_subscribe")
        super().on_complete()

    def on_error(self, cause: BaseException) -> None:
        self.env.debug(f"{self}.on_error({cause!r})")
        if not self.subscription.is_completed():
            self.env.flop(f"Subscriber.on_error({cause!r}) called before Subscriber.on_subscribe")
        super().on_error(cause)


class BlackholeSubscriberWithSubscriptionSupport(ManualSubscriberWithSubscriptionSupport[T]):
    """Checks the order of signals but stores no element (for publishers that emit very many)."""

    def on_next(self, element: T) -> None:
        if not self.subscription.is_completed():
            self.env.flop(f"Subscriber.on_next({element!r}) called before Subscriber.on_subscribe")

    def next_element(self, timeout_ms: int | None = None, message: str | None = None) -> T:
        raise RuntimeError("a blackhole subscriber does not store elements; it cannot return one")


class ManualSubscriberWithErrorCollection(ManualSubscriberWithSubscriptionSupport[T]):
    """Keeps the ``on_error`` cause so a test can compare it with the error it injected upstream."""

    def __init__(self, env: TestEnvironment) -> None:
        super().__init__(env)
        self.error: Promise[BaseException] = Promise(env)

    def on_error(self, cause: BaseException) -> None:
        self.env.debug(f"{self}.on_error({cause!r})")
        self.terminated = True
        self.error.complete(cause)

    def expect_error_instance(self, cause: BaseException, timeout_ms: int | None = None) -> None:
        """Wait for ``on_error`` carrying exactly ``cause``."""
        timeout = self.env.default_timeout_ms if timeout_ms is None else timeout_ms
        if not self.error.expect_completion(timeout, "Did not receive expected error on downstream"):
            return
        received = self.error.value()
        if received is not cause:
            self.env.flop(f"Expected error {cause!r} but got {received!r}")

