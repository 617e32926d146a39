"""``distinct`` and ``distinct_until_changed``: drop the elements whose key was seen before (ever, or just before)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_callable
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError
from reaqtive.operators.settings import MAX_DISTINCT_ELEMENTS, read_limit
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator

__all__ = [
    "Distinct", "DistinctArgs", "DistinctComparer", "DistinctUntilChanged", "DistinctUntilChangedArgs", "distinct",
    "distinct_until_changed",
]

T = TypeVar("T")


def distinct(
    key_selector: Callable[[T], object] | None = None,
    comparer: Callable[[Any, Any], object] | None = None,
) -> OperatorCall[T]:
    """Keep only the elements whose key (the element, or ``key_selector(element)``) was not seen before.

    >>> from_iterable([1, 2, 1, 3, 2]).distinct().run(print)  # doctest: +ELLIPSIS
    1
    2
    3
    <...>

    In Python, a *comparer* is best a key: ``key_selector`` maps elements to hashable keys (``str.lower``
    for case-insensitive text), kept in a ``set``, O(1) per element. ``comparer(seen_key, key) -> bool``
    (true: equal) is for keys that cannot be hashed: every new key is compared with all keys seen so far, in
    the order they were first seen, O(n) per element and O(n²) in all; prefer a key when you can.
    An exception from ``key_selector`` or ``comparer``, or an unhashable key, becomes ``on_error``, or skips
    the element under a skip policy (its key is not kept).

    **State.** The keys seen (a set; with a comparer, a list): they must be values the state codec can write.
    Setting ``MAX_DISTINCT_ELEMENTS`` bounds their number (``LimitExceededError`` through ``on_error``). Inside
    a keyed ``group_by``, one field per key: its keys seen (the limit bounds each key's).

    **Demand.** As :meth:`filter` (a ``request(1)`` upstream per dropped element, unless demand is unbounded).

    Reaqtive: Distinct.
    """
    if key_selector is not None:
        require_callable(key_selector, "distinct", "key_selector")
    if comparer is not None:
        require_callable(comparer, "distinct", "comparer")
    return OperatorCall("distinct", (key_selector, comparer))


class DistinctArgs(ArgsRecord, source="source", key_selector="optional_function", comparer="optional_function"):
    """The arguments of a ``distinct`` node: ``(source, key_selector, comparer)``, both functions optional."""


@step_operator("distinct", lambda args: DistinctStep(args.key_selector), when=lambda args: args.comparer is None,
               builder=distinct, args=DistinctArgs)
class Distinct(StepStage):
    """The running stage of :func:`distinct` without a comparer, run by :class:`DistinctStep`: the keys seen so
    far in a ``set`` (saved as a set, empty before the first element)."""

    name = "reaqtive:distinct"
    version: Version = (1,)
    state_fields = ("keys",)
    drops = True

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(set() if self._field is None else self._field)

    def load_state_core(self, reader: StateReader) -> None:
        self._field = reader.read_set("keys") or None  # the user's keys


@step_operator("distinct", lambda args: DistinctComparerStep(args.key_selector, args.comparer),
               when=lambda args: args.comparer is not None, builder=distinct, args=DistinctArgs)
class DistinctComparer(StepStage):
    """The running stage of :func:`distinct` with a comparer, run by :class:`DistinctComparerStep`: the keys
    seen so far in a list (they need not be hashable), each new key compared with all of them."""

    name = "reaqtive:distinct+comparer"
    version: Version = (1,)
    state_fields = ("keys",)
    drops = True

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write([] if self._field is None else self._field)

    def load_state_core(self, reader: StateReader) -> None:
        self._field = reader.read_list("keys") or None  # the user's keys


@runs_inline(Distinct)
class DistinctStep(KeyedStep):
    """The per-element logic of :class:`Distinct` (the stage and a keyed chain run it): the field is the
    ``set`` of keys seen, ``None`` before the first element (the set is the key's own, added to in place)."""

    __slots__ = ("_key_selector", "_limit")

    in_place = True
    skip_keeps_field = True

    def __init__(self, key_selector: Callable[[Any], object] | None) -> None:
        self._key_selector = key_selector
        self._limit = LONG_MAX

    def set_context(self, context: OperatorContext) -> None:
        self._limit = read_limit(context, MAX_DISTINCT_ELEMENTS)

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        keys: set[object] = set() if state is None else state
        key = value if self._key_selector is None else self._key_selector(value)
        if key in keys:  # (an unhashable key raises here, even for an empty set, as in the stage)
            return state, SKIP
        if len(keys) >= self._limit:
            raise StepOperatorError(LimitExceededError(Distinct.name, MAX_DISTINCT_ELEMENTS, self._limit))
        keys.add(key)
        return keys, value

    def check(self, state: Any) -> bool:
        return state is None or (type(state) is set and len(state) > 0)


@runs_inline(DistinctComparer)
class DistinctComparerStep(KeyedStep):
    """The per-element logic of :class:`DistinctComparer`: the field is the ``list`` of keys seen, in the
    order first seen, ``None`` before the first element (the list is the key's own, appended to in place)."""

    __slots__ = ("_comparer", "_key_selector", "_limit")

    in_place = True
    skip_keeps_field = True

    def __init__(self, key_selector: Callable[[Any], object] | None, comparer: Callable[[Any, Any], object]) -> None:
        self._key_selector = key_selector
        self._comparer = comparer
        self._limit = LONG_MAX

    def set_context(self, context: OperatorContext) -> None:
        self._limit = read_limit(context, MAX_DISTINCT_ELEMENTS)

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        keys: list[object] = [] if state is None else state
        comparer = self._comparer
        key = value if self._key_selector is None else self._key_selector(value)
        if any(comparer(other, key) for other in keys):
            return state, SKIP
        if len(keys) >= self._limit:
            raise StepOperatorError(LimitExceededError(DistinctComparer.name, MAX_DISTINCT_ELEMENTS, self._limit))
        keys.append(key)
        return keys, value

    def check(self, state: Any) -> bool:
        return state is None or (type(state) is list and len(state) > 0)


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
