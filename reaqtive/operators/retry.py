"""``retry``: on an error, subscribe to the source again (forever, or up to a number of attempts in all)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_positive_int
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import (
    LONG_MAX,
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import set_context_all, start_all, subscribe_all
from reaqtive.scheduler import ActionTask
from reaqtive.state import StatefulOperatorBase

if TYPE_CHECKING:
    from collections.abc import Iterable


__all__ = ["Retry", "RetryArgs", "RetryCount", "retry"]

T = TypeVar("T")


def retry(count: int | None = None) -> OperatorCall[Any]:
    """On an error, subscribe to this source again: forever, or up to ``count`` attempts in all (the first
    included), after which the last error goes downstream.

    >>> from reaqtive.testing import TestScheduler, on_next, on_error
    >>> scheduler = TestScheduler()
    >>> xs = scheduler.create_cold_observable(on_next(5, 1), on_error(10, ValueError("flaky")))
    >>> scheduler.start(lambda: xs.retry(2)).messages
    [OnNext(1)@205, OnNext(1)@215, OnError(ValueError('flaky'))@220]
    >>> xs.subscriptions
    [Subscribe(200, 210), Subscribe(210, 220)]

    The new attempt starts inside the failed one's ``on_error`` (a cold source restarts in the same tick, as
    Rx). An attempt that fails again while it starts is not re-subscribed recursively: hosted, the next one
    is scheduled; standalone, a loop takes it. A failure to subscribe to the source at all (binding or context
    errors) is not retried: it ends the subscription with that error. ``count`` must be at least 1 (Rx's
    ``retry(0)`` completes without subscribing, Reaqtive's subscribes once: both surprise, so it is refused).

    **State.** The attempts left, the current one included (counted form); none forever.

    **Demand.** Passed upstream; what was requested and not yet received is requested from each new attempt. A
    non-positive ``request`` goes to the current attempt too, and the rule 3.9 error it answers with is not
    retried.

    Reaqtive: Retry.
    """
    if count is not None:
        count = require_positive_int(count, "retry", "count")
    return OperatorCall("retry", (count,))


class RetryArgs(ArgsRecord, source="source", count="optional_positive_count"):
    """The arguments of a ``retry`` node: ``(source, count)``, ``count`` ``None`` for ever."""


@register_operator("retry", frames=4, builder=retry, args=RetryArgs)
def _bind_retry(query: Expression[Any], downstream: Subscriber[Any]) -> Retry[Any]:
    """``retry()`` or ``retry(count)``: one expression operator, two stages (their state differs)."""
    return Retry(query, downstream) if RetryArgs.read(query).count is None else RetryCount(query, downstream)


class Retry(StatefulOperatorBase[T], Generic[T]):
    """The running stage of :func:`retry` without a count: re-subscribes to the source after every error.

    Each attempt is a fresh subscription to the source, fully initialized (subscribe, context, start), held as
    this stage's single input, so visitors reach the current attempt's subtree (also after the stage ended:
    the saved state keeps its shape). An attempt that fails again *while it is being started* is not
    re-subscribed recursively: standalone, a trampoline loop takes the next attempt; hosted, the next attempt is
    scheduled, so a source that always fails at once never blocks the scheduler (and a checkpoint can pause in
    between).
    """

    name = "reaqtive:retry"
    version: Version = (1,)

    __slots__ = (
        "_again",
        "_attempt",
        "_bad_request",
        "_lock",
        "_remaining",
        "_requested",
        "_resubscribing",
        "_scheduler",
        "_source",
        "_upstream",
    )

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = RetryArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._remaining: int | None = args.count  # attempts left, the current included
        self._lock = threading.Lock()
        self._attempt: _Attempt[T] | None = None
        self._upstream: Subscription | None = None
        self._requested = 0
        self._bad_request = False
        self._resubscribing = False
        self._again = False
        self._scheduler: Scheduler | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        attempt = self._attempt = _Attempt(self)
        return (self._source.subscribe(attempt),)

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler if context.has_scheduler else None

    def on_dispose(self) -> None:
        with self._lock:
            upstream, self._upstream = self._upstream, None
            self._attempt = None
        if upstream is not None:
            upstream.cancel()  # the upstream may not be the input handle (an adapted Publisher)

    # -- downstream demand -----------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        with self._lock:
            upstream = self._upstream
            if n > 0:
                self._requested = add_demand(self._requested, n)
            else:
                self._bad_request = True  # the error the upstream signals for it is ours: not to be retried
        if upstream is not None:
            upstream.request(n)  # a non-positive n: the upstream signals the rule 3.9 error
        elif n <= 0 and not self._disposed:
            self._signal_error(non_positive_request_error(n))

    # -- the current attempt ---------------------------------------------------------------------------------

    def _on_attempt_subscribe(self, attempt: _Attempt[T], subscription: Subscription) -> None:
        with self._lock:
            accepted = attempt is self._attempt and self._upstream is None and not self._disposed
            if accepted:
                self._upstream = subscription
                outstanding = self._requested
        if not accepted:
            subscription.cancel()  # rule 2.5, or a stale attempt
            return
        if outstanding:
            subscription.request(outstanding)

    def _on_attempt_next(self, value: T) -> None:
        if self._requested != LONG_MAX:
            with self._lock:
                self._requested -= 1
        self._downstream.on_next(value)

    def _on_attempt_complete(self, attempt: _Attempt[T]) -> None:
        if self._end_attempt(attempt):
            self._signal_complete()

    def _on_attempt_error(self, attempt: _Attempt[T], error: BaseException) -> None:
        if not self._end_attempt(attempt):
            return
        if self._bad_request or not self._take_retry():
            self._signal_error(error)  # gave up: an upstream error, never the error policy's to skip
            return
        if not self._resubscribing:
            self._resubscribe_loop()
        elif self._scheduler is not None:
            self._scheduler.schedule(ActionTask(self._resubscribe_loop))  # failed while starting: not recursively
        else:
            self._again = True  # failed while starting: the running loop takes the next attempt

    def _end_attempt(self, attempt: _Attempt[T]) -> bool:
        """The attempt terminated itself (rule 2.4): forget its subscription, so that the teardown that may
        follow does not cancel it from inside its own signal (rule 2.3). False for a stale attempt."""
        with self._lock:
            if attempt is not self._attempt or self._disposed:
                return False
            self._attempt = None
            self._upstream = None
            return True

    def _take_retry(self) -> bool:
        """Whether another attempt is allowed (and count it)."""
        return True

    def _resubscribe_loop(self) -> None:
        self._resubscribing = True
        try:
            while not self._disposed:
                self._again = False
                self._resubscribe()
                if not self._again:
                    break
        finally:
            self._resubscribing = False

    def _resubscribe(self) -> None:
        """A new attempt: subscribe, initialize and start a fresh subtree in place of the failed one."""
        attempt = _Attempt(self)
        handle: SubscriptionHandle | None = None
        try:
            handle = self._source.subscribe(attempt)
            subscribe_all(handle)
            set_context_all(handle, self.context)
        except Exception as error:  # binding or context errors: the query's, not a user function's on an element
            if handle is not None:
                handle.dispose()
            self._signal_error(error)
            return
        with self._lock:
            disposed = self._disposed
            if not disposed:
                previous, self._inputs = self._inputs, (handle,)
                self._attempt = attempt
        if disposed:  # disposed meanwhile (from another thread)
            handle.dispose()
            return
        for old in previous:
            old.dispose()  # the failed attempt's subtree (already terminated: this only tears it down)
        start_all(handle)


class RetryCount(Retry[T], Generic[T]):
    """The running stage of :func:`retry` with a count: it saves the attempts left."""

    name = "reaqtive:retry+count"
    version: Version = (1,)

    __slots__ = ()

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._remaining)

    def load_state_core(self, reader: StateReader) -> None:
        # _remaining is still the query's count here: the attempts left, the current one included, are 1 to it
        count = self._remaining
        assert count is not None  # RetryCount is bound for retry(count) only
        self._remaining = reader.read_int("remaining", minimum=1, maximum=count)

    def _take_retry(self) -> bool:
        with self._lock:
            remaining = self._remaining
            assert remaining is not None
            if remaining <= 1:
                return False
            self._remaining = remaining - 1
        self._state.changed = True
        return True


class _Attempt(Subscriber[T], Generic[T]):
    """The subscriber of one attempt: relays its signals to the :class:`Retry` stage, which ignores a stale one."""

    __slots__ = ("_parent",)

    def __init__(self, parent: Retry[T]) -> None:
        self._parent = parent

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        self._parent._on_attempt_subscribe(self, subscription)

    def on_next(self, value: T) -> None:
        self._parent._on_attempt_next(value)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._parent._on_attempt_error(self, error)

    def on_complete(self) -> None:
        self._parent._on_attempt_complete(self)
