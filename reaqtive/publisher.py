"""The plain Reactive Streams view of a query: a :class:`~reaqtive.core.streams.Publisher` whose ``subscribe``
binds, initializes and starts in one call (an adapter over the Reaqtive lifecycle, not a second
implementation)."""

from __future__ import annotations

import itertools
import threading
from typing import Generic, TypeVar

from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import DEFAULT_INSTANCE_ID
from reaqtive.core.streams import Publisher, Subscriber, Subscription, require_not_none
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.visitors import set_context_all, start_all, subscribe_all

__all__ = ["SubscribablePublisher", "as_publisher"]

T = TypeVar("T")


class _RefusedSubscription(Subscription):
    """Given to a subscriber whose subscription could not be created, just before ``on_error``."""

    __slots__ = ()

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


class SubscribablePublisher(Publisher[T], Generic[T]):
    """A Reactive Streams publisher over a subscribable (usually a query).

    Each ``subscribe`` creates an independent subscription with its own operator context, derived from the
    given one with a numbered instance id. Failures while binding are signalled with ``on_subscribe`` then
    ``on_error``, never raised (rule 1.9); only a ``None`` subscriber raises :class:`TypeError`.
    """

    __slots__ = ("_context", "_counter", "_lock", "_source")

    def __init__(self, source: Subscribable[T], context: OperatorContext | None = None) -> None:
        if not isinstance(source, Subscribable):
            raise TypeError(f"as_publisher needs a Subscribable (a query), got {type(source).__name__}")
        self._source = source
        self._context = context if context is not None else OperatorContext(DEFAULT_INSTANCE_ID)
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber[T]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        with self._lock:
            number = next(self._counter)
        context = self._context.derive(f"{self._context.instance_id}/publisher/{number}")
        try:
            handle = self._source.subscribe(subscriber)
        except Exception as error:
            subscriber.on_subscribe(_RefusedSubscription())
            subscriber.on_error(error)
            return
        try:
            subscribe_all(handle)
            set_context_all(handle, context)
        except Exception as error:
            handle.dispose()
            subscriber.on_subscribe(_RefusedSubscription())
            subscriber.on_error(error)
            return
        start_all(handle)


def as_publisher(source: Subscribable[T], context: OperatorContext | None = None) -> Publisher[T]:
    """A Reactive Streams :class:`~reaqtive.core.streams.Publisher` over ``source`` (a query or any subscribable).

    >>> from reaqtive import from_iterable, CallbackSubscriber
    >>> as_publisher(from_iterable("ab")).subscribe(CallbackSubscriber(print))
    a
    b
    """
    return SubscribablePublisher(source, context)
