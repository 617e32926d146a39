"""``filter``: keep the elements that satisfy a predicate."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Filter"]

T = TypeVar("T")


@register_operator("filter")
class Filter(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.filter``.

    Demand: passed upstream; each dropped element is replaced with ``request(1)`` upstream so the downstream's
    outstanding demand stays covered. Once the downstream has requested ``LONG_MAX`` in total, demand is
    effectively unbounded (rule 3.17) and dropping costs nothing more.
    """

    name = "reaqtive:filter"
    version: Version = (1,)

    __slots__ = ("_predicate", "_requested", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        source, predicate = query.args
        assert isinstance(source, Subscribable) and callable(predicate)
        self._source: Subscribable[T] = source
        self._predicate: Callable[[T], object] = predicate
        self._requested = 0

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)
        super().request(n)

    def on_next(self, value: T) -> None:
        try:
            keep = self._predicate(value)
        except Exception as error:
            self._signal_error(error)
            return
        if keep:
            self._downstream.on_next(value)
        elif self._requested != LONG_MAX:
            upstream = self._upstream
            if upstream is not None:
                upstream.request(1)
