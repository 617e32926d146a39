"""Correct reference implementations the kit must pass: the self-tests' known-good side.

They double as small examples of the patterns the rules need: a drain loop so that ``request`` inside
``on_next`` never recurses (rule 3.3), ``on_error`` for ``request(n <= 0)`` delivered through the same serial
loop (rule 3.9), demand capped at ``LONG_MAX`` (rule 3.17), references dropped on cancel (rule 3.13).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Generic, TypeVar

from reaqtive.core.streams import (
    LONG_MAX,
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.tck import WhiteboxSubscriberProbe

T = TypeVar("T")


class RangeSubscriptionLog:
    """Every subscription a reference publisher created, so a test can check the kit ended each one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.subscriptions: list[_RangeSubscription] = []

    def add(self, subscription: _RangeSubscription) -> None:
        with self._lock:
            self.subscriptions.append(subscription)

    def unfinished(self) -> list[_RangeSubscription]:
        with self._lock:
            return [s for s in self.subscriptions if not s.finished]


class SyncRangePublisher:
    """Publishes ``start, start + 1, ..., start + count - 1`` synchronously, on the caller's thread."""

    def __init__(self, start: int, count: int, log: RangeSubscriptionLog | None = None) -> None:
        self._start, self._end, self._log = start, start + count, log

    def __repr__(self) -> str:
        return f"SyncRangePublisher({self._start}..{self._end})"

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        subscription = _RangeSubscription(subscriber, self._start, self._end)
        if self._log is not None:
            self._log.add(subscription)
        subscriber.on_subscribe(subscription)
        subscription.drain()  # an empty range completes without demand


class _RangeSubscription:
    def __init__(self, subscriber: Subscriber[int], start: int, end: int) -> None:
        self._subscriber: Subscriber[int] | None = subscriber
        self._index, self._end = start, end
        self._requested = 0
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._draining = False
        self._missed = False
        self.finished = False  # cancelled or terminated

    def request(self, n: int) -> None:
        with self._lock:
            if n <= 0:
                self._error = self._error or non_positive_request_error(n)
            else:
                self._requested = add_demand(self._requested, n)
        self.drain()

    def cancel(self) -> None:
        with self._lock:
            self._subscriber = None  # rule 3.13: drop the subscriber at once
            self.finished = True

    def drain(self) -> None:
        """Emit what is requested; only one thread drains at a time, re-entrant calls just leave a note."""
        with self._lock:
            if self._draining:
                self._missed = True
                return
            self._draining = True
        while True:
            with self._lock:
                subscriber = self._subscriber
                signal: str
                if subscriber is None:
                    signal = "stop"
                elif self._error is not None:
                    signal = "error"
                elif self._index >= self._end:
                    signal = "complete"
                elif self._requested > 0:
                    signal = "next"
                    value = self._index
                    self._index += 1
                    if self._requested < LONG_MAX:
                        self._requested -= 1
                elif self._missed:
                    self._missed = False
                    continue
                else:
                    signal = "stop"
                if signal in ("error", "complete"):
                    self._subscriber = None
                    self.finished = True
                if signal in ("stop", "error", "complete"):
                    self._draining = False
            if signal == "next":
                assert subscriber is not None
                subscriber.on_next(value)
                continue
            if signal == "error":
                assert subscriber is not None and self._error is not None
                subscriber.on_error(self._error)
            elif signal == "complete":
                assert subscriber is not None
                subscriber.on_complete()
            return


class FailedPublisher:
    """Signals ``on_subscribe`` then ``on_error`` at once (rules 1.4, 1.9)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self._error = error or RuntimeError("failed publisher")

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        subscriber.on_subscribe(_NoopSubscription())
        subscriber.on_error(self._error)


class _NoopSubscription:
    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


class LockstepProcessor(Generic[T]):
    """A multicast identity processor that emits an element only when *every* subscriber has demand
    ("coordinated emission"), prefetching up to ``buffer_size`` elements from upstream.

    Terminal signals are remembered: a late subscriber gets ``on_subscribe`` then the terminal signal, so a
    processor that received ``on_error`` serves as a failed publisher. An upstream error is passed on at once,
    ahead of buffered elements and regardless of demand (rule 4.2).
    """

    def __init__(self, buffer_size: int) -> None:
        self._buffer_size = buffer_size
        self._lock = threading.Lock()
        self._upstream: Subscription | None = None
        self._outstanding = 0  # requested from upstream, not yet received
        self._queue: deque[T] = deque()
        self._inners: list[_Inner[T]] = []
        self._completed = False
        self._error: BaseException | None = None
        self._draining = False
        self._missed = False

    # -- Subscriber side (upstream) --

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        with self._lock:
            duplicate = self._upstream is not None
            if not duplicate:
                self._upstream = subscription
        if duplicate:
            subscription.cancel()  # rule 2.5
            return
        self._drain()

    def on_next(self, element: T) -> None:
        require_not_none(element, "element", "2.13")
        with self._lock:
            self._outstanding -= 1
            self._queue.append(element)
        self._drain()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        with self._lock:
            self._error = error
            self._upstream = None
        self._drain()

    def on_complete(self) -> None:
        with self._lock:
            self._completed = True
            self._upstream = None
        self._drain()

    # -- Publisher side (downstream) --

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        inner = _Inner(self, subscriber)
        subscriber.on_subscribe(inner)
        with self._lock:
            self._inners.append(inner)
        self._drain()

    def _inner_cancelled(self) -> None:
        """When the last subscriber leaves, nobody needs the upstream any more: cancel it."""
        with self._lock:
            upstream = self._upstream
            last = all(i.cancelled for i in self._inners)
            if last:
                self._upstream = None
        if last and upstream is not None:
            upstream.cancel()
        self._drain()

    def _drain(self) -> None:
        with self._lock:
            if self._draining:
                self._missed = True
                return
            self._draining = True
        while True:
            self._drain_once()
            with self._lock:
                if not self._missed:
                    self._draining = False
                    return
                self._missed = False

    def _drain_once(self) -> None:
        with self._lock:
            for inner in [i for i in self._inners if i.error is not None]:
                self._inners.remove(inner)
                inner.fail()
            self._inners = [i for i in self._inners if not i.cancelled]
            inners = list(self._inners)
            if self._error is not None:
                self._inners.clear()
                self._queue.clear()
                error: BaseException | None = self._error
            else:
                error = None
        if error is not None:
            for inner in inners:
                inner.terminate(error)
            return
        while True:
            with self._lock:
                inners = [i for i in self._inners if not i.cancelled]
                if not self._queue or not inners or any(i.demand == 0 for i in inners):
                    break
                element = self._queue.popleft()
                for inner in inners:
                    inner.take_one()
            for inner in inners:
                inner.emit(element)
        with self._lock:
            done = self._completed and not self._queue
            inners = list(self._inners) if done else []
            if done:
                self._inners.clear()
            upstream = self._upstream
            want = self._buffer_size - len(self._queue) - self._outstanding
            if upstream is None or want <= 0:
                want = 0
            self._outstanding += want
        for inner in inners:
            inner.terminate(None)
        if want and upstream is not None:
            upstream.request(want)


class _Inner(Generic[T]):
    """One downstream subscriber of a :class:`LockstepProcessor` and its demand."""

    def __init__(self, parent: LockstepProcessor[T], subscriber: Subscriber[T]) -> None:
        self._parent = parent
        self._subscriber: Subscriber[T] | None = subscriber
        self.demand = 0
        self.cancelled = False
        self.error: BaseException | None = None

    def request(self, n: int) -> None:
        if n <= 0:
            self.error = non_positive_request_error(n)
        else:
            self.demand = add_demand(self.demand, n)
        self._parent._drain()

    def cancel(self) -> None:
        self.cancelled = True
        self._subscriber = None  # rule 3.13
        self._parent._inner_cancelled()

    def take_one(self) -> None:
        if self.demand < LONG_MAX:
            self.demand -= 1

    def emit(self, element: T) -> None:
        subscriber = self._subscriber
        if subscriber is not None:
            subscriber.on_next(element)

    def fail(self) -> None:
        assert self.error is not None
        self.terminate(self.error)

    def terminate(self, error: BaseException | None) -> None:
        subscriber, self._subscriber = self._subscriber, None
        self.cancelled = True
        if subscriber is None:
            return
        if error is None:
            subscriber.on_complete()
        else:
            subscriber.on_error(error)


class ProbedSubscriber(Generic[T]):
    """A whitebox subscriber: reports each signal to the kit's probe and lets the kit drive its demand."""

    def __init__(self, probe: WhiteboxSubscriberProbe[T]) -> None:
        self._probe = probe
        self._subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self._subscription is not None:
            subscription.cancel()  # rule 2.5
            return
        self._subscription = subscription
        self._probe.register_on_subscribe(_Puppet(subscription))

    def on_next(self, element: T) -> None:
        require_not_none(element, "element", "2.13")
        self._probe.register_on_next(element)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._probe.register_on_error(error)

    def on_complete(self) -> None:
        self._probe.register_on_complete()


class _Puppet:
    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription

    def trigger_request(self, elements: int) -> None:
        self._subscription.request(elements)

    def signal_cancel(self) -> None:
        self._subscription.cancel()


class OneByOneSubscriber(Generic[T]):
    """A blackbox subscriber that requests one element at a time and keeps what it receives."""

    def __init__(self, request_on_subscribe: bool = True) -> None:
        self._request_on_subscribe = request_on_subscribe
        self._subscription: Subscription | None = None
        self.received: list[T] = []
        self.done = threading.Event()

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self._subscription is not None:
            subscription.cancel()  # rule 2.5
            return
        self._subscription = subscription
        if self._request_on_subscribe:
            subscription.request(1)

    def start(self) -> None:
        """The outside stimulus a subscriber with ``request_on_subscribe=False`` waits for."""
        assert self._subscription is not None
        self._subscription.request(1)

    def on_next(self, element: T) -> None:
        require_not_none(element, "element", "2.13")
        self.received.append(element)
        assert self._subscription is not None
        self._subscription.request(1)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._subscription = None
        self.done.set()

    def on_complete(self) -> None:
        self._subscription = None
        self.done.set()


class AsyncioRangePublisher:
    """An asyncio publisher of ``0 .. count - 1``: every method must run on its event loop's thread, and elements
    are emitted from loop callbacks (never inside ``request``). Verified through ``publisher_on_loop``."""

    def __init__(self, count: int, loop: asyncio.AbstractEventLoop) -> None:
        self._count = count
        self._loop = loop

    def __repr__(self) -> str:
        return f"AsyncioRangePublisher({self._count})"

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        subscription = _AsyncioRangeSubscription(subscriber, self._count, self._loop)
        subscriber.on_subscribe(subscription)
        subscription.schedule()


class _AsyncioRangeSubscription:
    """Single-threaded by contract (the loop's thread), so plain fields and no locks."""

    def __init__(self, subscriber: Subscriber[int], count: int, loop: asyncio.AbstractEventLoop) -> None:
        self._subscriber: Subscriber[int] | None = subscriber
        self._next, self._count = 0, count
        self._demand = 0
        self._error: BaseException | None = None
        self._loop = loop
        self._scheduled = False

    def request(self, n: int) -> None:
        if n <= 0:
            self._error = self._error or non_positive_request_error(n)
        else:
            self._demand = add_demand(self._demand, n)
        self.schedule()

    def cancel(self) -> None:
        self._subscriber = None

    def schedule(self) -> None:
        if not self._scheduled and self._subscriber is not None:
            self._scheduled = True
            self._loop.call_soon(self._emit)

    def _emit(self) -> None:
        self._scheduled = False
        for _ in range(64):  # a batch, then yield the loop to other callbacks
            subscriber = self._subscriber
            if subscriber is None:
                return
            if self._error is not None:
                self._subscriber = None
                subscriber.on_error(self._error)
                return
            if self._next >= self._count:
                self._subscriber = None
                subscriber.on_complete()
                return
            if self._demand == 0:
                return
            if self._demand < LONG_MAX:
                self._demand -= 1
            value, self._next = self._next, self._next + 1
            subscriber.on_next(value)
        self.schedule()
