"""``take_while``: pass elements while a predicate holds, then complete."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["TakeWhile", "TakeWhileIndexed"]

T = TypeVar("T")


@register_operator("take_while", frames=2)
class TakeWhile(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.take_while(predicate)``.

    State: none beyond the base (a stage that saw the first false predicate has completed: it is disposed).
    On the first element for which the predicate is false it completes (emitting that element first when
    ``inclusive``) and unsubscribes from the source. Demand passes straight through.
    """

    name = "reaqtive:take_while"
    version: Version = (1,)

    __slots__ = ("_inclusive", "_predicate", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "predicate", "inclusive")
        self._source: Subscribable[T] = args.source(0)
        self._predicate: Callable[[T], object] = args.function(1)
        self._inclusive = args.flag(2)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        try:
            keep = self._predicate(value)
        except Exception as error:
            self._signal_error(error)
            return
        if keep:
            self._downstream.on_next(value)
            return
        if self._inclusive:
            self._downstream.on_next(value)
        self._signal_complete()


@register_operator("take_while_indexed", frames=2)
class TakeWhileIndexed(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.take_while_indexed(predicate)``: as ``take_while``, with the element's
    index (0, 1, ...) as the predicate's second argument.

    State: ``index``, the index of the next element. Demand passes straight through.
    """

    name = "reaqtive:take_while+indexed"
    version: Version = (1,)

    __slots__ = ("_inclusive", "_index", "_predicate", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "predicate", "inclusive")
        self._source: Subscribable[T] = args.source(0)
        self._predicate: Callable[[T, int], object] = args.function(1)
        self._inclusive = args.flag(2)
        self._index = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._index)

    def load_state_core(self, reader: StateReader) -> None:
        self._index = reader.read_int("index")

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        index = self._index
        try:
            keep = self._predicate(value, index)
        except Exception as error:
            self._signal_error(error)
            return
        self._index = index + 1
        self._state.changed = True
        if keep:
            self._downstream.on_next(value)
            return
        if self._inclusive:
            self._downstream.on_next(value)
        self._signal_complete()
