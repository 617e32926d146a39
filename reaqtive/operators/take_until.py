"""``take_until``: pass elements until another stream signals, or until an absolute time; then complete."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._take_skip import TakeUntilDeadline, UntilObserver
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber, require_not_none
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["TakeUntil", "TakeUntilTime"]

T = TypeVar("T")


@register_operator("take_until", frames=2)
class TakeUntil(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.take_until(other)``.

    Two inputs, visited in this order: ``other`` (input 0) and the source (input 1). The other is subscribed and
    started first, so an other that signals at once ends the result before the source emits (as in Rx.NET).

    * the other's first element completes the result and unsubscribes both inputs;
    * the other's error is the result's error;
    * the other completing without an element can never end the result: every element passes from then on;
    * the source's elements, completion and error pass through.

    State: ``other_done`` (the other completed without an element). A recovered stage with it set disposes its
    other input at start instead of listening again. Demand: passes straight through to the source; the other
    is asked for one element. A lock serializes the two inputs' signals downstream (rule 1.3) for as long as
    the other can still end the result; after ``other_done`` elements pass without it.
    """

    name = "reaqtive:take_until"
    version: Version = (1,)

    __slots__ = ("_lock", "_other", "_other_done", "_other_observer", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "other")
        self._source: Subscribable[T] = args.source(0)
        self._other: Subscribable[Any] = args.source(1)
        self._other_done = False
        self._other_observer = UntilObserver(self)
        self._lock = threading.RLock()  # re-entrant: a downstream may cancel or feed the other from a signal

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._other_done)

    def load_state_core(self, reader: StateReader) -> None:
        self._other_done = reader.read_bool("other done")

    # -- inputs --------------------------------------------------------------------------------------------------

    def subscribe_inputs(self) -> tuple[SubscriptionHandle, ...]:
        return (self._other.subscribe(self._other_observer), self.subscribe_input())

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    @property
    def input(self) -> SubscriptionHandle:
        """The source's subscription (input 1; input 0 is the other's)."""
        return self._inputs[1] if self._inputs else NOP_SUBSCRIPTION

    def on_start(self) -> None:
        if self._other_done:  # restored: the other ended before the checkpoint; do not listen to it again
            self._other_observer.cancel()
            self._inputs[0].dispose()

    def on_dispose(self) -> None:
        self._other_observer.cancel()

    # -- the source ----------------------------------------------------------------------------------------------

    def on_next(self, value: T) -> None:
        if self._other_done:  # the other can no longer signal: nothing to serialize with
            self._downstream.on_next(value)
            return
        with self._lock:
            self._downstream.on_next(value)  # a no-op subscriber once the stage ended

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        with self._lock:
            self._upstream_terminated()
            self._signal_error(error)

    def on_complete(self) -> None:
        with self._lock:
            self._upstream_terminated()
            self._signal_complete()

    # -- the other -----------------------------------------------------------------------------------------------

    def _on_other_next(self) -> None:
        with self._lock:
            if not self._disposed:
                self._signal_complete()

    def _on_other_error(self, error: BaseException) -> None:
        with self._lock:
            if not self._disposed:
                self._signal_error(error)

    def _on_other_complete(self) -> None:
        with self._lock:
            if not self._disposed:
                self._other_done = True
                self._state.changed = True


@register_operator("take_until_time", frames=2)
class TakeUntilTime(TakeUntilDeadline[T], Generic[T]):
    """The running stage of ``Query.take_until(end_time)``: the elements before ``end_time``, then completion
    (and unsubscription from the source); at once if ``end_time`` has passed when it starts.

    State: none beyond the base (the time is part of the query; a stage past it has completed). Time-based:
    needs a scheduler. Demand passes straight through; a lock serializes the timer's completion with the
    elements.
    """

    name = "reaqtive:take_until+time"
    version: Version = (1,)

    __slots__ = ("_end_time", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "end_time")
        self._source: Subscribable[T] = args.source(0)
        self._end_time = args.time(1)

    @property
    def operator_label(self) -> str:
        return "take_until(end_time)"

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def deadline(self, now: datetime) -> datetime | None:
        return self._end_time
