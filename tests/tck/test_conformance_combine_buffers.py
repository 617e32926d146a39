"""Reactive Streams conformance of the combine and buffers family: ``merge``, ``combine_latest`` and ``buffer``
(by count, count and skip, duration, duration and shift, duration or count).

* ``merge`` and ``combine_latest`` are publishers over ``from_iterable`` sources, and identity processors (merged
  with an empty source; combined with a one-element source whose element the selector ignores).
* The count buffers are publishers of exactly ``n`` lists over ``from_iterable(range(k))``, and ``buffer(1)``
  followed by ``map`` (unwrapping the one-element list) is an identity processor.
* The time buffers run on a real scheduler (worker threads) and emit on the clock, so they cannot end after
  exactly ``n`` lists by themselves: a small relay, :class:`FirstN`, completes the stream after ``n`` lists and
  cancels the buffer. Everything else (demand, serialized signals from timer and source threads, cancellation,
  rule 3.9, the error of a failed source) is the buffer's own behaviour seen through the relay, which adds no
  queue and passes ``request(n)`` through unchanged, non-positive ``n`` included.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, Generic, TypeVar

from reaqtive import LONG_MAX, OperatorContext, Query, SimpleSubject, as_publisher, from_iterable
from reaqtive.core.streams import Publisher, Subscriber, Subscription, require_not_none
from reaqtive.core.subscribers import NOP_SUBSCRIBER
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler
from tests.tck.conformance import (
    OperatorProcessorVerification,
    QueryPublisherVerification,
    failing_source,
)

T = TypeVar("T")


def second(_: object, value: int) -> int:
    return value


# -- merge -----------------------------------------------------------------------------------------------------


class TestMergePublisher(QueryPublisherVerification):
    """Two sources, each with half of the elements."""

    operators = ("merge",)

    def create_query(self, elements: int) -> Query[Any]:
        half = elements // 2
        return from_iterable(range(half)).merge(from_iterable(range(half, elements)))

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().merge(from_iterable(range(3)))


class TestMergeProcessor(OperatorProcessorVerification):
    operators = ("merge",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.merge(from_iterable([]))


# -- combine_latest --------------------------------------------------------------------------------------------


class TestCombineLatestPublisher(QueryPublisherVerification):
    """A one-element source first (it has its element before the other source starts), then the range."""

    operators = ("combine_latest",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable([-1]).combine_latest(from_iterable(range(elements)), second)

    def create_failed_query(self) -> Query[Any] | None:
        return from_iterable([-1]).combine_latest(failing_source(), second)


class TestCombineLatestProcessor(OperatorProcessorVerification):
    operators = ("combine_latest",)

    def apply(self, source: Query[int]) -> Query[int]:
        return from_iterable([-1]).combine_latest(source, second)


# -- buffer by count -------------------------------------------------------------------------------------------


class TestBufferCountPublisher(QueryPublisherVerification):
    operators = ("buffer",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(3 * elements)).buffer(3)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().buffer(3)


class TestBufferCountProcessor(OperatorProcessorVerification):
    """``buffer(1)`` then unwrapping the list: an identity processor that exercises the demand translation."""

    operators = ("buffer",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.buffer(1).map(lambda items: items[0])


class TestBufferCountSkipPublisher(QueryPublisherVerification):
    """Overlapping lists: a list opens every 2 elements, so ``2 n`` elements make ``n`` lists."""

    operators = ("buffer",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(2 * elements)).buffer(3, 2)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().buffer(3, 2)


class TestBufferCountGapsPublisher(QueryPublisherVerification):
    """Lists with gaps: 2 elements of every 3, so ``3 n - 1`` elements make ``n`` lists."""

    operators = ("buffer",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(max(0, 3 * elements - 1))).buffer(2, 3)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().buffer(2, 3)


# -- buffer by time, on a real scheduler -----------------------------------------------------------------------


class FirstN(Publisher[T], Generic[T]):
    """A relay that passes the first ``n`` elements of ``publisher`` and then completes, cancelling it."""

    def __init__(self, publisher: Publisher[T], n: int) -> None:
        self._publisher = publisher
        self._n = n

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        self._publisher.subscribe(_FirstNSubscription(subscriber, self._n))


class _FirstNSubscription(Subscriber[T], Subscription, Generic[T]):
    def __init__(self, downstream: Subscriber[T], n: int) -> None:
        self._downstream: Subscriber[T] = downstream
        self._remaining = n
        self._upstream: Subscription | None = None
        self._done = False
        self._lock = threading.Lock()

    def _finish(self) -> bool:
        with self._lock:
            finished, self._done = self._done, True
        return not finished

    def on_subscribe(self, subscription: Subscription) -> None:
        self._upstream = subscription
        self._downstream.on_subscribe(self)
        if self._remaining == 0 and self._finish():
            subscription.cancel()
            downstream, self._downstream = self._downstream, NOP_SUBSCRIBER
            downstream.on_complete()

    def on_next(self, value: T) -> None:
        if self._done:
            return
        self._remaining -= 1
        self._downstream.on_next(value)
        if self._remaining == 0 and self._finish():
            assert self._upstream is not None
            self._upstream.cancel()
            downstream, self._downstream = self._downstream, NOP_SUBSCRIBER
            downstream.on_complete()

    def on_error(self, error: BaseException) -> None:
        if self._finish():
            downstream, self._downstream = self._downstream, NOP_SUBSCRIBER
            downstream.on_error(error)

    def on_complete(self) -> None:
        if self._finish():
            downstream, self._downstream = self._downstream, NOP_SUBSCRIBER
            downstream.on_complete()

    def request(self, n: int) -> None:
        upstream = self._upstream
        if upstream is not None and not self._done:
            upstream.request(n)

    def cancel(self) -> None:
        self._done = True
        self._downstream = NOP_SUBSCRIBER  # rule 3.13: let the subscriber go
        upstream = self._upstream
        if upstream is not None:
            upstream.cancel()


PERIOD = timedelta(milliseconds=1)


class _ScheduledBufferVerification(QueryPublisherVerification):
    """A time buffer over a real scheduler, relayed by :class:`FirstN`."""

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)
        self.physical = PhysicalScheduler(workers=2, name="tck-buffers")
        self.context = OperatorContext(
            "test://tck/buffers",
            LogicalScheduler(self.physical),
            # the kit leaves a subscriber without demand for up to its timeout: let lists wait meanwhile
            settings={MAX_QUEUE_SIZE: 100_000},
        )

    def teardown_method(self, method: object = None) -> None:
        super().teardown_method(method)
        self.physical.dispose()

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return FirstN(as_publisher(self.create_query(elements), self.context), elements)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        query = self.create_failed_query()
        return None if query is None else as_publisher(query, self.context)


def silent() -> Query[int]:
    """A source that never emits and never ends: the lists are the clock's alone."""
    return SimpleSubject[int]().as_query()  # type: ignore[no-any-return]


class TestBufferTimePublisher(_ScheduledBufferVerification):
    operators = ("buffer_time",)

    def create_query(self, elements: int) -> Query[Any]:
        return silent().buffer(PERIOD)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().buffer(PERIOD)


class TestBufferTimeShiftPublisher(_ScheduledBufferVerification):
    operators = ("buffer_time",)

    def create_query(self, elements: int) -> Query[Any]:
        return silent().buffer(PERIOD * 2, PERIOD)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().buffer(PERIOD * 2, PERIOD)


class TestBufferTimeOrCountPublisher(_ScheduledBufferVerification):
    """Lists of one element from an endless source (closed by count, demand translated), on a long timer."""

    operators = ("buffer_time_or_count",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(LONG_MAX)).buffer(timedelta(hours=1), 1)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().buffer(timedelta(hours=1), 1)
