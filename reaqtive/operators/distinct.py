"""``distinct``: keep only elements whose key has not been seen before."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators.settings import MAX_DISTINCT_ELEMENTS, read_limit
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Distinct", "DistinctComparer", "bind_distinct"]

T = TypeVar("T")


class _DistinctBase(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """What both variants share: arguments, the limit, and filter's demand policy."""

    __slots__ = ("_key_selector", "_limit", "_requested", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "key_selector", "comparer")
        self._source: Subscribable[T] = args.source(0)
        self._key_selector: Callable[[T], object] | None = args.optional_function(1)
        self._requested = 0
        self._limit = LONG_MAX

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._limit = read_limit(context, MAX_DISTINCT_ELEMENTS)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)
        super().request(n)

    def _dropped(self) -> None:
        if self._requested != LONG_MAX:
            upstream = self._upstream
            if upstream is not None:
                upstream.request(1)

    def _over_limit(self) -> None:
        self._signal_error(LimitExceededError(self.name, MAX_DISTINCT_ELEMENTS, self._limit))


class Distinct(_DistinctBase[T], Generic[T]):
    """``distinct()`` / ``distinct(key_selector)``: the keys seen so far in a ``set`` (keys must be hashable).

    State: the set of keys. Demand: as ``filter`` (a ``request(1)`` upstream per dropped element, unless
    demand is unbounded). Limit: ``MAX_DISTINCT_ELEMENTS`` keys.
    """

    name = "reaqtive:distinct"
    version: Version = (1,)

    __slots__ = ("_keys",)

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(query, downstream)
        self._keys: set[object] = set()

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._keys)

    def load_state_core(self, reader: StateReader) -> None:
        self._keys = reader.read_set("keys")  # the user's keys

    def on_next(self, value: T) -> None:
        keys = self._keys
        try:
            key = value if self._key_selector is None else self._key_selector(value)
            seen = key in keys
        except Exception as error:  # the key selector raised, or the key is not hashable
            self._signal_error(error)
            return
        if seen:
            self._dropped()
            return
        if len(keys) >= self._limit:
            self._over_limit()
            return
        keys.add(key)
        self._state.changed = True
        self._downstream.on_next(value)


class DistinctComparer(_DistinctBase[T], Generic[T]):
    """``distinct(comparer=...)`` (with or without a key selector): the keys seen so far in a list, in the
    order they were first seen, each new key compared with ``comparer(seen, key)`` against all of them: O(n)
    per element, O(n²) in all. For keys that can be hashed, a key selector (the Pythonic comparer) is faster.

    State: the list of keys. Demand: as ``filter``. Limit: ``MAX_DISTINCT_ELEMENTS`` keys.
    """

    name = "reaqtive:distinct+comparer"
    version: Version = (1,)

    __slots__ = ("_comparer", "_keys")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(query, downstream)
        self._comparer: Callable[[object, object], object] = arguments(
            query, "source", "key_selector", "comparer"
        ).function(2)
        self._keys: list[object] = []

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._keys)

    def load_state_core(self, reader: StateReader) -> None:
        self._keys = reader.read_list("keys")  # the user's keys

    def on_next(self, value: T) -> None:
        keys = self._keys
        comparer = self._comparer
        try:
            key = value if self._key_selector is None else self._key_selector(value)
            seen = any(comparer(other, key) for other in keys)
        except Exception as error:
            self._signal_error(error)
            return
        if seen:
            self._dropped()
            return
        if len(keys) >= self._limit:
            self._over_limit()
            return
        keys.append(key)
        self._state.changed = True
        self._downstream.on_next(value)


@register_operator("distinct")
def bind_distinct(query: Query[Any], downstream: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of ``distinct``: args ``(source, key_selector | None, comparer | None)``."""
    if arguments(query, "source", "key_selector", "comparer").value(2) is None:  # the stages check the rest
        return Distinct(query, downstream)
    return DistinctComparer(query, downstream)
