"""``skip``: drop the first ``count`` elements, or the elements of the first ``duration``, pass the rest."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._take_skip import OpenAtDeadline
from reaqtive.operators._timing import deadline
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.state.fields import time_bounds
from reaqtive.streams import Subscriber, add_demand
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Skip", "SkipDuration"]

T = TypeVar("T")


@register_operator("skip")
class Skip(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.skip(count)``.

    State: ``remaining``, how many elements are still to drop.

    Demand: the elements to drop are requested together with the downstream's first demand (``n + remaining``
    upstream, once), after which demand passes straight through: the dropped elements are paid for up front
    instead of one ``request(1)`` each, and the upstream is never asked for more than it takes to deliver what
    the downstream requested. A recovered stage adds its restored ``remaining`` to its first request again.
    """

    name = "reaqtive:skip"
    version: Version = (1,)

    __slots__ = ("_asked_for_skipped", "_remaining", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "count")
        self._source: Subscribable[T] = args.source(0)
        self._remaining = args.integer(1)
        self._asked_for_skipped = False

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._remaining)

    def load_state_core(self, reader: StateReader) -> None:
        # _remaining is still the query's count here: what is left of it cannot be more
        self._remaining = reader.read_int("remaining", maximum=self._remaining)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0 and not self._asked_for_skipped:
            self._asked_for_skipped = True
            n = add_demand(n, self._remaining)  # nothing flows before the first request: _remaining is stable
        super().request(n)

    def on_next(self, value: T) -> None:
        if self._remaining:
            self._remaining -= 1
            self._state.changed = True
            return
        self._downstream.on_next(value)


@register_operator("skip_duration", frames=2)
class SkipDuration(OpenAtDeadline[T], Generic[T]):
    """The running stage of ``Query.skip(duration)``: drops the elements of the first ``duration`` after it
    started, then passes every element. Completion and errors pass at any time.

    State: ``end`` (the absolute time the gate opens, set at the first start, ``None`` before) and ``open``.
    Time-based: needs a scheduler. Demand: each element dropped before ``end`` is replaced with ``request(1)``
    upstream, unless demand is unbounded.
    """

    name = "reaqtive:skip+duration"
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
        writer.write(self._open)

    def load_state_core(self, reader: StateReader) -> None:
        self._end = reader.read_optional_datetime("end", *time_bounds(self.context, self._duration))
        self._open = reader.read_bool("open")

    @property
    def operator_label(self) -> str:
        return "skip(duration)"

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def deadline(self, now: datetime) -> datetime | None:
        if self._open:
            return None
        if self._end is None:
            self._end = deadline(now, self._duration)  # NEVER past datetime.max: it drops everything
            self._state.changed = True
        return self._end
