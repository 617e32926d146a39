"""``take_while`` and ``skip_while``: pass elements while a predicate holds, then complete; or drop them while it holds,
then pass every element."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_callable
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators.keyed_steps import DONE, SKIP, KeyedStep, StatelessStep
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator

__all__ = [
    "SkipWhile", "SkipWhileArgs", "SkipWhileIndexed", "TakeWhile", "TakeWhileArgs", "TakeWhileIndexed", "skip_while",
    "skip_while_indexed", "take_while", "take_while_indexed",
]

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


def skip_while(predicate: Callable[[Any], object]) -> OperatorCall[Any]:
    """Drop elements while ``predicate`` is true; from the first false one on, pass every element (the
    predicate is not called again).

    >>> from_iterable([1, 2, 5, 1]).skip_while(lambda x: x < 3).run(print)  # doctest: +ELLIPSIS
    5
    1
    <...>

    An exception from ``predicate`` becomes ``on_error``, or drops the element under a skip policy (a skipped
    element takes no index in ``skip_while_indexed``).

    **State.** ``running``: whether the predicate has been false yet.

    **Demand.** Each dropped element is replaced by ``request(1)`` upstream, unless demand is unbounded.

    Reaqtive: SkipWhile.
    """
    require_callable(predicate, "skip_while", "predicate")
    return OperatorCall("skip_while", (predicate,))


def skip_while_indexed(predicate: Callable[[Any, int], object]) -> OperatorCall[Any]:
    """``skip_while`` with the element's index (0, 1, ...) as the predicate's second argument.

    >>> from_iterable("abcd").skip_while_indexed(lambda x, i: i < 2).run(print)  # doctest: +ELLIPSIS
    c
    d
    <...>

    **State.** ``running`` (whether the predicate has been false yet), then ``index``, the index of the next
    element while dropping (0 once running: it stops counting then). Inside a keyed ``group_by``, one field per
    key: ``index`` while dropping, ``None`` once running.

    **Demand.** As ``skip_while``.

    Reaqtive: SkipWhile+Index.
    """
    require_callable(predicate, "skip_while_indexed", "predicate")
    return OperatorCall("skip_while_indexed", (predicate,))


class SkipWhileArgs(ArgsRecord, source="source", predicate="function"):
    """The arguments of a ``skip_while`` or ``skip_while_indexed`` node: ``(source, predicate)``."""


@step_operator("skip_while", lambda args: SkipWhileStep(args.predicate), builder=skip_while, args=SkipWhileArgs)
class SkipWhile(StepStage):
    """The running stage of :func:`skip_while`, run by its keyed step (:class:`SkipWhileStep`)."""

    name = "reaqtive:skip_while"
    version: Version = (1,)
    state_fields = ("running",)
    drops = True

    def load_state_core(self, reader: StateReader) -> None:
        self._field = reader.read_bool("running")


@step_operator("skip_while_indexed", lambda args: SkipWhileIndexedStep(args.predicate),
               builder=skip_while_indexed, args=SkipWhileArgs)
class SkipWhileIndexed(StepStage):
    """The running stage of :func:`skip_while_indexed`, run by its keyed step (:class:`SkipWhileIndexedStep`);
    saved as ``running, index`` (the index 0 once running: it stops counting then)."""

    name = "reaqtive:skip_while+indexed"
    version: Version = (1,)
    state_fields = ("running", "index")
    drops = True

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._field is None)
        writer.write(self._field or 0)

    def load_state_core(self, reader: StateReader) -> None:
        running = reader.read_bool("running")
        index = reader.read_int("index")
        self._field = None if running else index


@runs_inline(SkipWhile)
class SkipWhileStep(KeyedStep):
    """The per-element logic of :func:`skip_while` (the stage and a keyed chain run it): the field is ``running`` (the
    predicate was false)."""

    __slots__ = ("_predicate",)

    initial = False

    def __init__(self, predicate: Callable[[Any], object]) -> None:
        self._predicate = predicate

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state or not self._predicate(value):
            return True, value
        return False, SKIP

    def check(self, state: Any) -> bool:
        return type(state) is bool


@runs_inline(SkipWhileIndexed)
class SkipWhileIndexedStep(KeyedStep):
    """The per-element logic of :func:`skip_while_indexed` (the stage and a keyed chain run it): the field is the
    index of the next element while dropping, ``None`` once running (the index stops counting then)."""

    __slots__ = ("_predicate",)

    initial = 0

    def __init__(self, predicate: Callable[[Any, int], object]) -> None:
        self._predicate = predicate

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state is None or not self._predicate(value, state):
            return None, value
        return state + 1, SKIP

    def check(self, state: Any) -> bool:
        return state is None or (type(state) is int and state >= 0)
