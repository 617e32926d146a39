"""``take``: the first ``count`` elements, or the elements of the first ``duration``, then complete."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._take_skip import TakeUntilDeadline
from reaqtive.operators._timing import deadline
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.state.fields import time_bounds
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Take", "TakeDuration"]

T = TypeVar("T")


@register_operator("take")
class Take(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.take(count)``.

    State: ``remaining``, how many elements are still to pass. Completes together with the last one and
    unsubscribes from the source; ``take(0)`` never subscribes to the source and completes at start.

    Demand: never more upstream than it still needs: ``request(n)`` asks ``min(n, remaining - requested so far)``
    upstream, so a source is never asked for an element the result would not deliver. ``_can_request`` (how many
    may still be requested upstream) belongs to the demand path and ``_remaining`` to the element path, so the
    two need no lock; a recovered stage starts with ``_can_request = remaining`` (its new upstream owes nothing).
    """

    name = "reaqtive:take"
    version: Version = (1,)

    __slots__ = ("_can_request", "_remaining", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "count")
        self._source: Subscribable[T] = args.source(0)
        self._remaining = count = args.integer(1)
        self._can_request = count

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._remaining)

    def load_state_core(self, reader: StateReader) -> None:
        # _remaining is still the query's count here: what is left of it cannot be more
        self._remaining = self._can_request = reader.read_int("remaining", maximum=self._remaining)

    def subscribe_input(self) -> SubscriptionHandle:
        if self._remaining == 0:
            return NOP_SUBSCRIPTION  # take(0): the source is never needed
        return self._source.subscribe(self)

    def on_start(self) -> None:
        if self._remaining == 0:
            self._signal_complete()

    def request(self, n: int) -> None:
        if n <= 0:
            super().request(n)  # the upstream (or the base, before it arrived) signals the rule 3.9 error
            return
        want = min(n, self._can_request)
        if want:
            self._can_request -= want
            super().request(want)

    def on_next(self, value: T) -> None:
        remaining = self._remaining - 1
        self._remaining = remaining
        self._state.changed = True
        self._downstream.on_next(value)
        if remaining == 0:
            self._signal_complete()


@register_operator("take_duration", frames=2)
class TakeDuration(TakeUntilDeadline[T], Generic[T]):
    """The running stage of ``Query.take(duration)``: the elements of the first ``duration`` after it started,
    then completion (and unsubscription from the source).

    State: ``end``, the absolute time it completes (set at the first start, ``None`` before), so a recovered
    stage completes when the original would have, or at once if that time has passed. Time-based: needs a
    scheduler. Demand passes straight through; a lock serializes the timer's completion with the elements.
    """

    name = "reaqtive:take+duration"
    version: Version = (1,)

    __slots__ = ("_duration", "_end", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "duration")
        self._source: Subscribable[T] = args.source(0)
        self._duration = args.duration(1)
        self._end: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._end)

    def load_state_core(self, reader: StateReader) -> None:
        self._end = reader.read_optional_datetime("end", *time_bounds(self.context, self._duration))

    @property
    def operator_label(self) -> str:
        return "take(duration)"

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def deadline(self, now: datetime) -> datetime | None:
        if self._end is None:
            self._end = deadline(now, self._duration)  # NEVER past datetime.max: it takes everything
            self._state.changed = True
        return self._end
