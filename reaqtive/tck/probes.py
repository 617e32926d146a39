"""Probes: how the kit sees inside a Subscriber under test.

A *whitebox* subscriber cooperates: in ``on_subscribe`` it hands the kit a :class:`SubscriberPuppet` through
``probe.register_on_subscribe(puppet)``, and it reports each signal it receives (``register_on_next`` and so
on). The kit then drives demand through the puppet and checks what the subscriber saw. A *blackbox* subscriber
is only wrapped in a :class:`BlackboxSubscriberProxy`, which records the signals on the way in.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from reaqtive.core.streams import Subscriber, Subscription
from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.sync import Promise, Receptacle

__all__ = [
    "BlackboxProbe",
    "BlackboxSubscriberProxy",
    "PROBE_BUFFER_SIZE",
    "SubscriberPuppet",
    "WhiteboxSubscriberProbe",
]

T = TypeVar("T")

PROBE_BUFFER_SIZE = 1024
"""Elements a probe holds unconsumed; above the 512 elements the blackbox rule 2.1 test may signal."""


class SubscriberPuppet(Protocol):
    """What a whitebox subscriber gives the kit so the kit can make it request and cancel."""

    def trigger_request(self, elements: int) -> None:
        """Make sure at least ``elements`` more are *eventually* requested (coalescing is fine)."""
        ...

    def signal_cancel(self) -> None:
        """Make the subscriber cancel its subscription."""
        ...


class BlackboxProbe(Generic[T]):
    """Records the signals a subscriber received, for the test thread to check."""

    def __init__(self, env: TestEnvironment, subscriber: Promise[Subscriber[T]]) -> None:
        self.env = env
        self.subscriber = subscriber
        self.elements: Receptacle[T] = Receptacle(env, PROBE_BUFFER_SIZE)
        self.error: Promise[BaseException] = Promise(env)

    # -- called by (or on behalf of) the subscriber under test --------------------------------------------------

    def register_on_next(self, element: T) -> None:
        self.elements.add(element)

    def register_on_complete(self) -> None:
        if self.elements.is_completed():
            self.env.flop(f"{self._sub()} on_complete was called a second time, which rule 1.7 forbids")
            return
        self.elements.complete()

    def register_on_error(self, cause: BaseException) -> None:
        if self.error.is_completed():
            self.env.flop(f"{self._sub()} on_error was called a second time, which rule 1.7 forbids")
            return
        self.error.complete(cause)

    # -- used by the test ---------------------------------------------------------------------------------------

    def _sub(self) -> str:
        return f"Subscriber {self.subscriber.value()!r}" if self.subscriber.is_completed() else "Subscriber"

    def expect_next(self, expected: T | None = None, timeout_ms: int | None = None) -> T:
        timeout = self.env.default_timeout_ms if timeout_ms is None else timeout_ms
        received = self.elements.next(timeout, f"{self._sub()} did not call `register_on_next(_)`")
        if expected is not None and received != expected:
            self.env.flop(
                f"{self._sub()} called `register_on_next({received!r})` rather than `register_on_next({expected!r})`"
            )
        return received

    def expect_completion(self, timeout_ms: int | None = None, message: str | None = None) -> None:
        timeout = self.env.default_timeout_ms if timeout_ms is None else timeout_ms
        self.elements.expect_completion(timeout, message or f"{self._sub()} did not call `register_on_complete()`")

    def expect_error(
        self, expected: type[BaseException] | BaseException, timeout_ms: int | None = None
    ) -> BaseException | None:
        """Wait for ``register_on_error``: with the very instance ``expected``, or an instance of that type."""
        timeout = self.env.default_timeout_ms if timeout_ms is None else timeout_ms
        if not self.error.expect_completion(timeout, f"{self._sub()} did not call `register_on_error({expected!r})`"):
            return None
        received = self.error.value()
        if isinstance(expected, BaseException):
            if received is not expected:
                self.env.flop(
                    f"{self._sub()} called `register_on_error({received!r})` rather than "
                    f"`register_on_error({expected!r})`"
                )
        elif not isinstance(received, expected):
            self.env.flop(
                f"{self._sub()} called `register_on_error({received!r})` rather than with a {expected.__name__}"
            )
        return received

    def expect_none(self, within_ms: int | None = None) -> None:
        within = self.env.default_no_signals_timeout_ms if within_ms is None else within_ms
        self.elements.expect_none(within, "Expected nothing")


class WhiteboxSubscriberProbe(BlackboxProbe[T]):
    """The probe a whitebox subscriber reports to; it also receives the subscriber's puppet."""

    def __init__(self, env: TestEnvironment, subscriber: Promise[Subscriber[T]]) -> None:
        super().__init__(env, subscriber)
        self.puppet_promise: Promise[SubscriberPuppet] = Promise(env)

    def register_on_subscribe(self, puppet: SubscriberPuppet) -> None:
        """Called by the subscriber under test in ``on_subscribe``; only the first call counts."""
        if not self.puppet_promise.is_completed():
            self.puppet_promise.complete(puppet)

    def puppet(self) -> SubscriberPuppet:
        return self.puppet_promise.value()


class BlackboxSubscriberProxy(BlackboxProbe[T]):
    """Wraps a blackbox subscriber: records each signal, then forwards it (exceptions reach the test)."""

    def __init__(self, env: TestEnvironment, subscriber: Subscriber[T]) -> None:
        promise: Promise[Subscriber[T]] = Promise(env)
        promise.complete(subscriber)
        super().__init__(env, promise)
        self.target = subscriber

    def __repr__(self) -> str:
        return f"BlackboxSubscriberProxy({self.target!r})"

    def on_subscribe(self, subscription: Subscription) -> None:
        self.target.on_subscribe(subscription)

    def on_next(self, element: T) -> None:
        self.register_on_next(element)
        self.target.on_next(element)

    def on_error(self, cause: BaseException) -> None:
        self.register_on_error(cause)
        self.target.on_error(cause)

    def on_complete(self) -> None:
        self.register_on_complete()
        self.target.on_complete()
