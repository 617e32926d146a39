"""``take_while``: pass elements while a predicate holds, then complete."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_callable
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.operators.keyed_steps import DONE, SKIP, KeyedStep, StatelessStep
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator

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


class TakeWhileArgs(ArgsRecord, source="source", predicate="function", inclusive="flag"):
    """The arguments of a ``take_while`` or ``take_while_indexed`` node: ``(source, predicate, inclusive)``."""


@step_operator("take_while", lambda args: TakeWhileStep(args.predicate, args.inclusive),
               frames=2, builder=take_while, args=TakeWhileArgs)
class TakeWhile(StepStage):
    """The running stage of :func:`take_while`, run by its keyed step (:class:`TakeWhileStep`)."""

    name = "reaqtive:take_while"
    version: Version = (1,)


@step_operator("take_while_indexed", lambda args: TakeWhileIndexedStep(args.predicate, args.inclusive),
               frames=2, builder=take_while_indexed, args=TakeWhileArgs)
class TakeWhileIndexed(StepStage):
    """The running stage of :func:`take_while_indexed`, run by its keyed step (:class:`TakeWhileIndexedStep`)."""

    name = "reaqtive:take_while+indexed"
    version: Version = (1,)
    state_fields = ("index",)

    def load_state_core(self, reader: StateReader) -> None:
        self._field = reader.read_int("index")

    def field_at_end(self, field: Any) -> Any:
        return field + 1  # the ending element took its index


@runs_inline(TakeWhile)
class TakeWhileStep(StatelessStep):
    """The per-element logic of :func:`take_while` (the stage and a keyed chain run it): the first false
    element ends the chain."""

    __slots__ = ("_inclusive", "_predicate")

    def __init__(self, predicate: Callable[[Any], object], inclusive: bool) -> None:
        self._predicate = predicate
        self._inclusive = inclusive

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if self._predicate(value):
            return None, value
        return DONE, (value if self._inclusive else SKIP)


@runs_inline(TakeWhileIndexed)
class TakeWhileIndexedStep(KeyedStep):
    """The per-element logic of :func:`take_while_indexed`: the field is the index of the next element."""

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
