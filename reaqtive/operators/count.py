"""``count``: how many elements the source had (optionally, how many satisfied a predicate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.operators._aggregate import optional_callable
from reaqtive.operators.keyed_steps import SKIP, KeyedStep
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator

__all__ = ["Count", "CountArgs", "count"]

T = TypeVar("T")


def count(predicate: Callable[[Any], object] | None = None) -> OperatorCall[int]:
    """How many elements the source had (that satisfy ``predicate``, if given), when it completes.

    >>> from_iterable("hello").count().run(print)  # doctest: +ELLIPSIS
    5
    <...>
    >>> from_iterable(range(10)).count(lambda x: x % 3 == 0).run(print)  # doctest: +ELLIPSIS
    4
    <...>

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``count: int``. Inside a keyed
    ``group_by``, one field per key: the count.

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: Count.
    """
    optional_callable(predicate, "count", "predicate")
    return OperatorCall("count", (predicate,))


class CountArgs(ArgsRecord, source="source", predicate="optional_function"):
    """The arguments of a ``count`` node: ``(source, predicate)``, the predicate ``None`` to count every element."""


@step_operator("count", lambda args: CountStep(args.predicate), frames=4, builder=count, args=CountArgs)
class Count(StepAggregate):
    """The running stage of :func:`count`, run by its keyed step (:class:`CountStep`)."""

    name = "reaqtive:count"
    version: Version = (1,)
    state_fields = ("held", "?result", "count")

    __slots__ = ()

    def read_result(self, reader: StateReader) -> int:
        return reader.read_int("result")

    def read_field(self, reader: StateReader) -> int:
        return reader.read_int("count")


@runs_inline(Count)
class CountStep(KeyedStep):
    """The per-element logic of :func:`count` (the stage and a keyed chain run it): the field is the count; an
    element the predicate raised on is not counted."""

    __slots__ = ("_predicate",)

    initial = 0

    def __init__(self, predicate: Callable[[Any], object] | None) -> None:
        self._predicate = predicate

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        predicate = self._predicate
        if predicate is not None and not predicate(value):
            return state, SKIP
        return state + 1, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return (state,)

    def check(self, state: Any) -> bool:
        return type(state) is int and state >= 0
