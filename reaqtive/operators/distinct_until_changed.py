"""``distinct_until_changed``: drop elements whose key equals the key of the element before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_callable
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators.keyed_steps import SKIP, KeyedStep
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator

__all__ = ["DistinctUntilChanged", "DistinctUntilChangedArgs", "distinct_until_changed"]

T = TypeVar("T")


def distinct_until_changed(
    key_selector: Callable[[T], object] | None = None,
    comparer: Callable[[Any, Any], object] | None = None,
) -> OperatorCall[T]:
    """Drop the elements whose key (the element, or ``key_selector(element)``) equals the key of the last
    element emitted.

    >>> from_iterable([1, 1, 2, 2, 1]).distinct_until_changed().run(print)  # doctest: +ELLIPSIS
    1
    2
    1
    <...>

    Keys are compared with ``==``, or with ``comparer(current_key, key) -> bool`` (true: equal). The first
    element is always emitted. An exception from ``key_selector`` or ``comparer`` becomes ``on_error``, or
    skips the element under a skip policy (the current key stays).

    **State.** Whether there is a current key, then the key, which changes only when an element is emitted (so
    it is marked changed only then); it must be a value the state codec can write. Inside a keyed ``group_by``,
    one field per key: ``()``, then ``(key,)``.

    **Demand.** As :meth:`filter` (a ``request(1)`` upstream per dropped element, unless demand is unbounded).

    Reaqtive: DistinctUntilChanged.
    """
    if key_selector is not None:
        require_callable(key_selector, "distinct_until_changed", "key_selector")
    if comparer is not None:
        require_callable(comparer, "distinct_until_changed", "comparer")
    return OperatorCall("distinct_until_changed", (key_selector, comparer))


class DistinctUntilChangedArgs(ArgsRecord, source="source", key_selector="optional_function",
                               comparer="optional_function"):
    """The arguments of a ``distinct_until_changed`` node: ``(source, key_selector, comparer)``, both functions
    optional."""


@step_operator("distinct_until_changed", lambda args: DistinctUntilChangedStep(args.key_selector, args.comparer),
               builder=distinct_until_changed, args=DistinctUntilChangedArgs)
class DistinctUntilChanged(StepStage):
    """The running stage of :func:`distinct_until_changed`, run by its keyed step
    (:class:`DistinctUntilChangedStep`); saved as whether there is a key, then the key."""

    name = "reaqtive:distinct_until_changed"
    version: Version = (1,)
    state_fields = ("has_key", "key")
    drops = True

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(bool(self._field))
        writer.write(self._field[0] if self._field else None)

    def load_state_core(self, reader: StateReader) -> None:
        has_key = reader.read_bool("has key")
        key = reader.read()  # the user's key
        self._field = (key,) if has_key else ()


@runs_inline(DistinctUntilChanged)
class DistinctUntilChangedStep(KeyedStep):
    """The per-element logic of :func:`distinct_until_changed` (the stage and a keyed chain run it): the field is
    ``()`` before the first element,
    then ``(key,)`` (a key may be ``None``)."""

    __slots__ = ("_comparer", "_key_selector")

    initial = ()

    def __init__(
        self, key_selector: Callable[[Any], object] | None, comparer: Callable[[Any, Any], object] | None
    ) -> None:
        self._key_selector = key_selector
        self._comparer = comparer

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        key = value if self._key_selector is None else self._key_selector(value)
        if not state:
            same = False
        elif self._comparer is None:
            same = bool(key == state[0])
        else:
            same = bool(self._comparer(state[0], key))
        if same:
            return state, SKIP
        return (key,), value

    def check(self, state: Any) -> bool:
        return type(state) is tuple and len(state) <= 1
