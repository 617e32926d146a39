"""``skip_while``: drop elements while a predicate holds, then pass every element."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._take_skip import DroppingStage
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["SkipWhile", "SkipWhileIndexed"]

T = TypeVar("T")


@register_operator("skip_while")
class SkipWhile(DroppingStage[T], Generic[T]):
    """The running stage of ``Query.skip_while(predicate)``.

    State: ``running``, latched once the predicate was false for an element; from then on every element passes
    and the predicate is no longer called. Demand: each dropped element is replaced with ``request(1)``
    upstream, unless demand is unbounded.
    """

    name = "reaqtive:skip_while"
    version: Version = (1,)

    __slots__ = ("_predicate", "_running", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "predicate")
        self._source: Subscribable[T] = args.source(0)
        self._predicate: Callable[[T], object] = args.function(1)
        self._running = False

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._running)

    def load_state_core(self, reader: StateReader) -> None:
        self._running = reader.read_bool("running")

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        if self._running:
            self._downstream.on_next(value)
            return
        try:
            skip = self._predicate(value)
        except Exception as error:
            self._signal_error(error)
            return
        if skip:
            self._replace_dropped()
            return
        self._running = True
        self._state.changed = True
        self._downstream.on_next(value)


@register_operator("skip_while_indexed")
class SkipWhileIndexed(DroppingStage[T], Generic[T]):
    """The running stage of ``Query.skip_while_indexed(predicate)``: as ``skip_while``, with the element's
    index (0, 1, ...) as the predicate's second argument.

    State: ``running``, then ``index`` (the index of the next element; it stops counting once running).
    Demand: each dropped element is replaced with ``request(1)`` upstream, unless demand is unbounded.
    """

    name = "reaqtive:skip_while+indexed"
    version: Version = (1,)

    __slots__ = ("_index", "_predicate", "_running", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "predicate")
        self._source: Subscribable[T] = args.source(0)
        self._predicate: Callable[[T, int], object] = args.function(1)
        self._running = False
        self._index = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._running)
        writer.write(self._index)

    def load_state_core(self, reader: StateReader) -> None:
        self._running = reader.read_bool("running")
        self._index = reader.read_int("index")

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        if self._running:
            self._downstream.on_next(value)
            return
        index = self._index
        try:
            skip = self._predicate(value, index)
        except Exception as error:
            self._signal_error(error)
            return
        self._index = index + 1
        self._state.changed = True
        if skip:
            self._replace_dropped()
            return
        self._running = True
        self._downstream.on_next(value)
