"""Verifying asyncio-based implementations: an event loop on a background thread, and adapters.

The kit blocks its test thread while it waits for signals, so an asyncio implementation cannot share that
thread: run its loop in a :class:`LoopThread`. Publishers and subscribers whose methods must be called on the
loop are wrapped:

* :func:`publisher_on_loop` runs ``subscribe`` on the loop (waiting, so a ``TypeError`` for ``None`` reaches the
  caller), and gives the subscriber a subscription whose ``request``/``cancel`` are posted to the loop when called
  from another thread, but run *directly* when already on the loop (inside ``on_next``): posting those would
  test the adapter's trampolining instead of the implementation's rules 3.2/3.3.
* :func:`subscriber_on_loop` runs every signal on the loop and waits for it, so what the subscriber raises (rule
  2.13) reaches the kit.

The kit's own subscribers are thread-safe, so signals arriving on the loop thread need no adapting::

    class TestAsyncRange(PublisherVerification[int]):
        def setup_method(self, method: object = None) -> None:
            super().setup_method(method)
            self.loop_thread = LoopThread().start()

        def teardown_method(self, method: object = None) -> None:
            super().teardown_method(method)
            self.loop_thread.stop()
            self.loop_thread.raise_errors()  # exceptions raised by calls posted to the loop fail the test

        def create_publisher(self, elements: int) -> Publisher[int]:
            return publisher_on_loop(AsyncRangePublisher(elements), self.loop_thread)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.streams import Publisher, Subscriber, Subscription

__all__ = ["LoopThread", "publisher_on_loop", "subscriber_on_loop"]

T = TypeVar("T")
R = TypeVar("R")


class LoopThread:
    """An asyncio event loop running forever on a daemon thread until ``stop()``."""

    def __init__(self, name: str = "tck-asyncio") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ident: int | None = None
        self._errors: list[BaseException] = []
        self._errors_lock = threading.Lock()

    def start(self) -> LoopThread:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            loop.set_exception_handler(self._on_loop_exception)
            self._loop, self._ident = loop, threading.get_ident()
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop and wait for its thread to end."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)

    def __enter__(self) -> LoopThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the loop thread is not started")
        return self._loop

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self._ident

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` now if on the loop thread, else post it to the loop (without waiting)."""
        if self.in_loop_thread():
            function(*args)
        else:
            self.loop.call_soon_threadsafe(self._guarded, function, args)

    def call_and_wait(self, function: Callable[..., R], *args: Any, timeout_s: float | None = 30.0) -> R:
        """Run ``function(*args)`` on the loop and return its result (or raise its exception) here."""
        if self.in_loop_thread():
            return function(*args)
        future: concurrent.futures.Future[R] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function(*args))
            except BaseException as error:
                future.set_exception(error)

        self.loop.call_soon_threadsafe(run)
        return future.result(timeout_s)

    def _guarded(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            function(*args)
        except Exception as error:  # a posted call has no caller to raise to: keep it for raise_errors()
            with self._errors_lock:
                self._errors.append(error)

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception") or RuntimeError(str(context.get("message")))
        with self._errors_lock:
            self._errors.append(error)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised by calls posted to the loop, and by anything else the loop reported."""
        with self._errors_lock:
            return list(self._errors)

    def raise_errors(self) -> None:
        """Raise the first exception the loop recorded, if any."""
        errors = self.errors
        if errors:
            raise AssertionError(f"exception on the event loop thread: {errors[0]!r}") from errors[0]


def publisher_on_loop(publisher: Publisher[T], loop_thread: LoopThread) -> Publisher[T]:
    """``publisher`` seen from any thread: its methods and its subscriptions' methods run on ``loop_thread``."""
    return _LoopPublisher(publisher, loop_thread)


def subscriber_on_loop(subscriber: Subscriber[T], loop_thread: LoopThread) -> Subscriber[T]:
    """``subscriber`` seen from any thread: every signal runs on ``loop_thread``, and the caller waits for it."""
    return _LoopSubscriber(subscriber, loop_thread)


class _LoopPublisher(Generic[T]):
    def __init__(self, publisher: Publisher[T], loop_thread: LoopThread) -> None:
        self._publisher = publisher
        self._loop_thread = loop_thread

    def __repr__(self) -> str:
        return f"{self._publisher!r} (on {self._loop_thread._name})"

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        target: Subscriber[T] | None = (
            None if subscriber is None else _SubscriptionAdaptingSubscriber(subscriber, self._loop_thread)
        )
        self._loop_thread.call_and_wait(self._publisher.subscribe, target)


class _SubscriptionAdaptingSubscriber(Generic[T]):
    """Passes signals straight through, but hands the subscriber a loop-aware subscription."""

    def __init__(self, subscriber: Subscriber[T], loop_thread: LoopThread) -> None:
        self._subscriber = subscriber
        self._loop_thread = loop_thread

    def on_subscribe(self, subscription: Subscription) -> None:
        adapted = subscription if subscription is None else _LoopSubscription(subscription, self._loop_thread)
        self._subscriber.on_subscribe(adapted)

    def on_next(self, element: T) -> None:
        self._subscriber.on_next(element)

    def on_error(self, error: BaseException) -> None:
        self._subscriber.on_error(error)

    def on_complete(self) -> None:
        self._subscriber.on_complete()


class _LoopSubscription:
    def __init__(self, subscription: Subscription, loop_thread: LoopThread) -> None:
        self._subscription = subscription
        self._loop_thread = loop_thread

    def __repr__(self) -> str:
        return f"{self._subscription!r} (on {self._loop_thread._name})"

    def request(self, n: int) -> None:
        self._loop_thread.call(self._subscription.request, n)

    def cancel(self) -> None:
        self._loop_thread.call(self._subscription.cancel)


class _LoopSubscriber(Generic[T]):
    def __init__(self, subscriber: Subscriber[T], loop_thread: LoopThread) -> None:
        self._subscriber = subscriber
        self._loop_thread = loop_thread

    def __repr__(self) -> str:
        return f"{self._subscriber!r} (on {self._loop_thread._name})"

    def on_subscribe(self, subscription: Subscription) -> None:
        self._loop_thread.call_and_wait(self._subscriber.on_subscribe, subscription)

    def on_next(self, element: T) -> None:
        self._loop_thread.call_and_wait(self._subscriber.on_next, element)

    def on_error(self, error: BaseException) -> None:
        self._loop_thread.call_and_wait(self._subscriber.on_error, error)

    def on_complete(self) -> None:
        self._loop_thread.call_and_wait(self._subscriber.on_complete)
