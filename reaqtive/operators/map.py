"""``map``: apply a function to each element."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Map"]

S = TypeVar("S")
R = TypeVar("R")


@register_operator("map")
class Map(StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """The running stage of ``Query.map``. State: none beyond the base (disposed). Demand passes straight
    through: one element in, one out."""

    name = "reaqtive:map"
    version: Version = (1,)

    __slots__ = ("_selector", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        source, selector = query.args
        assert isinstance(source, Subscribable) and callable(selector)
        self._source: Subscribable[S] = source
        self._selector: Callable[[S], R] = selector

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: S) -> None:
        try:
            result = self._selector(value)
        except Exception as error:
            self._signal_error(error)
            return
        if result is None:
            self._signal_error(TypeError(f"map: the selector returned None for {value!r}; None is never an element"))
            return
        self._downstream.on_next(result)
