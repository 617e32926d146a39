"""``sum`` and ``average`` of numbers (int, float, Decimal, Fraction, or anything that adds and divides)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._aggregate import AggregateStage, no_elements_error, none_result_error, require_element
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError, is_immutable_value, register_keyed_step

__all__ = ["Average", "AverageArgs", "Sum", "SumArgs", "average", "sum"]

T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
class SumArgs(ArgsRecord):
    """The arguments of a ``sum`` node: ``(source, start)``."""

    source: Subscribable[Any]
    start: object
    checks = ("source", "element")


@dataclass(frozen=True, slots=True)
class AverageArgs(ArgsRecord):
    """The arguments of an ``average`` node: ``(source,)``."""

    source: Subscribable[Any]
    checks = ("source",)


@register_operator("sum", frames=4, builder=sum, args=SumArgs)
class Sum(AggregateStage[T, Any], Generic[T]):
    """The running stage of :func:`sum`: ``start + x1 + x2 + ...``, in that order (``start`` on the left)."""

    name = "reaqtive:sum"
    version: Version = (1,)
    state_fields = ("held", "?result", "total")

    __slots__ = ("_total",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None:
        args = SumArgs.read(query)
        super().__init__(args.source, downstream)
        self._total: Any = args.start

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._total)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._total = reader.read()  # the user's elements added up

    def on_next(self, value: T) -> None:
        try:
            self._total = self._total + value
        except Exception as error:  # e.g. a str among numbers
            self._user_error(error, value)  # skipped: the total stays
            return
        self._state.changed = True

    def result_at_completion(self) -> Any:
        return self._total


@register_operator("average", frames=4, builder=average, args=AverageArgs)
class Average(AggregateStage[T, Any], Generic[T]):
    """The running stage of :func:`average`: ``(x1 + ... + xn) / n``; the first element starts the total, so
    that ``timedelta``, ``Decimal`` and ``Fraction`` keep their type."""

    name = "reaqtive:average"
    version: Version = (1,)
    state_fields = ("held", "?result", "count", "total")

    __slots__ = ("_count", "_total")

    def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None:
        super().__init__(AverageArgs.read(query).source, downstream)
        self._count = 0
        self._total: Any = None

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._count)
        writer.write(self._total)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._count = reader.read_int("count")
        self._total = reader.read()  # the user's elements added up: None until the first one
        if (self._total is None) != (self._count == 0):
            raise reader.invalid("total", "None exactly when the count is 0", self._total)

    def on_next(self, value: T) -> None:
        if self._count:
            try:
                self._total = self._total + value
            except Exception as error:
                self._user_error(error, value)  # skipped: the total and the count stay
                return
        else:
            self._total = value  # no start value: timedelta, Decimal and Fraction keep their type
        self._count += 1
        self._state.changed = True

    def result_at_completion(self) -> Any:
        if not self._count:
            raise no_elements_error("average")
        return self._total

    def final_result(self, result: Any) -> Any:
        return result / self._count  # the user's values divided: may raise


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


@register_keyed_step("sum")
def sum_step(query: Expression[Any]) -> SumStep | None:
    """The keyed step of a ``sum`` node; ``None`` (the general path) for a ``start`` that may change in place."""
    start = SumArgs.read(query).start
    return SumStep(start) if is_immutable_value(start) else None


@register_keyed_step("average")
def average_step(query: Expression[Any]) -> AverageStep:
    """The keyed step of an ``average`` node."""
    AverageArgs.read(query)  # the stage's checks
    return AverageStep()
