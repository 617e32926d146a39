"""``min`` and ``max``: the smallest / largest element, optionally by a key, as Python's ``min``/``max``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import no_elements_error, optional_callable
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator
from reaqtive.state import register_state_type

__all__ = ["Max", "Min", "MinMaxArgs", "max", "min"]


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


