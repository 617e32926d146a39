"""The test environment: timeouts, the asynchronous error list ("flops"), and subscription helpers.

Signals reach the kit on any thread, often inside a publisher's own call stack, where raising would only hurt the
publisher. So the kit *records* what went wrong (a "flop") and fails the test later, on the test thread, at the
next ``verify_no_async_errors*`` call. ``flop_and_fail`` records and raises at once, for failures after which the
test cannot go on.

A fresh environment is made for every test (the JVM kit shares one per class), so a late signal from the previous
test's threads can never fail the next one.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from reaqtive.core.streams import Publisher
from reaqtive.tck.subscribers import (
    BlackholeSubscriberWithSubscriptionSupport,
    ManualSubscriberWithSubscriptionSupport,
    TestSubscriber,
)

__all__ = [
    "DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS",
    "DEFAULT_TIMEOUT_MILLIS",
    "ENV_DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS",
    "ENV_DEFAULT_TIMEOUT_MILLIS",
    "ENV_PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS",
    "ENV_TCK_DEBUG",
    "PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS",
    "TestEnvironment",
]

T = TypeVar("T")

ENV_DEFAULT_TIMEOUT_MILLIS = "DEFAULT_TIMEOUT_MILLIS"
ENV_DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS = "DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS"
ENV_PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS = "PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS"
ENV_TCK_DEBUG = "TCK_DEBUG"

DEFAULT_TIMEOUT_MILLIS = 500
"""How long to wait for a signal that should arrive. Only a failing test waits this long."""
DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS = 50
"""How long to watch for a signal that must *not* arrive. Every passing test pays it, so it is kept short."""
PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS = 300
"""How long a publisher may take to drop a cancelled subscriber (rule 3.13)."""

_log = logging.getLogger("reaqtive.tck")


def _env_millis(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be a whole number of milliseconds") from None
    if value < 0:
        raise ValueError(f"environment variable {name}={raw!r} must not be negative")
    return value


class TestEnvironment:
    """Timeouts and the error list of one verification test.

    All timeouts are in milliseconds. Those not passed to the constructor come from the environment variables
    ``DEFAULT_TIMEOUT_MILLIS``, ``DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS`` and ``PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS``
    (the JVM kit's names), else from the defaults; ``TCK_DEBUG=1`` turns on debug logging.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        default_timeout_ms: int | None = None,
        default_no_signals_timeout_ms: int | None = None,
        publisher_reference_gc_timeout_ms: int | None = None,
        *,
        debug: bool | None = None,
    ) -> None:
        # A value given here wins; otherwise the environment variable; otherwise the default.
        self.default_timeout_ms = (
            _env_millis(ENV_DEFAULT_TIMEOUT_MILLIS, DEFAULT_TIMEOUT_MILLIS)
            if default_timeout_ms is None else default_timeout_ms
        )
        self.default_no_signals_timeout_ms = (
            _env_millis(ENV_DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS, DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS)
            if default_no_signals_timeout_ms is None else default_no_signals_timeout_ms
        )
        self.publisher_reference_gc_timeout_ms = (
            _env_millis(ENV_PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS, PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS)
            if publisher_reference_gc_timeout_ms is None else publisher_reference_gc_timeout_ms
        )
        if debug is None:
            debug = os.environ.get(ENV_TCK_DEBUG, "") not in ("", "0", "false", "False")
        self.debug_enabled = debug or _log.isEnabledFor(logging.DEBUG)
        self._errors: list[BaseException] = []
        self._changed = threading.Condition(threading.Lock())
        # Weak, so the kit itself never keeps a subscriber alive (rule 3.13 is checked with a weak reference).
        self._subscribers: weakref.WeakSet[TestSubscriber[Any]] = weakref.WeakSet()
        self._marker = threading.local()

    @classmethod
    def from_env(cls) -> TestEnvironment:
        """An environment whose settings all come from the environment variables (or the defaults)."""
        return cls()

    def __repr__(self) -> str:
        return (
            f"TestEnvironment(timeout={self.default_timeout_ms}ms, "
            f"no_signals={self.default_no_signals_timeout_ms}ms, gc={self.publisher_reference_gc_timeout_ms}ms)"
        )

    # -- debug -------------------------------------------------------------------------------------------------

    def debug(self, message: str) -> None:
        """Log ``message`` when debugging is on (``TCK_DEBUG=1`` or the ``reaqtive.tck`` logger at DEBUG)."""
        if self.debug_enabled:
            _log.warning("[TCK-DEBUG] %s", message)

    # -- the asynchronous error list -----------------------------------------------------------------------------

    def flop(self, message: str) -> AssertionError:
        """Record a failure without raising; the test fails at the next ``verify_no_async_errors*``."""
        error = AssertionError(message)
        self._record(error)
        return error

    def flop_error(self, error: BaseException) -> None:
        """Record ``error`` itself (an ``on_error`` cause the test did not expect, or an internal failure)."""
        self._record(error)

    def flop_and_fail(self, message: str, cause: BaseException | None = None) -> NoReturn:
        """Record a failure and raise it now: the test cannot continue.

        Without an explicit ``cause``, the oldest error recorded so far becomes the cause: a timeout is often
        only the consequence of an earlier signal (say, an unexpected ``on_error``), and the report shows both.
        """
        with self._changed:
            earlier = self._errors[0] if self._errors else None
        error = self.flop(message)
        raise error from (cause if cause is not None else earlier)

    def _record(self, error: BaseException) -> None:
        self.debug(f"flop: {error!r}")
        with self._changed:
            self._errors.append(error)
            self._changed.notify_all()

    @property
    def async_errors(self) -> list[BaseException]:
        """A snapshot of the recorded errors, oldest first."""
        with self._changed:
            return list(self._errors)

    def clear_async_errors(self) -> None:
        """Forget every recorded error."""
        with self._changed:
            self._errors.clear()

    def drop_async_error(self) -> BaseException | None:
        """Remove and return the oldest recorded error, or ``None``."""
        with self._changed:
            return self._errors.pop(0) if self._errors else None

    def verify_no_async_errors_no_delay(self) -> None:
        """Fail with the oldest recorded error, if any (an ``AssertionError`` as is, anything else wrapped)."""
        with self._changed:
            first = self._errors[0] if self._errors else None
        if first is None:
            return
        if isinstance(first, AssertionError):
            raise first
        raise AssertionError(f"Async error during test execution: {first}") from first

    def verify_no_async_errors(self, delay_ms: int | None = None) -> None:
        """Check now, then watch for late errors for ``delay_ms`` (default: the no-signals timeout).

        The watch returns as soon as an error is recorded, so a failing test does not wait the whole delay.
        """
        self.verify_no_async_errors_no_delay()
        delay = self.default_no_signals_timeout_ms if delay_ms is None else delay_ms
        with self._changed:
            self._changed.wait_for(lambda: bool(self._errors), delay / 1000)
        self.verify_no_async_errors_no_delay()

    def expect_error(
        self, error_type: type[BaseException] | tuple[type[BaseException], ...], timeout_ms: int | None = None,
        message: str | None = None,
    ) -> BaseException:
        """Wait for the next recorded error, remove it and return it; it must be an instance of ``error_type``.

        Subscribers record the cause of an ``on_error`` they receive, so this is how a test waits for ``on_error``.
        The wait is woken by the recording itself (the JVM kit polls, sleeping before its first look).
        """
        timeout = self.default_timeout_ms if timeout_ms is None else timeout_ms
        names = _type_names(error_type)
        prefix = message if message is not None else f"Expected onError({names})"
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self._errors), timeout / 1000):
                self._flop_and_fail_locked(f"{prefix} within {timeout} ms")
            error = self._errors.pop(0)
        if isinstance(error, error_type):
            return error
        self.flop_and_fail(
            f"{prefix} within {timeout} ms; Got {type(error).__name__}({error}) but expected {names}", error
        )

    def _flop_and_fail_locked(self, message: str) -> NoReturn:
        """``flop_and_fail`` for callers that already hold the error list's lock."""
        earlier = self._errors[0] if self._errors else None
        error = AssertionError(message)
        self._errors.append(error)
        self._changed.notify_all()
        raise error from earlier

    # -- subscribing ---------------------------------------------------------------------------------------------

    def register_subscriber(self, subscriber: TestSubscriber[T]) -> None:
        """Remember a kit subscriber (weakly) so ``close()`` can cancel what the test left open."""
        self._subscribers.add(subscriber)

    def subscribe(self, publisher: Publisher[T], subscriber: TestSubscriber[T], timeout_ms: int | None = None) -> None:
        """Subscribe and wait until ``on_subscribe`` arrived (rule 1.9), failing on any error recorded so far."""
        timeout = self.default_timeout_ms if timeout_ms is None else timeout_ms
        publisher.subscribe(subscriber)
        subscriber.subscription.expect_completion(timeout, f"Could not subscribe {subscriber} to Publisher {publisher}")
        self.verify_no_async_errors_no_delay()

    def new_manual_subscriber(
        self, publisher: Publisher[T], timeout_ms: int | None = None
    ) -> ManualSubscriberWithSubscriptionSupport[T]:
        """Subscribe a fresh :class:`ManualSubscriberWithSubscriptionSupport` to ``publisher``."""
        subscriber: ManualSubscriberWithSubscriptionSupport[T] = ManualSubscriberWithSubscriptionSupport(self)
        self.subscribe(publisher, subscriber, timeout_ms)
        return subscriber

    def new_blackhole_subscriber(self, publisher: Publisher[T]) -> BlackholeSubscriberWithSubscriptionSupport[T]:
        """Subscribe a fresh subscriber that checks signal order but stores nothing."""
        subscriber: BlackholeSubscriberWithSubscriptionSupport[T] = BlackholeSubscriberWithSubscriptionSupport(self)
        self.subscribe(publisher, subscriber)
        return subscriber

    def close(self) -> None:
        """Cancel every kit subscription the test left active, so no publisher keeps running after the test."""
        for subscriber in list(self._subscribers):
            subscriber.cancel_quietly()

    # -- rule 2.3: calls made from inside a terminal signal ------------------------------------------------------

    @contextmanager
    def signalling(self, method: str) -> Iterator[None]:
        """Mark the current thread as inside the kit's own call of ``Subscriber.<method>`` (rule 2.3).

        The JVM kit walks the stack for a marker method name; a thread-local mark set only around the kit's own
        call is the same check (same thread, synchronous), but does not depend on frame names.
        """
        previous = getattr(self._marker, "method", None)
        self._marker.method = method
        try:
            yield
        finally:
            self._marker.method = previous

    def current_signal(self) -> str | None:
        """The terminal signal the kit is delivering on this thread right now, if any."""
        method: str | None = getattr(self._marker, "method", None)
        return method


def _type_names(error_type: type[BaseException] | tuple[type[BaseException], ...]) -> str:
    types = error_type if isinstance(error_type, tuple) else (error_type,)
    return " or ".join(t.__name__ for t in types)
