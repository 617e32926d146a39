"""``first``, ``last``, ``single`` and ``element_at``: one element picked (each with an ``_or_default`` form for a
source without it; the first three with a predicate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord, args_record, require_non_negative_int
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage, no_elements_error, optional_callable, require_element
from reaqtive.operators.keyed_steps import (
    DONE,
    SKIP,
    KeyedStep,
    StepOperatorError,
)
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator

__all__ = [
    "ElementAt", "ElementAtArgs", "ElementAtOrDefaultArgs", "First", "Last", "PickArgs", "PickOrDefaultArgs",
    "Single", "element_at", "element_at_or_default", "first", "first_or_default", "last", "last_or_default", "single",
    "single_or_default",
]

T = TypeVar("T")


def first(predicate: Callable[[Any], object] | None = None) -> OperatorCall[Any]:
    """The first element (satisfying ``predicate``, if given), at once; then the source is cancelled. None
    found is a ``ValueError``.

    >>> from_iterable([5, 6, 7]).first(lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
    6
    <...>

    **State.** Only the held result (see :mod:`reaqtive.operators._aggregate`; ``reaqtive:first``).

    **Demand.** Everything once asked.

    Reaqtive: FirstAsync.
    """
    optional_callable(predicate, "first", "predicate")
    return OperatorCall("first", (predicate,))


def first_or_default(default: Any, predicate: Callable[[Any], object] | None = None) -> OperatorCall[Any]:
    """As :meth:`first`, but ``default`` when none is found.

    >>> from_iterable([]).first_or_default(-1).run(print)  # doctest: +ELLIPSIS
    -1
    <...>

    **State.** Only the held result (``reaqtive:first``).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: FirstOrDefaultAsync.
    """
    require_element(default, "first_or_default", "default")
    optional_callable(predicate, "first_or_default", "predicate")
    return OperatorCall("first_or_default", (default, predicate))


def last(predicate: Callable[[Any], object] | None = None) -> OperatorCall[Any]:
    """The last element (satisfying ``predicate``, if given) when the source completes. None found is a
    ``ValueError``.

    >>> from_iterable([5, 6, 7]).last().run(print)  # doctest: +ELLIPSIS
    7
    <...>

    **State.** The held result, then ``last`` (``None`` until a (matching) element arrived: ``None`` is never
    an element; ``reaqtive:last``).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: LastAsync.
    """
    optional_callable(predicate, "last", "predicate")
    return OperatorCall("last", (predicate,))


def last_or_default(default: Any, predicate: Callable[[Any], object] | None = None) -> OperatorCall[Any]:
    """As :meth:`last`, but ``default`` when none is found.

    >>> from_iterable([1, 3]).last_or_default(0, lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
    0
    <...>

    **State.** The held result, then ``last`` (``reaqtive:last``).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: LastOrDefaultAsync.
    """
    require_element(default, "last_or_default", "default")
    optional_callable(predicate, "last_or_default", "predicate")
    return OperatorCall("last_or_default", (default, predicate))


def single(predicate: Callable[[Any], object] | None = None) -> OperatorCall[Any]:
    """The only element (satisfying ``predicate``, if given) when the source completes. None found is a
    ``ValueError``; a second one is a ``ValueError`` at once (the source is cancelled).

    >>> from_iterable([4]).single().run(print)  # doctest: +ELLIPSIS
    4
    <...>

    **State.** The held result, then ``found`` (``None`` until a (matching) element arrived;
    ``reaqtive:single``).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: SingleAsync.
    """
    optional_callable(predicate, "single", "predicate")
    return OperatorCall("single", (predicate,))


def single_or_default(default: Any, predicate: Callable[[Any], object] | None = None) -> OperatorCall[Any]:
    """As :meth:`single`, but ``default`` when none is found (a second one is still an error, as in Rx).

    >>> from_iterable([]).single_or_default(0).run(print)  # doctest: +ELLIPSIS
    0
    <...>

    **State.** The held result, then ``found`` (``reaqtive:single``).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: SingleOrDefaultAsync.
    """
    require_element(default, "single_or_default", "default")
    optional_callable(predicate, "single_or_default", "predicate")
    return OperatorCall("single_or_default", (default, predicate))


class PickArgs(ArgsRecord, source="source", predicate="optional_function"):
    """The arguments of a ``first``, ``last`` or ``single`` node: ``(source, predicate)``, the predicate ``None``
    for any element."""


class PickOrDefaultArgs(ArgsRecord, source="source", default="element", predicate="optional_function"):
    """The arguments of a ``first_or_default``, ``last_or_default`` or ``single_or_default`` node: ``(source,
    default, predicate)``."""


def _more_than_one_error(op: str, predicate: bool) -> ValueError:
    """The error of ``single`` at a second (matching) element."""
    matching = " satisfying the predicate" if predicate else ""
    return ValueError(f"{op}: the source has more than one element{matching}")


@step_operator("first", lambda args: FirstStep("first", args.predicate, None), builder=first, args=PickArgs)
@step_operator("first_or_default", lambda args: FirstStep("first_or_default", args.predicate, args.default),
               owned="default", builder=first_or_default, args=PickOrDefaultArgs)
class First(StepAggregate):
    """The running stage of :func:`first` and :func:`first_or_default` (one persisted name: the default is
    part of the query, not of the state), run by :class:`FirstStep`."""

    name = "reaqtive:first"
    version: Version = (1,)
    state_fields = ("held", "?result")

    __slots__ = ()

    def save_state_core(self, writer: StateWriter) -> None:
        AggregateStage.save_state_core(self, writer)  # no field

    def load_state_core(self, reader: StateReader) -> None:
        AggregateStage.load_state_core(self, reader)


@step_operator("last", lambda args: LastStep("last", args.predicate, None), frames=4, builder=last, args=PickArgs)
@step_operator("last_or_default", lambda args: LastStep("last_or_default", args.predicate, args.default),
               owned="default", frames=4, builder=last_or_default, args=PickOrDefaultArgs)
class Last(StepAggregate):
    """The running stage of :func:`last` and :func:`last_or_default`, run by :class:`LastStep`; saves the last
    (matching) element, or ``None``."""

    name = "reaqtive:last"
    version: Version = (1,)
    state_fields = ("held", "?result", "last")

    __slots__ = ()


@step_operator("single", lambda args: SingleStep("single", args.predicate, None), frames=4, builder=single,
               args=PickArgs)
@step_operator("single_or_default", lambda args: SingleStep("single_or_default", args.predicate, args.default),
               owned="default", frames=4, builder=single_or_default, args=PickOrDefaultArgs)
class Single(StepAggregate):
    """The running stage of :func:`single` and :func:`single_or_default`, run by :class:`SingleStep`; saves the
    (matching) element found, or ``None``."""

    name = "reaqtive:single"
    version: Version = (1,)
    state_fields = ("held", "?result", "found")

    __slots__ = ()


class _PickStep(KeyedStep):
    """What the keyed steps of the three share: the op (for messages), the predicate and the default (``None``:
    none, finding no element is the stage's error)."""

    __slots__ = ("_default", "_op", "_predicate")

    def __init__(self, op: str, predicate: Callable[[Any], object] | None, default: object) -> None:
        self._op = op
        self._predicate = predicate
        self._default = default

    def _no_element(self) -> tuple[Any, ...]:
        """The final output when no element was found: the default, or the error (the stage's error)."""
        if self._default is None:
            raise StepOperatorError(no_elements_error(self._op, self._predicate is not None))
        return (self._default,)


@runs_inline(First)
class FirstStep(_PickStep):
    """The per-element logic of :class:`First` (the stage and a keyed chain run it): no field; the first (matching)
    element ends the chain."""

    __slots__ = ()

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        predicate = self._predicate
        if predicate is not None and not predicate(value):
            return None, SKIP
        return DONE, value

    def complete(self, state: Any) -> tuple[Any, ...]:
        return self._no_element()


@runs_inline(Last)
class LastStep(_PickStep):
    """The per-element logic of :class:`Last`: the field is the last (matching) element, ``None`` before."""

    __slots__ = ()

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        predicate = self._predicate
        if predicate is not None and not predicate(value):
            return state, SKIP
        return value, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return self._no_element() if state is None else (state,)

    def check(self, state: Any) -> bool:
        return True  # the user's element, or None before one


@runs_inline(Single)
class SingleStep(_PickStep):
    """The per-element logic of :class:`Single`: the field is the (matching) element found, ``None`` before;
    a second one fails."""

    __slots__ = ()

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        predicate = self._predicate
        if predicate is not None and not predicate(value):
            return state, SKIP
        if state is not None:
            raise StepOperatorError(_more_than_one_error(self._op, predicate is not None))
        return value, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return self._no_element() if state is None else (state,)

    def check(self, state: Any) -> bool:
        return True  # the user's element, or None before one


def element_at(index: int) -> OperatorCall[Any]:
    """The element at ``index`` (0-based), at once; then the source is cancelled. A source that ends
    before it is an ``IndexError``.

    >>> from_iterable("abcd").element_at(2).run(print)  # doctest: +ELLIPSIS
    c
    <...>

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``remaining: int``, the
    elements still to skip (``reaqtive:element_at``).

    **Demand.** Everything once asked.

    Reaqtive: ElementAt.
    """
    require_non_negative_int(index, "element_at", "index")
    return OperatorCall("element_at", (index,))


def element_at_or_default(index: int, default: Any) -> OperatorCall[Any]:
    """As :meth:`element_at`, but ``default`` when the source ends before ``index``.

    >>> from_iterable("ab").element_at_or_default(5, "?").run(print)  # doctest: +ELLIPSIS
    ?
    <...>

    **State.** The held result, then ``remaining: int`` (``reaqtive:element_at``).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: ElementAtOrDefault.
    """
    require_non_negative_int(index, "element_at_or_default", "index")
    require_element(default, "element_at_or_default", "default")
    return OperatorCall("element_at_or_default", (index, default))


ElementAtArgs = args_record("ElementAtArgs", source="source", index="count")
ElementAtOrDefaultArgs = args_record("ElementAtOrDefaultArgs", source="source", index="count", default="element")


@step_operator("element_at", lambda args: ElementAtStep("element_at", args.index, None), builder=element_at,
               args=ElementAtArgs)
@step_operator("element_at_or_default", lambda args: ElementAtStep("element_at_or_default", args.index, args.default),
               owned="default", builder=element_at_or_default, args=ElementAtOrDefaultArgs)
class ElementAt(StepAggregate):
    """The running stage of :func:`element_at` and :func:`element_at_or_default` (one persisted name: the
    default is part of the query, not of the state)."""

    name = "reaqtive:element_at"
    version: Version = (1,)
    state_fields = ("held", "?result", "remaining")

    __slots__ = ()

    def read_field(self, reader: StateReader) -> int:
        return reader.read_int("remaining", maximum=self._step.initial)


def _out_of_range_error(op: str, index: int, remaining: int) -> IndexError:
    """The error of ``element_at`` whose source completed with ``remaining`` elements still to skip."""
    seen = index - remaining
    return IndexError(
        f"{op}: index {index} is out of range: the source completed after {seen} element{'' if seen == 1 else 's'}"
    )


@runs_inline(ElementAt)
class ElementAtStep(KeyedStep):
    """The per-element logic of :class:`ElementAt` (the stage and a keyed chain run it): the field is how
    many elements are still to skip; the element at the index ends the stream."""

    __slots__ = ("_default", "_op", "initial")

    def __init__(self, op: str, index: int, default: object) -> None:
        self._op = op
        self.initial = index
        self._default = default

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state:
            return state - 1, SKIP
        return DONE, value

    def complete(self, state: Any) -> tuple[Any, ...]:
        default = self._default
        if default is None:
            raise StepOperatorError(_out_of_range_error(self._op, self.initial, state))
        return (default,)

    def check(self, state: Any) -> bool:
        return type(state) is int and 0 <= state <= self.initial
