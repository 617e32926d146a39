"""The kit's reference asynchronous publisher, the source of elements for subscriber and processor tests.

:class:`AsyncIterablePublisher` publishes the elements of an iterable on an executor, honouring demand. Each
subscription is a small actor: signals from the subscriber (``request``, ``cancel``) and from itself go into an
inbox, and at most one executor task drains that inbox at a time, so signals to the subscriber are serial (rule
1.3) and a ``request`` made inside ``on_next`` never recurses (rule 3.3).
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import Generic, TypeVar

from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand, require_not_none

__all__ = ["AsyncIterablePublisher", "INT_MAX", "create_helper_publisher"]

T = TypeVar("T")

INT_MAX = 2**31 - 1
"""Java's ``Integer.MAX_VALUE``: helper publishers asked for more elements than this are infinite."""

_SUBSCRIBE, _REQUEST, _SEND, _CANCEL = range(4)


class AsyncIterablePublisher(Generic[T]):
    """Publishes the elements of ``elements()`` (called once per subscriber) on ``executor``.

    An empty iterable completes right after ``on_subscribe``, without demand. ``request(n <= 0)`` signals
    ``on_error(ValueError)`` (rule 3.9); demand is capped at ``LONG_MAX`` (rule 3.17).
    """

    def __init__(self, elements: Callable[[], Iterable[T]], executor: Executor, batch_size: int = 1024) -> None:
        self._elements = elements
        self._executor = executor
        self._batch_size = batch_size

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        _IterableSubscription(self._elements, self._executor, self._batch_size, subscriber).start()


class _IterableSubscription(Generic[T]):
    def __init__(
        self, elements: Callable[[], Iterable[T]], executor: Executor, batch_size: int, subscriber: Subscriber[T]
    ) -> None:
        self._elements: Callable[[], Iterable[T]] | None = elements
        self._executor = executor
        self._batch_size = batch_size
        self._subscriber: Subscriber[T] | None = subscriber
        self._iterator: Iterator[T] | None = None
        self._lookahead: T
        self._cancel_requested = False
        self._demand = 0
        self._done = False  # cancelled or terminated: no further signals
        self._inbox: deque[tuple[int, int]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def start(self) -> None:
        self._signal(_SUBSCRIBE)

    # -- the Subscription, called by the subscriber on any thread -----------------------------------------------

    def request(self, n: int) -> None:
        self._signal(_REQUEST, n)

    def cancel(self) -> None:
        self._cancel_requested = True  # seen by a running send loop at once; the inbox does the rest
        self._signal(_CANCEL)

    # -- the actor ------------------------------------------------------------------------------------------------

    def _signal(self, kind: int, n: int = 0) -> None:
        with self._lock:
            self._inbox.append((kind, n))
            if self._scheduled:
                return
            self._scheduled = True
        self._schedule()

    def _schedule(self) -> None:
        try:
            self._executor.submit(self._run)
        except RuntimeError:
            # The executor is shut down (the test is over): nobody can be signalled any more.
            self._release()

    def _run(self) -> None:
        for _ in range(self._batch_size):
            with self._lock:
                if not self._inbox:
                    self._scheduled = False
                    return
                kind, n = self._inbox.popleft()
            if not self._done:
                self._handle(kind, n)
            else:
                self._release()
        self._schedule()  # fairness: let other subscriptions run, then continue with the inbox

    def _handle(self, kind: int, n: int) -> None:
        if kind == _SUBSCRIBE:
            self._do_subscribe()
        elif kind == _REQUEST:
            if n <= 0:
                self._terminate_with(
                    ValueError(f"rule 3.9: {self._subscriber!r} requested a non-positive number of elements ({n})")
                )
            else:
                self._demand = add_demand(self._demand, n)
                self._do_send()
        elif kind == _SEND:
            self._do_send()
        else:
            self._done = True
            self._release()

    def _do_subscribe(self) -> None:
        assert self._elements is not None and self._subscriber is not None
        subscriber = self._subscriber
        subscriber.on_subscribe(self)
        if self._cancel_requested:  # cancelled inside on_subscribe: signal nothing more (rule 1.8)
            self._release()
            return
        try:
            self._iterator = iter(self._elements())
        except Exception as error:
            self._terminate_with(error)
            return
        # Look one element ahead so the stream completes right after its last element, without extra demand,
        # and an empty source completes at once (rule 1.5).
        self._advance()

    def _advance(self) -> None:
        """Fetch the look-ahead element; complete or fail the stream when the source ends or raises."""
        assert self._iterator is not None
        try:
            self._lookahead = next(self._iterator)
        except StopIteration:
            subscriber = self._subscriber
            self._release()
            if subscriber is not None and not self._cancel_requested:
                subscriber.on_complete()
        except Exception as error:
            self._terminate_with(error)

    def _do_send(self) -> None:
        sent = 0
        while self._demand > 0 and not self._done and not self._cancel_requested and sent < self._batch_size:
            subscriber = self._subscriber
            if subscriber is None:
                return
            element = self._lookahead
            if self._demand < LONG_MAX:  # unbounded demand is never decremented
                self._demand -= 1
            sent += 1
            try:
                subscriber.on_next(element)
            except Exception:
                # The subscriber broke rule 2.13; stop signalling it (the kit's subscribers record the reason).
                self._release()
                return
            del subscriber
            self._advance()
        if self._demand > 0 and not self._done and not self._cancel_requested:
            self._signal(_SEND)  # more to do: continue in a later run, after the other signals

    def _terminate_with(self, error: BaseException) -> None:
        subscriber = self._subscriber
        self._done = True
        self._release()
        if subscriber is not None:
            subscriber.on_error(error)

    def _release(self) -> None:
        """Drop the subscriber and the source (rule 3.13)."""
        self._done = True
        self._subscriber = None
        self._iterator = None
        self._elements = None
        self.__dict__.pop("_lookahead", None)


def create_helper_publisher(
    create_element: Callable[[int], T], elements: int, executor: Executor
) -> AsyncIterablePublisher[T]:
    """A publisher of ``create_element(0)``, ``create_element(1)``, ... : exactly ``elements`` of them, or infinite
    when ``elements > INT_MAX`` (the JVM kit's rule)."""
    if elements > INT_MAX:
        return AsyncIterablePublisher(lambda: map(create_element, itertools.count()), executor)
    return AsyncIterablePublisher(lambda: map(create_element, range(elements)), executor)
