"""``skip_until``: drop elements until another stream signals, or until an absolute time; then pass them."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._take_skip import DroppingStage, OpenAtDeadline, UntilObserver
from reaqtive.streams import Subscriber, require_not_none
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["SkipUntil", "SkipUntilTime"]

T = TypeVar("T")


@register_operator("skip_until")
class SkipUntil(DroppingStage[T], Generic[T]):
    """The running stage of ``Query.skip_until(other)``.

    Two inputs, visited in this order: ``other`` (input 0) and the source (input 1). The other is subscribed and
    started first, so an other that signals at once opens the gate before the source emits (as in Rx.NET).

    * the source's elements are dropped until the other's first element, which opens the gate for good and
      unsubscribes the other;
    * the other's error (before its first element) is the result's error;
    * the other completing without an element unsubscribes it: the gate stays shut;
    * the source's error passes at any time; its completion passes once the gate is open, and before that it
      is dropped like the elements (as in Rx: the result then never completes, but an error of the other still
      reaches it).

    State: ``open``, ``other_done`` (the other ended: it signalled or completed) and ``source_done`` (the source
    completed while the gate was shut). A recovered stage disposes the inputs that had ended instead of
    listening to them again. Demand: each element dropped while the gate is shut is replaced with
    ``request(1)`` upstream, unless demand is unbounded; the other is asked for one element. Only terminal
    signals can race (the other never emits an element downstream), so only they take the lock.
    """

    name = "reaqtive:skip_until"
    version: Version = (1,)

    __slots__ = ("_lock", "_open", "_other", "_other_done", "_other_observer", "_source", "_source_done")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "other")
        self._source: Subscribable[T] = args.source(0)
        self._other: Subscribable[Any] = args.source(1)
        self._open = False
        self._other_done = False
        self._source_done = False
        self._other_observer = UntilObserver(self)
        self._lock = threading.RLock()

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._open)
        writer.write(self._other_done)
        writer.write(self._source_done)

    def load_state_core(self, reader: StateReader) -> None:
        self._open = reader.read_bool("open")
        self._other_done = reader.read_bool("other done")
        self._source_done = reader.read_bool("source done")

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
        # Restored: inputs that had ended before the checkpoint are not listened to again.
        if self._other_done:
            self._other_observer.cancel()
            self._inputs[0].dispose()
        if self._source_done:
            self._upstream_terminated()
            self._inputs[1].dispose()

    def on_dispose(self) -> None:
        self._other_observer.cancel()

    # -- the source ----------------------------------------------------------------------------------------------

    def on_next(self, value: T) -> None:
        if self._open:
            self._downstream.on_next(value)
        else:
            self._replace_dropped()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        with self._lock:
            self._upstream_terminated()
            self._signal_error(error)

    def on_complete(self) -> None:
        with self._lock:
            self._upstream_terminated()
            if self._open:
                self._signal_complete()
            elif not self._disposed:
                self._source_done = True
                self._state.changed = True

    # -- the other -----------------------------------------------------------------------------------------------

    def _on_other_next(self) -> None:
        with self._lock:
            if self._disposed:
                return
            self._open = self._other_done = True  # (after the source completed: Rx stays silent, so do we)
            self._state.changed = True
        self._other_observer.cancel()
        self._inputs[0].dispose()  # from inside the other's on_next: allowed (rule 3.5)

    def _on_other_error(self, error: BaseException) -> None:
        with self._lock:
            if not self._disposed:
                self._signal_error(error)

    def _on_other_complete(self) -> None:
        with self._lock:
            if not self._disposed:
                self._other_done = True
                self._state.changed = True


@register_operator("skip_until_time", frames=2)
class SkipUntilTime(OpenAtDeadline[T], Generic[T]):
    """The running stage of ``Query.skip_until(start_time)``: drops the elements before ``start_time``, then
    passes every element (all of them if ``start_time`` has passed when it starts). Completion and errors pass at
    any time.

    State: ``open``. Time-based: needs a scheduler. Demand: each element dropped before ``start_time`` is
    replaced with ``request(1)`` upstream, unless demand is unbounded.
    """

    name = "reaqtive:skip_until+time"
    version: Version = (1,)

    __slots__ = ("_source", "_start_time")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "start_time")
        self._source: Subscribable[T] = args.source(0)
        self._start_time = args.time(1)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._open)

    def load_state_core(self, reader: StateReader) -> None:
        self._open = reader.read_bool("open")

    @property
    def operator_label(self) -> str:
        return "skip_until(start_time)"

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def deadline(self, now: datetime) -> datetime | None:
        return None if self._open else self._start_time
