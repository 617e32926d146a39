"""``count``, ``sum``, ``average``, ``min`` and ``max``: the mathematical aggregates, one result when the source
completes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from reaqtive.core.arguments import ArgsRecord, args_record
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import no_elements_error, none_result_error, optional_callable, require_element
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator
from reaqtive.state import register_state_type

__all__ = [
    "Average", "AverageArgs", "Count", "CountArgs", "Max", "Min", "MinMaxArgs", "Sum", "SumArgs", "average", "count",
    "max", "min", "sum",
]

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


def min(key: Callable[[Any], Any] | None = None) -> OperatorCall[Any]:
    """The smallest element (by ``key``, if given) when the source completes, as Python's ``min``: of equal
    elements the first one wins.

    >>> from_iterable([3, 1, 2]).min().run(print)  # doctest: +ELLIPSIS
    1
    <...>
    >>> from_iterable(["bb", "a", "ccc"]).min(key=len).run(print)  # doctest: +ELLIPSIS
    a
    <...>

    A comparer ``cmp(a, b) -> int`` becomes a key with ``functools.cmp_to_key(cmp)``. With a key, the
    *element* is emitted (Reaqtive's ``Min(selector)`` emitted the smallest selected value: use
    ``map(selector).min()`` for that). An empty source is a ``ValueError``; elements that do not compare, and
    an exception from ``key``, become ``on_error``, or skip the element under a skip policy.

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``best`` (``None`` until the
    first element: ``None`` is never an element). The key of ``best`` is not saved (a key may be any object):
    after a restart it is computed again, once. Inside a keyed ``group_by``, one field per key: ``best`` (with a
    key, an object holding ``best`` and, in memory only, its key).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: Min.
    """
    optional_callable(key, "min", "key")
    return OperatorCall("min", (key,))


def max(key: Callable[[Any], Any] | None = None) -> OperatorCall[Any]:
    """The largest element (by ``key``, if given) when the source completes, as Python's ``max``: of equal
    elements the first one wins.

    >>> from_iterable([3, 1, 2]).max().run(print)  # doctest: +ELLIPSIS
    3
    <...>

    As :meth:`min` otherwise.

    **State.** The held result, then ``best`` (its key is recomputed after a restart).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: Max.
    """
    optional_callable(key, "max", "key")
    return OperatorCall("max", (key,))


class MinMaxArgs(ArgsRecord, source="source", key="optional_function"):
    """The arguments of a ``min`` or ``max`` node: ``(source, key)``, the key ``None`` to compare elements."""


_UNKNOWN: Final[Any] = object()
"""The key of the best element is not known yet (after a restart: keys are not state, they are recomputed)."""


class _Extremum(StepAggregate):
    """A ``min``/``max`` stage, run by its keyed step (:class:`MinMaxStep`): saved, the best element (a key's
    ``_Best`` saves only its element; the key is computed again, once)."""

    __slots__ = ()

    def write_field(self, writer: StateWriter, field: Any) -> None:
        writer.write(field.element if type(field) is _Best else field)

    def read_field(self, reader: StateReader) -> Any:
        best = reader.read()  # the user's element
        return best if best is None or self._step._key is None else _Best(best, _UNKNOWN)  # type: ignore[attr-defined]


@step_operator("min", lambda args: MinMaxStep(args.key, smallest=True), frames=4, builder=min, args=MinMaxArgs)
class Min(_Extremum):
    """The running stage of :func:`min`."""

    name = "reaqtive:min"
    version: Version = (1,)
    state_fields = ("held", "?result", "best")

    __slots__ = ()


@step_operator("max", lambda args: MinMaxStep(args.key, smallest=False), frames=4, builder=max, args=MinMaxArgs)
class Max(_Extremum):
    """The running stage of :func:`max`."""

    name = "reaqtive:max"
    version: Version = (1,)
    state_fields = ("held", "?result", "best")

    __slots__ = ()


class _Best:
    """The field of a keyed ``min``/``max`` with a key: the best element and its key, which is not saved (as
    the stage does not save it: a key may be any object) and so is computed again, once, after a
    restart. Immutable: a change is a new field."""

    __slots__ = ("element", "key")

    def __init__(self, element: Any, key: Any) -> None:
        self.element = element
        self.key = key


register_state_type(_Best, "reaqtive:keyed_best", lambda best: best.element, lambda element: _Best(element, _UNKNOWN))


@runs_inline(Min, Max)
class MinMaxStep(KeyedStep):
    """The per-element logic of :func:`min` and :func:`max` (the stage and a keyed chain run it): without a key,
    the field is the best element, ``None`` before the first one; with a key, ``None``, then a ``_Best`` (the key
    is computed once per element, and once for a best element loaded from a store)."""

    __slots__ = ("_key", "_smallest")

    def __init__(self, key: Callable[[Any], Any] | None, smallest: bool) -> None:
        self._key = key
        self._smallest = smallest

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        key = self._key
        if key is None:
            if state is None or (value < state if self._smallest else value > state):
                return value, SKIP
            return state, SKIP
        value_key = key(value)
        if state is None:
            return _Best(value, value_key), SKIP
        best_key = state.key
        if best_key is _UNKNOWN:  # loaded from a store
            best_key = key(state.element)
            if value_key < best_key if self._smallest else value_key > best_key:
                return _Best(value, value_key), SKIP
            return _Best(state.element, best_key), SKIP
        if value_key < best_key if self._smallest else value_key > best_key:
            return _Best(value, value_key), SKIP
        return state, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        if state is None:
            raise StepOperatorError(no_elements_error("min" if self._smallest else "max"))
        return (state if self._key is None else state.element,)

    def check(self, state: Any) -> bool:
        if self._key is None:
            return type(state) is not _Best  # the user's element, or None before the first one
        return state is None or (type(state) is _Best and state.element is not None)
