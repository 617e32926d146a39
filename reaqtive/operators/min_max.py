"""``min`` and ``max``: the smallest / largest element, optionally by a key, as Python's ``min``/``max``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._aggregate import AggregateStage, no_elements_error, optional_callable
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError, register_keyed_step
from reaqtive.state import register_state_type

__all__ = ["Max", "Min", "MinMaxArgs", "max", "min"]

T = TypeVar("T")


# The builders min and max hide the built-ins, which this module does not use.
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


@dataclass(frozen=True, slots=True)
class MinMaxArgs(ArgsRecord):
    """The arguments of a ``min`` or ``max`` node: ``(source, key)``, the key ``None`` to compare elements."""

    source: Subscribable[Any]
    key: Callable[[Any], Any] | None
    checks = ("source", "optional_function")


_UNKNOWN: Final[Any] = object()
"""The key of the best element is not known yet (after a restart: keys are not state, they are recomputed)."""


class _Extremum(AggregateStage[T, T], Generic[T]):
    """Keeps the best element so far and its key (computed once per element); with equal keys, the first one
    stays (a strict comparison, as Python's ``min``/``max``)."""

    smallest: ClassVar[bool]
    """``True`` for ``min``."""

    __slots__ = ("_best", "_best_key", "_key")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        args = MinMaxArgs.read(query)
        super().__init__(args.source, downstream)
        self._key: Callable[[T], Any] | None = args.key
        self._best: T | None = None
        self._best_key: Any = _UNKNOWN

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._best)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._best = reader.read()  # the user's element
        self._best_key = _UNKNOWN

    def on_next(self, value: T) -> None:
        best = self._best
        key = self._key
        try:
            value_key = value if key is None else key(value)
            if best is not None:
                best_key = self._best_key
                if best_key is _UNKNOWN:
                    best_key = self._best_key = best if key is None else key(best)
                if not (value_key < best_key if self.smallest else value_key > best_key):
                    return
        except Exception as error:  # the key function, or elements that do not compare
            self._user_error(error, value)  # skipped: the best element stays
            return
        self._best = value
        self._best_key = value_key
        self._state.changed = True

    def result_at_completion(self) -> T:
        best = self._best
        if best is None:
            raise no_elements_error("min" if self.smallest else "max")
        return best


@register_operator("min", frames=4, builder=min, args=MinMaxArgs)
class Min(_Extremum[T], Generic[T]):
    """The running stage of :func:`min`."""

    name = "reaqtive:min"
    version: Version = (1,)
    state_fields = ("held", "?result", "best")
    smallest = True

    __slots__ = ()


@register_operator("max", frames=4, builder=max, args=MinMaxArgs)
class Max(_Extremum[T], Generic[T]):
    """The running stage of :func:`max`."""

    name = "reaqtive:max"
    version: Version = (1,)
    state_fields = ("held", "?result", "best")
    smallest = False

    __slots__ = ()


class MinMaxStep(KeyedStep):
    """:class:`Min` or :class:`Max` without a key, for one key of a keyed chain: the field is the best element,
    ``None`` before the first one."""

    __slots__ = ("_smallest",)

    def __init__(self, smallest: bool) -> None:
        self._smallest = smallest

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state is None or (value < state if self._smallest else value > state):
            return value, SKIP
        return state, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        if state is None:
            raise StepOperatorError(no_elements_error("min" if self._smallest else "max"))
        return (state,)

    def check(self, state: Any) -> bool:
        return type(state) is not _Best  # the user's element, or None before the first one


class _Best:
    """The field of a keyed ``min``/``max`` with a key: the best element and its key, which is not saved (as
    :class:`_Extremum` does not save it: a key may be any object) and so is computed again, once, after a
    restart. Immutable: a change is a new field."""

    __slots__ = ("element", "key")

    def __init__(self, element: Any, key: Any) -> None:
        self.element = element
        self.key = key


register_state_type(_Best, "reaqtive:keyed_best", lambda best: best.element, lambda element: _Best(element, _UNKNOWN))


class MinMaxKeyStep(KeyedStep):
    """:class:`Min` or :class:`Max` with a key, for one key of a keyed chain: the field is ``None`` before the
    first element, then a ``_Best`` (the key is computed once per element, as the stage does)."""

    __slots__ = ("_key", "_smallest")

    def __init__(self, key: Callable[[Any], Any], smallest: bool) -> None:
        self._key = key
        self._smallest = smallest

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        key = self._key
        value_key = key(value)
        if state is None:
            return _Best(value, value_key), SKIP
        best_key = state.key
        if best_key is _UNKNOWN:  # loaded from a store
            best_key = key(state.element)
            state = _Best(state.element, best_key)
        if value_key < best_key if self._smallest else value_key > best_key:
            return _Best(value, value_key), SKIP
        return state, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        if state is None:
            raise StepOperatorError(no_elements_error("min" if self._smallest else "max"))
        return (state.element,)

    def check(self, state: Any) -> bool:
        return state is None or (type(state) is _Best and state.element is not None)


def _min_max_step(query: Expression[Any], smallest: bool) -> KeyedStep:
    key = MinMaxArgs.read(query).key
    return MinMaxStep(smallest) if key is None else MinMaxKeyStep(key, smallest)


@register_keyed_step("min")
def min_step(query: Expression[Any]) -> KeyedStep:
    """The keyed step of a ``min`` node."""
    return _min_max_step(query, smallest=True)


@register_keyed_step("max")
def max_step(query: Expression[Any]) -> KeyedStep:
    """The keyed step of a ``max`` node."""
    return _min_max_step(query, smallest=False)
