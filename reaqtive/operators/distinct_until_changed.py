"""``distinct_until_changed``: drop elements whose key equals the key of the element before."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import arguments, require_callable
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, register_keyed_step
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["DistinctUntilChanged", "DistinctUntilChangedArgs", "distinct_until_changed"]

T = TypeVar("T")


def distinct_until_changed(
    key_selector: Callable[[T], object] | None = None,
    comparer: Callable[[Any, Any], object] | None = None,
) -> OperatorCall[T]:
    """Drop the elements whose key (the element, or ``key_selector(element)``) equals the key of the last
    element emitted.

    >>> from_iterable([1, 1, 2, 2, 1]).distinct_until_changed().run(print)  # doctest: +ELLIPSIS
    1
    2
    1
    <...>

    Keys are compared with ``==``, or with ``comparer(current_key, key) -> bool`` (true: equal). The first
    element is always emitted. An exception from ``key_selector`` or ``comparer`` becomes ``on_error``, or
    skips the element under a skip policy (the current key stays).

    **State.** Whether there is a current key, then the key, which changes only when an element is emitted (so
    it is marked changed only then); it must be a value the state codec can write. Inside a keyed ``group_by``,
    one field per key: ``()``, then ``(key,)``.

    **Demand.** As :meth:`filter` (a ``request(1)`` upstream per dropped element, unless demand is unbounded).

    Reaqtive: DistinctUntilChanged.
    """
    if key_selector is not None:
        require_callable(key_selector, "distinct_until_changed", "key_selector")
    if comparer is not None:
        require_callable(comparer, "distinct_until_changed", "comparer")
    return OperatorCall("distinct_until_changed", (key_selector, comparer))


@dataclass(frozen=True, slots=True)
class DistinctUntilChangedArgs:
    """The arguments of a ``distinct_until_changed`` node: ``(source, key_selector, comparer)``, both functions
    optional."""

    source: Subscribable[Any]
    key_selector: Callable[[Any], object] | None
    comparer: Callable[[Any, Any], object] | None

    @classmethod
    def read(cls, query: Expression[Any]) -> DistinctUntilChangedArgs:
        """The checked arguments of ``query`` (:class:`~reaqtive.core.errors.OperatorArgumentError` if they do not
        fit)."""
        args = arguments(query, "source", "key_selector", "comparer")
        return cls(args.source(0), args.optional_function(1), args.optional_function(2))


@register_operator("distinct_until_changed", builder=distinct_until_changed, args=DistinctUntilChangedArgs)
class DistinctUntilChanged(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`distinct_until_changed`."""

    timeless = True
    name = "reaqtive:distinct_until_changed"
    version: Version = (1,)
    state_fields = ("has_key", "key")

    __slots__ = ("_comparer", "_has_key", "_key", "_key_selector", "_requested", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = DistinctUntilChangedArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._key_selector: Callable[[T], object] | None = args.key_selector
        self._comparer: Callable[[object, object], object] | None = args.comparer
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
            self._user_error(error, value)
            return
        if same:
            self._element_skipped()  # dropped: replaced upstream
            return
        self._key = key
        self._has_key = True
        self._state.changed = True
        self._downstream.on_next(value)

    def _element_skipped(self) -> None:
        """One element was dropped (the same key, or skipped): ask for another, unless demand is unbounded."""
        if self._requested != LONG_MAX:
            upstream = self._upstream
            if upstream is not None:
                upstream.request(1)


class DistinctUntilChangedStep(KeyedStep):
    """:class:`DistinctUntilChanged` for one key of a keyed chain: the field is ``()`` before the first element,
    then ``(key,)`` (a key may be ``None``)."""

    __slots__ = ("_comparer", "_key_selector")

    initial = ()

    def __init__(
        self, key_selector: Callable[[Any], object] | None, comparer: Callable[[Any, Any], object] | None
    ) -> None:
        self._key_selector = key_selector
        self._comparer = comparer

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        key = value if self._key_selector is None else self._key_selector(value)
        if not state:
            same = False
        elif self._comparer is None:
            same = bool(key == state[0])
        else:
            same = bool(self._comparer(state[0], key))
        if same:
            return state, SKIP
        return (key,), value

    def check(self, state: Any) -> bool:
        return type(state) is tuple and len(state) <= 1


@register_keyed_step("distinct_until_changed")
def distinct_until_changed_step(query: Expression[Any]) -> DistinctUntilChangedStep:
    """The keyed step of a ``distinct_until_changed`` node (every overload)."""
    args = DistinctUntilChangedArgs.read(query)
    return DistinctUntilChangedStep(args.key_selector, args.comparer)
