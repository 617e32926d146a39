"""``distinct_until_changed``: drop elements whose key equals the key of the element before."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["DistinctUntilChanged"]

T = TypeVar("T")


@register_operator("distinct_until_changed")
class DistinctUntilChanged(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.distinct_until_changed``: emits an element when its key (the element, or
    ``key_selector(element)``) differs from the current key, by ``==`` or by ``comparer(current, key)``
    (true: equal); the first element is always emitted. The current key changes only when an element is emitted.

    State: whether there is a current key, then the key (written only when it changes). Demand: as ``filter``
    (a ``request(1)`` upstream per dropped element, unless demand is unbounded).
    """

    name = "reaqtive:distinct_until_changed"
    version: Version = (1,)

    __slots__ = ("_comparer", "_has_key", "_key", "_key_selector", "_requested", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "key_selector", "comparer")
        self._source: Subscribable[T] = args.source(0)
        self._key_selector: Callable[[T], object] | None = args.optional_function(1)
        self._comparer: Callable[[object, object], object] | None = args.optional_function(2)
        self._requested = 0
        self._has_key = False
        self._key: object = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._has_key)
        writer.write(self._key)

    def load_state_core(self, reader: StateReader) -> None:
        self._has_key = reader.read_bool("has key")
        self._key = reader.read()  # the user's key

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)
        super().request(n)

    def on_next(self, value: T) -> None:
        try:
            key = value if self._key_selector is None else self._key_selector(value)
            if not self._has_key:
                same = False
            elif self._comparer is None:
                same = bool(key == self._key)
            else:
                same = bool(self._comparer(self._key, key))
        except Exception as error:
            self._signal_error(error)
            return
        if same:
            if self._requested != LONG_MAX:
                upstream = self._upstream
                if upstream is not None:
                    upstream.request(1)
            return
        self._key = key
        self._has_key = True
        self._state.changed = True
        self._downstream.on_next(value)
