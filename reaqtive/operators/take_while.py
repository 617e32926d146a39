"""``take_while``: pass elements while a predicate holds, then complete."""

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
from reaqtive.operators.keyed_steps import DONE, SKIP, KeyedStep, StatelessStep, register_keyed_step
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["TakeWhile", "TakeWhileArgs", "TakeWhileIndexed", "take_while", "take_while_indexed"]

T = TypeVar("T")


def take_while(predicate: Callable[[Any], object], *, inclusive: bool = False) -> OperatorCall[Any]:
    """Pass elements while ``predicate`` is true; at the first false one, complete and unsubscribe from the
    source (emitting that element first when ``inclusive``, as RxPY does).

    >>> from_iterable([1, 2, 5, 1]).take_while(lambda x: x < 3).run(print)  # doctest: +ELLIPSIS
    1
    2
    <...>

    An exception from ``predicate`` becomes ``on_error``, or drops the element under a skip policy (a skipped
    element takes no index in ``take_while_indexed``).

    **State.** Nothing (a stage past the first false element has completed).

    **Demand.** Passed upstream unchanged.

    Reaqtive: TakeWhile.
    """
    return OperatorCall("take_while", _checked("take_while", predicate, inclusive))


def take_while_indexed(predicate: Callable[[Any, int], object], *, inclusive: bool = False) -> OperatorCall[Any]:
    """``take_while`` with the element's index (0, 1, ...) as the predicate's second argument.

    >>> from_iterable("abcd").take_while_indexed(lambda x, i: i < 2).run(print)  # doctest: +ELLIPSIS
    a
    b
    <...>

    **State.** ``index``, the index of the next element.

    **Demand.** Passed upstream unchanged.

    Reaqtive: TakeWhile+Index.
    """
    return OperatorCall("take_while_indexed", _checked("take_while_indexed", predicate, inclusive))


def _checked(op: str, predicate: object, inclusive: object) -> tuple[object, bool]:
    """The builders' checks: ``(predicate, inclusive)``."""
    require_callable(predicate, op, "predicate")
    if not isinstance(inclusive, bool):
        raise TypeError(f"{op}: inclusive must be a bool, got {type(inclusive).__name__}")
    return predicate, inclusive


@dataclass(frozen=True, slots=True)
class TakeWhileArgs:
    """The arguments of a ``take_while`` or ``take_while_indexed`` node: ``(source, predicate, inclusive)``."""

    source: Subscribable[Any]
    predicate: Callable[..., object]
    inclusive: bool

    @classmethod
    def read(cls, query: Expression[Any]) -> TakeWhileArgs:
        """The checked arguments of ``query``."""
        args = arguments(query, "source", "predicate", "inclusive")
        return cls(args.source(0), args.function(1), args.flag(2))


@register_operator("take_while", frames=2, builder=take_while, args=TakeWhileArgs)
class TakeWhile(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`take_while`."""

    timeless = True
    name = "reaqtive:take_while"
    version: Version = (1,)

    __slots__ = ("_inclusive", "_predicate", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = TakeWhileArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._predicate: Callable[[T], object] = args.predicate
        self._inclusive = args.inclusive

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        try:
            keep = bool(self._predicate(value))  # truthiness inside the try: bool() of a result may raise
        except Exception as error:
            self._user_error(error, value)
            return
        if keep:
            self._downstream.on_next(value)
            return
        if self._inclusive:
            self._downstream.on_next(value)
        self._signal_complete()


@register_operator("take_while_indexed", frames=2, builder=take_while_indexed, args=TakeWhileArgs)
class TakeWhileIndexed(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`take_while_indexed`."""

    timeless = True
    name = "reaqtive:take_while+indexed"
    version: Version = (1,)
    state_fields = ("index",)

    __slots__ = ("_inclusive", "_index", "_predicate", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = TakeWhileArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._predicate: Callable[[T, int], object] = args.predicate
        self._inclusive = args.inclusive
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
            keep = bool(self._predicate(value, index))
        except Exception as error:
            self._user_error(error, value)  # skipped: the index stays, for the next element
            return
        self._index = index + 1
        self._state.changed = True
        if keep:
            self._downstream.on_next(value)
            return
        if self._inclusive:
            self._downstream.on_next(value)
        self._signal_complete()


class TakeWhileStep(StatelessStep):
    """:class:`TakeWhile` for one key of a keyed chain: the first false element ends the chain."""

    __slots__ = ("_inclusive", "_predicate")

    def __init__(self, predicate: Callable[[Any], object], inclusive: bool) -> None:
        self._predicate = predicate
        self._inclusive = inclusive

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if self._predicate(value):
            return None, value
        return DONE, (value if self._inclusive else SKIP)


class TakeWhileIndexedStep(KeyedStep):
    """:class:`TakeWhileIndexed` for one key of a keyed chain: the field is the index of the next element."""

    __slots__ = ("_inclusive", "_predicate")

    initial = 0

    def __init__(self, predicate: Callable[[Any, int], object], inclusive: bool) -> None:
        self._predicate = predicate
        self._inclusive = inclusive

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if self._predicate(value, state):
            return state + 1, value
        return DONE, (value if self._inclusive else SKIP)

    def check(self, state: Any) -> bool:
        return type(state) is int and state >= 0


@register_keyed_step("take_while")
def take_while_step(query: Expression[Any]) -> TakeWhileStep:
    """The keyed step of a ``take_while`` node."""
    args = TakeWhileArgs.read(query)
    return TakeWhileStep(args.predicate, args.inclusive)


@register_keyed_step("take_while_indexed")
def take_while_indexed_step(query: Expression[Any]) -> TakeWhileIndexedStep:
    """The keyed step of a ``take_while_indexed`` node."""
    args = TakeWhileArgs.read(query)
    return TakeWhileIndexedStep(args.predicate, args.inclusive)
