"""``sum`` and ``average`` of numbers (int, float, Decimal, Fraction, or anything that adds and divides)."""

from __future__ import annotations

from typing import Any

from reaqtive.core.arguments import args_record
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import no_elements_error, none_result_error, require_element
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator

__all__ = ["Average", "AverageArgs", "Sum", "SumArgs", "average", "sum"]


# The builder sum hides the built-in, which this module does not use.
def sum(start: object = 0) -> OperatorCall[Any]:
    """``start`` plus every element, when the source completes, as Python's ``sum`` (empty: ``start``).

    >>> from_iterable([1, 2, 3.5]).sum().run(print)  # doctest: +ELLIPSIS
    6.5
    <...>
    >>> from datetime import timedelta
    >>> from_iterable([timedelta(seconds=1)] * 3).sum(timedelta(0)).run(print)  # doctest: +ELLIPSIS
    0:00:03
    <...>

    Works with anything that adds: ints (exact, any size), floats (plain addition), ``Decimal``,
    ``Fraction``, ``timedelta`` (with a ``timedelta`` start). An element that does not add (a ``str`` among
    numbers) becomes ``on_error``, or is skipped under a skip policy (the total stays as it was).

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``total``. Inside a keyed
    ``group_by``, one field per key: the total (a ``start`` that may change in place, such as a list, keeps the
    general path).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: Sum (it has one operator per numeric type; one suffices here).
    """
    require_element(start, "sum", "start")
    return OperatorCall("sum", (start,))


def average() -> OperatorCall[Any]:
    """The mean of the elements, ``sum / count`` with true division, when the source completes.

    >>> from_iterable([1, 2, 3, 4]).average().run(print)  # doctest: +ELLIPSIS
    2.5
    <...>

    ints and floats give a float; ``Decimal``, ``Fraction`` and ``timedelta`` keep their type (the first
    element starts the total). An empty source is a ``ValueError``.

    **State.** The held result, then ``count: int, total`` (``total`` is ``None`` until the first element).
    Inside a keyed ``group_by``, one field per key: ``None``, then ``(count, total)``.

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: Average.
    """
    return OperatorCall("average")


SumArgs = args_record("SumArgs", source="source", start="element")
AverageArgs = args_record("AverageArgs", source="source")


@step_operator("sum", lambda args: SumStep(args.start), owned="start", frames=4, builder=sum, args=SumArgs)
class Sum(StepAggregate):
    """The running stage of :func:`sum`, run by its keyed step (:class:`SumStep`)."""

    name = "reaqtive:sum"
    version: Version = (1,)
    state_fields = ("held", "?result", "total")

    __slots__ = ()


@step_operator("average", lambda args: AverageStep(), frames=4, builder=average, args=AverageArgs)
class Average(StepAggregate):
    """The running stage of :func:`average`, run by its keyed step (:class:`AverageStep`); saved as
    ``count, total`` (``0, None`` before the first element)."""

    name = "reaqtive:average"
    version: Version = (1,)
    state_fields = ("held", "?result", "count", "total")

    __slots__ = ()

    def write_field(self, writer: StateWriter, field: Any) -> None:
        count, total = (0, None) if field is None else field
        writer.write(count)
        writer.write(total)

    def read_field(self, reader: StateReader) -> Any:
        count = reader.read_int("count")
        total = reader.read()  # the user's elements added up: None until the first one
        if (total is None) != (count == 0):
            raise reader.invalid("total", "None exactly when the count is 0", total)
        return None if count == 0 else (count, total)


@runs_inline(Sum)
class SumStep(KeyedStep):
    """:class:`Sum` for one key of a keyed chain: the field is the total, ``start`` at first."""

    __slots__ = ("initial",)

    def __init__(self, start: object) -> None:
        self.initial = start

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return state + value, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        if state is None:
            raise none_result_error(Sum.name)
        return (state,)

    def check(self, state: Any) -> bool:
        return True  # the user's elements added up


@runs_inline(Average)
class AverageStep(KeyedStep):
    """:class:`Average` for one key of a keyed chain: the field is ``None`` before the first element, then
    ``(count, total)``."""

    __slots__ = ()

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state is None:
            return (1, value), SKIP  # no start value: the first element starts the total
        count, total = state
        return (count + 1, total + value), SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        if state is None:
            raise StepOperatorError(no_elements_error("average"))
        count, total = state
        result = total / count
        if result is None:
            raise none_result_error(Average.name)
        return (result,)

    def check(self, state: Any) -> bool:
        if state is None:
            return True
        return type(state) is tuple and len(state) == 2 and type(state[0]) is int and state[0] >= 1
