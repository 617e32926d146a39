"""``skip_while``: drop elements while a predicate holds, then pass every element."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reaqtive.core.arguments import ArgsRecord, require_callable
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators.keyed_steps import SKIP, KeyedStep
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator

__all__ = ["SkipWhile", "SkipWhileArgs", "SkipWhileIndexed", "skip_while", "skip_while_indexed"]

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
