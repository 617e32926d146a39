"""``map`` and ``map_indexed``: apply a function to each element (and its index)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Map", "MapIndexed"]

S = TypeVar("S")
R = TypeVar("R")


@fusible("map", frames=2)
class Map(StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """The running stage of ``Query.map``. State: none beyond the base (disposed). Demand passes straight
    through: one element in, one out. Fuses with adjacent fusible stages (:mod:`reaqtive.operators._fusion`)."""

    name = "reaqtive:map"
    version: Version = (1,)

    __slots__ = ("_selector", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "selector")
        self._source: Subscribable[S] = args.source(0)
        self._selector: Callable[[S], R] = args.function(1)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: S) -> None:
        try:
            result = self._selector(value)
        except Exception as error:
            self._signal_error(error)
            return
        if result is None:
            self._selector_returned_none(value)
            return
        self._downstream.on_next(result)

    fused_step = FusedStep(
        "_selector",
        """
        try:
            {result} = {fn}({value})
        except Exception as error:
            {stage}._signal_error(error)
            {stop}
        if {result} is None:
            {stage}._selector_returned_none({value})
            {stop}
        """,
    )
    """:meth:`on_next` as a step of a fused run."""

    def _selector_returned_none(self, value: S) -> None:
        self._signal_error(TypeError(f"map: the selector returned None for {value!r}; None is never an element"))


@register_operator("map_indexed", frames=2)
class MapIndexed(StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """The running stage of ``Query.map_indexed``: ``selector(element, index)``, the index counting from 0.

    State: the index of the next element. Demand passes straight through: one element in, one out.
    """

    name = "reaqtive:map+index"
    version: Version = (1,)

    __slots__ = ("_index", "_selector", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "selector")
        self._source: Subscribable[S] = args.source(0)
        self._selector: Callable[[S, int], R] = args.function(1)
        self._index = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._index)

    def load_state_core(self, reader: StateReader) -> None:
        self._index = reader.read_int("index")

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: S) -> None:
        index = self._index
        try:
            result = self._selector(value, index)
        except Exception as error:
            self._signal_error(error)
            return
        if result is None:
            self._signal_error(
                TypeError(f"map_indexed: the selector returned None for {value!r}; None is never an element")
            )
            return
        self._index = index + 1
        self._state.changed = True
        self._downstream.on_next(result)
