"""The Reactive Streams :class:`~reaqtive.core.streams.Processor` view of a query stage.

``as_processor(lambda q: q.map(f))`` is a processor: it subscribes to an upstream publisher as a subscriber,
runs the query built over its input, and publishes the result to one downstream subscriber. Demand passes
through: what the downstream requests (after the query's own demand policy) is requested from the upstream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import ReaqtiveError
from reaqtive.core.operator import OperatorBase
from reaqtive.core.streams import (
    Processor,
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import set_context_all, start_all, subscribe_all
from reaqtive.fluent.query import DEFAULT_INSTANCE_ID, Query

__all__ = ["QueryProcessor", "as_processor"]

T = TypeVar("T")
R = TypeVar("R")


class _Refused(Subscription):
    __slots__ = ()

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


_REFUSED: Final = _Refused()


class _Completed:
    __slots__ = ()


_COMPLETED: Final = _Completed()


class QueryProcessor(Processor[T, R], Generic[T, R]):
    """A processor running ``build(input)`` between its upstream and its (single) downstream subscriber.

    ``None`` arguments raise :class:`TypeError` here, at the boundary (rules 2.13, 1.9). A second downstream
    subscriber is refused with ``on_subscribe`` then ``on_error`` (rule 1.9 allows rejecting subscribers).
    Signals the upstream sends before anyone subscribed downstream are kept: only a terminal signal can arrive
    then, since no demand has been signalled upstream.
    """

    __slots__ = ("_build", "_context", "_inlet", "_lock", "_pending", "_subscribed", "_terminal", "_upstream")

    def __init__(self, build: Callable[[Query[T]], Query[R]], context: OperatorContext | None = None) -> None:
        if not callable(build):
            raise TypeError(f"as_processor needs a function from a query to a query, got {build!r}")
        self._build = build
        self._context = context if context is not None else OperatorContext(f"{DEFAULT_INSTANCE_ID}/processor")
        self._lock = threading.Lock()
        self._upstream: Subscription | None = None
        self._pending = 0
        self._inlet: _InletStage[T] | None = None
        self._terminal: BaseException | _Completed | None = None
        self._subscribed = False

    # -- Subscriber side (from upstream) -----------------------------------------------------------------------

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        with self._lock:
            accepted = self._upstream is None
            if accepted:
                self._upstream = subscription
                pending, self._pending = self._pending, 0
        if not accepted:
            subscription.cancel()  # rule 2.5
            return
        if pending:
            subscription.request(pending)

    def on_next(self, value: T) -> None:
        if value is None:
            raise TypeError("rule 2.13: value must not be None")
        inlet = self._inlet
        if inlet is not None:
            inlet.emit(value)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._terminate(error)

    def on_complete(self) -> None:
        self._terminate(_COMPLETED)

    def _terminate(self, terminal: BaseException | _Completed) -> None:
        with self._lock:
            if self._terminal is not None:
                return
            self._terminal = terminal
            inlet = self._inlet
            # The upstream ended the subscription itself (rule 2.4): the query's teardown below must not cancel
            # it, since that call would come from inside on_complete/on_error (rule 2.3, found by reaqtive.tck).
            self._upstream = _REFUSED
        if inlet is not None:
            inlet.terminate(terminal)

    # -- Publisher side (to downstream) ------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber[R]) -> None:
        require_not_none(subscriber, "subscriber", "1.9")
        with self._lock:
            refused = self._subscribed
            self._subscribed = True
        if refused:
            subscriber.on_subscribe(_REFUSED)
            subscriber.on_error(ReaqtiveError("this processor supports a single subscriber"))
            return
        try:
            handle = self._build(Query.from_subscribable(_Inlet(self))).subscribe(subscriber)
            subscribe_all(handle)
            set_context_all(handle, self._context)
        except Exception as error:
            subscriber.on_subscribe(_REFUSED)
            subscriber.on_error(error)
            return
        start_all(handle)

    # -- used by the inlet stage -------------------------------------------------------------------------------

    def _attach(self, inlet: _InletStage[T]) -> None:
        with self._lock:
            self._inlet = inlet

    def _pending_terminal(self) -> BaseException | _Completed | None:
        with self._lock:
            return self._terminal

    def _request(self, n: int) -> None:
        with self._lock:
            upstream = self._upstream
            if upstream is None:
                self._pending = add_demand(self._pending, n)
                return
        upstream.request(n)

    def _cancel(self) -> None:
        with self._lock:
            upstream, self._inlet = self._upstream, None
        if upstream is not None:
            upstream.cancel()


class _Inlet(Subscribable[T]):
    """The processor's input, as the source of the query."""

    __slots__ = ("_processor",)

    def __init__(self, processor: QueryProcessor[T, Any]) -> None:
        self._processor = processor

    def subscribe_core(self, observer: Subscriber[T]) -> SubscriptionHandle:
        return _InletStage(self._processor, observer)


class _InletStage(OperatorBase[T]):
    """The query's source stage: it relays the upstream's signals down and the query's demand up."""

    __slots__ = ("_processor",)

    def __init__(self, processor: QueryProcessor[T, Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._processor = processor
        # Attach now, not at start: demand (and so elements) can flow while the start traversal is running.
        processor._attach(self)

    def on_start(self) -> None:
        terminal = self._processor._pending_terminal()
        if terminal is not None:
            self.terminate(terminal)

    def emit(self, value: T) -> None:
        self._downstream.on_next(value)

    def terminate(self, terminal: BaseException | _Completed) -> None:
        if not self._started:
            return  # on_start delivers it, after on_subscribe went downstream
        if isinstance(terminal, _Completed):
            self._signal_complete()
        else:
            self._signal_error(terminal)

    def request(self, n: int) -> None:
        if self._disposed:
            return
        if n <= 0:
            self._signal_error(non_positive_request_error(n))
            return
        self._processor._request(n)

    def on_dispose(self) -> None:
        self._processor._cancel()


def as_processor(
    build: Callable[[Query[T]], Query[R]], context: OperatorContext | None = None
) -> QueryProcessor[T, R]:
    """A Reactive Streams processor that runs ``build(input)``; e.g. ``as_processor(lambda q: q.map(f))``.

    >>> from reaqtive import CallbackSubscriber, as_publisher, from_iterable
    >>> doubler = as_processor(lambda q: q.map(lambda x: x * 2))
    >>> as_publisher(from_iterable([1, 2, 3])).subscribe(doubler)
    >>> doubler.subscribe(CallbackSubscriber(print))
    2
    4
    6
    """
    return QueryProcessor(build, context)
