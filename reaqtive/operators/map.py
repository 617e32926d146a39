"""``map`` and ``map_indexed``: apply a function to each element (and its index)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import arguments, require_callable
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.operators.keyed_steps import KeyedStep, StatelessStep, register_keyed_step
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["Map", "MapArgs", "MapIndexed", "MapIndexedArgs", "map", "map_indexed"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


def map(selector: Callable[[T], R]) -> OperatorCall[R]:
    """Apply ``selector`` to each element.

    >>> from_iterable([1, 2]).map(lambda x: x * 10).run(print)  # doctest: +ELLIPSIS
    10
    20
    <...>

    An exception from ``selector`` (or a ``None`` result) becomes ``on_error`` and ends the subscription, or
    skips the element under a skip policy (``docs/operators.md``, "When user code raises").

    **State.** None beyond the base (disposed).

    **Demand.** Passed upstream unchanged: one element in, one out.

    Reaqtive: Select.
    """
    require_callable(selector, "map", "selector")
    return OperatorCall("map", (selector,))


def map_indexed(selector: Callable[[T, int], R]) -> OperatorCall[R]:
    """Apply ``selector(element, index)`` to each element; the index counts from 0.

    >>> from_iterable("ab").map_indexed(lambda x, i: f"{i}:{x}").run(print)  # doctest: +ELLIPSIS
    0:a
    1:b
    <...>

    An exception from ``selector`` (or a ``None`` result) becomes ``on_error`` and ends the subscription, or
    skips the element under a skip policy: a skipped element takes no index (the next one gets its index).

    **State.** The index of the next element.

    **Demand.** Passed upstream unchanged: one element in, one out.

    Reaqtive: Select with index (``rc:Select+Index``).
    """
    require_callable(selector, "map_indexed", "selector")
    return OperatorCall("map_indexed", (selector,))


@dataclass(frozen=True, slots=True)
class MapArgs:
    """The arguments of a ``map`` node: ``(source, selector)``."""

    source: Subscribable[Any]
    selector: Callable[[Any], Any]

    @classmethod
    def read(cls, query: Expression[Any]) -> MapArgs:
        """The checked arguments of ``query`` (:class:`~reaqtive.core.errors.OperatorArgumentError` if they do not
        fit)."""
        args = arguments(query, "source", "selector")
        return cls(args.source(0), args.function(1))


@dataclass(frozen=True, slots=True)
class MapIndexedArgs:
    """The arguments of a ``map_indexed`` node: ``(source, selector)``."""

    source: Subscribable[Any]
    selector: Callable[[Any, int], Any]

    @classmethod
    def read(cls, query: Expression[Any]) -> MapIndexedArgs:
        """The checked arguments of ``query``."""
        args = arguments(query, "source", "selector")
        return cls(args.source(0), args.function(1))


@fusible("map", frames=2, builder=map, args=MapArgs)
class Map(StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """The running stage of :func:`map`. Fuses with adjacent fusible stages (:mod:`reaqtive.operators._fusion`)."""

    timeless = True
    name = "reaqtive:map"
    version: Version = (1,)

    __slots__ = ("_selector", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        args = MapArgs.read(query)
        self._source: Subscribable[S] = args.source
        self._selector: Callable[[S], R] = args.selector

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: S) -> None:
        try:
            result = self._selector(value)
        except Exception as error:
            self._user_error(error, value)
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
            {stage}._user_error(error, {value})
            {stop}
        if {result} is None:
            {stage}._selector_returned_none({value})
            {stop}
        """,
    )
    """:meth:`on_next` as a step of a fused run."""

    def _selector_returned_none(self, value: S) -> None:
        self._user_error(TypeError(f"map: the selector returned None for {value!r}; None is never an element"), value)


@register_operator("map_indexed", frames=2, builder=map_indexed, args=MapIndexedArgs)
class MapIndexed(StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """The running stage of :func:`map_indexed`."""

    timeless = True
    name = "reaqtive:map+index"
    version: Version = (1,)

    __slots__ = ("_index", "_selector", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        args = MapIndexedArgs.read(query)
        self._source: Subscribable[S] = args.source
        self._selector: Callable[[S, int], R] = args.selector
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
            self._user_error(error, value)  # skipped: the index stays, for the next element
            return
        if result is None:
            self._user_error(
                TypeError(f"map_indexed: the selector returned None for {value!r}; None is never an element"), value
            )
            return
        self._index = index + 1
        self._state.changed = True
        self._downstream.on_next(result)


class MapStep(StatelessStep):
    """:class:`Map` for one key of a keyed chain (:mod:`reaqtive.operators.keyed_steps`)."""

    __slots__ = ("_selector",)

    def __init__(self, selector: Callable[[Any], Any]) -> None:
        self._selector = selector

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        result = self._selector(value)
        if result is None:
            raise TypeError(f"map: the selector returned None for {value!r}; None is never an element")
        return None, result


@register_keyed_step("map")
def map_step(query: Expression[Any]) -> MapStep:
    """The keyed step of a ``map`` node."""
    return MapStep(MapArgs.read(query).selector)


class MapIndexedStep(KeyedStep):
    """:class:`MapIndexed` for one key of a keyed chain: the field is the index of the key's next element."""

    __slots__ = ("_selector",)

    initial = 0

    def __init__(self, selector: Callable[[Any, int], Any]) -> None:
        self._selector = selector

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        result = self._selector(value, state)
        if result is None:
            raise TypeError(f"map_indexed: the selector returned None for {value!r}; None is never an element")
        return state + 1, result

    def check(self, state: Any) -> bool:
        return type(state) is int and state >= 0


@register_keyed_step("map_indexed")
def map_indexed_step(query: Expression[Any]) -> MapIndexedStep:
    """The keyed step of a ``map_indexed`` node."""
    return MapIndexedStep(MapIndexedArgs.read(query).selector)
