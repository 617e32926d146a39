"""Hot and cold test sources: scripted notifications on virtual time, honouring Reactive Streams demand.

Both log every subscription (:class:`~reaqtive.testing.notifications.SubscriptionLog`, taken when the downstream
operator's ``subscribe()`` runs, closed when the subscription is disposed, cancelled or terminated) and every
``request(n)`` (``Recorded(time, n)`` in ``requests``), so operator tests can assert both the output and the
demand the operator signalled.

Demand: a message that finds no demand waits in the subscription's buffer (unbounded: a test source stands for
a well-behaved upstream) and is delivered on the next ``request``. A terminal message waits behind the buffered
elements. ``request(n <= 0)`` signals ``on_error(ValueError)`` (rule 3.9).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.core.operator import OperatorBase
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand, non_positive_request_error
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.fluent.query import Query
from reaqtive.scheduler import HARNESS_PRIORITY, ActionTask
from reaqtive.testing.notifications import (
    Notification,
    OnCompleted,
    OnError,
    OnNext,
    Recorded,
    SubscriptionLog,
)

if TYPE_CHECKING:
    from reaqtive.core.scheduler_interface import Scheduler
    from reaqtive.testing.scheduler import TestScheduler

__all__ = ["ColdSource", "HotSource", "TestSource", "TestableQuery"]

T = TypeVar("T")


class TestSource(Subscribable[T], Generic[T]):
    """What hot and cold sources share: the script, the subscription log and the request log."""

    __test__ = False

    def __init__(self, scheduler: TestScheduler, messages: Iterable[Recorded[Notification[T]]]) -> None:
        self._scheduler = scheduler
        self._messages = tuple(_checked(messages))
        self.subscriptions: list[SubscriptionLog] = []
        """One entry per subscription, in subscription order."""
        self.requests: list[Recorded[int]] = []
        """Every ``request(n)`` as ``Recorded(time, n)``, across subscriptions, in order."""

    @property
    def scheduler(self) -> TestScheduler:
        """The scheduler whose clock times the logs."""
        return self._scheduler

    @property
    def messages(self) -> tuple[Recorded[Notification[T]], ...]:
        """The script."""
        return self._messages

    def _log_subscribe(self) -> int:
        self.subscriptions.append(SubscriptionLog(self._scheduler.clock))
        return len(self.subscriptions) - 1

    def _log_unsubscribe(self, index: int) -> None:
        self.subscriptions[index] = SubscriptionLog(self.subscriptions[index].subscribe, self._scheduler.clock)

    def _log_request(self, n: int) -> None:
        self.requests.append(Recorded(self._scheduler.clock, n))

    def _detach(self, subscription: _SourceSubscription[T]) -> None:
        """A subscription ended (hot sources forget it)."""


class _SourceSubscription(OperatorBase[T], Generic[T]):
    """One subscriber of a test source: its demand, its buffer and a drain loop that never recurses."""

    __slots__ = ("_bad_request", "_buffer", "_demand", "_draining", "_log_index", "_ready", "_source")

    def __init__(self, source: TestSource[T], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._source = source
        self._buffer: deque[Notification[T]] = deque()
        self._demand = 0
        self._bad_request: int | None = None
        self._draining = False
        self._ready = False
        self._log_index = source._log_subscribe()

    def request(self, n: int) -> None:
        if self._disposed:
            return  # rule 3.6
        self._source._log_request(n)
        if n <= 0:
            if self._bad_request is None:
                self._bad_request = n
        else:
            self._demand = add_demand(self._demand, n)
        self._drain()

    def enqueue(self, notification: Notification[T]) -> None:
        """A scripted message arrives."""
        if self._disposed:
            return
        self._buffer.append(notification)
        self._drain()

    def on_start(self) -> None:
        self._ready = True
        self._drain()

    def on_dispose(self) -> None:
        self._buffer.clear()
        self._source._log_unsubscribe(self._log_index)
        self._source._detach(self)

    def _drain(self) -> None:
        if self._draining or not self._ready:
            return
        self._draining = True
        try:
            buffer = self._buffer
            while not self._disposed:
                if self._bad_request is not None:
                    self._signal_error(non_positive_request_error(self._bad_request))
                    return
                if not buffer:
                    return
                head = buffer[0]
                if isinstance(head, OnNext):
                    if self._demand == 0:
                        return
                    if self._demand != LONG_MAX:
                        self._demand -= 1
                    buffer.popleft()
                    self._downstream.on_next(head.value)
                else:
                    buffer.clear()
                    if isinstance(head, OnError):
                        self._signal_error(head.error)
                    else:
                        self._signal_complete()
                    return
        finally:
            self._draining = False


class HotSource(TestSource[T], Generic[T]):
    """A hot source: its messages are scheduled at their absolute ticks when it is created (harness priority
    0) and go to every subscription attached at that moment (buffered until demanded). A subscription that
    arrives after a message missed it.

    ``backlog``: what earlier subscriptions of the same stream still held when a world was abandoned (see
    :meth:`held`); the ``i``-th subscription made to this source starts with ``backlog[i]`` in its buffer, so
    it delivers those messages first, as demand allows. This is how the checkpoint-anywhere harness replays,
    after a restart, the elements a subscriber was sent but had not asked for yet (as a durable stream replays
    the events after a reader's position)."""

    def __init__(
        self,
        scheduler: TestScheduler,
        messages: Iterable[Recorded[Notification[T]]],
        *,
        backlog: Iterable[Iterable[Notification[T]]] = (),
    ) -> None:
        super().__init__(scheduler, messages)
        self._active: list[_SourceSubscription[T]] = []
        self._backlog = [tuple(held) for held in backlog]
        self._subscribed = 0
        for message in self._messages:
            scheduler.schedule_absolute(message.time, self._emit, message.value, priority=HARNESS_PRIORITY)

    def subscribe_core(self, observer: Subscriber[T]) -> SubscriptionHandle:
        subscription = _SourceSubscription(self, observer)
        index, self._subscribed = self._subscribed, self._subscribed + 1
        if index < len(self._backlog):
            subscription._buffer.extend(self._backlog[index])
        self._active.append(subscription)
        return subscription

    def held(self) -> tuple[tuple[Notification[T], ...], ...]:
        """Per live subscription (in subscription order), the messages it holds for lack of demand."""
        return tuple(tuple(subscription._buffer) for subscription in self._active)

    def _emit(self, notification: Notification[T]) -> None:
        for subscription in list(self._active):
            subscription.enqueue(notification)

    def _detach(self, subscription: _SourceSubscription[T]) -> None:
        if subscription in self._active:
            self._active.remove(subscription)


class _ColdSubscription(_SourceSubscription[T], Generic[T]):
    """Replays the script relative to its own start, on a child of the context's scheduler (disposed with it,
    so nothing of a disposed subscription stays queued)."""

    __slots__ = ("_timeline",)

    def __init__(self, source: TestSource[T], downstream: Subscriber[T]) -> None:
        super().__init__(source, downstream)
        self._timeline: Scheduler | None = None

    def on_start(self) -> None:
        context = self._context
        base: Scheduler = context.scheduler if context is not None and context.has_scheduler else self._source.scheduler
        timeline = self._timeline = base.create_child()
        tick: timedelta = self._source.scheduler.tick
        for message in self._source.messages:
            timeline.schedule(ActionTask(self.enqueue, message.value, priority=HARNESS_PRIORITY), tick * message.time)
        super().on_start()

    def on_dispose(self) -> None:
        if self._timeline is not None:
            self._timeline.dispose()
        super().on_dispose()


class ColdSource(TestSource[T], Generic[T]):
    """A cold source: each subscription replays the script, message ``Recorded(t, n)`` at ``t`` ticks after the
    subscription started (``t = 0``: in the starting tick), with harness priority."""

    def subscribe_core(self, observer: Subscriber[T]) -> SubscriptionHandle:
        return _ColdSubscription(self, observer)


class TestableQuery(Query[T], Generic[T]):
    """A :class:`~reaqtive.fluent.query.Query` over a test source, so tests chain operators (``xs.map(f)``) and still
    read the source's logs (``xs.subscriptions``, ``xs.requests``)."""

    __test__ = False

    __slots__ = ("_source",)

    def __init__(self, source: TestSource[T]) -> None:
        super().__init__("subscribable", (source,))
        self._source = source

    @property
    def source(self) -> TestSource[T]:
        """The test source."""
        return self._source

    @property
    def subscriptions(self) -> list[SubscriptionLog]:
        """The source's subscription log."""
        return self._source.subscriptions

    @property
    def requests(self) -> list[Recorded[int]]:
        """The source's request log."""
        return self._source.requests

    @property
    def messages(self) -> tuple[Recorded[Notification[T]], ...]:
        """The script."""
        return self._source.messages


def _checked(messages: Iterable[Any]) -> Iterable[Recorded[Notification[Any]]]:
    for message in messages:
        if not isinstance(message, Recorded) or not isinstance(message.value, OnNext | OnError | OnCompleted):
            raise TypeError(
                f"a test source needs messages made with on_next/on_error/on_completed (not predicates), "
                f"got {message!r}"
            )
        if isinstance(message.value, OnNext) and message.value.value is None:
            raise TypeError(f"{message!r}: None is never a stream element (rule 2.13)")
        yield message
