"""``any``, ``all``, ``contains`` and ``is_empty``: a yes/no answer, given as soon as one element decides it."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import ClassVar, TypeVar

from reaqtive.core.arguments import ArgsRecord, args_record, require_callable
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.operators._aggregate import optional_callable, require_element
from reaqtive.operators.keyed_steps import DONE, SKIP, StatelessStep
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator

__all__ = [
    "All",
    "AllArgs",
    "Any",
    "AnyArgs",
    "Contains",
    "ContainsArgs",
    "IsEmpty",
    "IsEmptyArgs",
    "all",
    "any",
    "contains",
    "is_empty",
]

T = TypeVar("T")

# The stage class Any hides typing.Any (hence typing.Any below), and the builders any and all hide the
# built-ins, which this module does not use.


def any(predicate: Callable[[typing.Any], object] | None = None) -> OperatorCall[bool]:
    """``True`` as soon as an element (satisfying ``predicate``, if given) arrives, then the source is
    cancelled; ``False`` if the source completes without one.

    >>> from_iterable(range(10)).any(lambda x: x > 5).run(print)  # doctest: +ELLIPSIS
    True
    <...>

    **State.** Only the held result (see :mod:`reaqtive.operators._aggregate`).

    **Demand.** Everything once asked; the source is cancelled at the answer.

    Reaqtive: Any.
    """
    optional_callable(predicate, "any", "predicate")
    return OperatorCall("any", (predicate,))


def all(predicate: Callable[[typing.Any], object]) -> OperatorCall[bool]:
    """``False`` as soon as an element does not satisfy ``predicate``; ``True`` if the source completes
    (an empty source: ``True``, as Python's ``all``).

    >>> from_iterable([2, 4, 5]).all(lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
    False
    <...>

    **State.** Only the held result.

    **Demand.** Everything once asked; the source is cancelled at the answer.

    Reaqtive: All.
    """
    require_callable(predicate, "all", "predicate")
    return OperatorCall("all", (predicate,))


def contains(value: object) -> OperatorCall[bool]:
    """``True`` as soon as an element equal (``==``) to ``value`` arrives; ``False`` if the source completes
    without one.

    >>> from_iterable("abc").contains("b").run(print)  # doctest: +ELLIPSIS
    True
    <...>

    **State.** Only the held result.

    **Demand.** Everything once asked; the source is cancelled at the answer.

    Reaqtive: Contains (its comparer overload is ``any(lambda x: same(x, value))`` here).
    """
    require_element(value, "contains", "value")
    return OperatorCall("contains", (value,))


def is_empty() -> OperatorCall[bool]:
    """``False`` as soon as an element arrives; ``True`` if the source completes without one.

    >>> from_iterable([]).is_empty().run(print)  # doctest: +ELLIPSIS
    True
    <...>

    **State.** Only the held result.

    **Demand.** Everything once asked; the source is cancelled at the answer.

    Reaqtive: IsEmpty (composed as ``Any().Select(not)``; here it is one stage, ``reaqtive:is_empty``).
    """
    return OperatorCall("is_empty")


class AnyArgs(ArgsRecord, source="source", predicate="optional_function"):
    """The arguments of an ``any`` node: ``(source, predicate)``, the predicate ``None`` for any element."""


AllArgs = args_record("AllArgs", source="source", predicate="function")
ContainsArgs = args_record("ContainsArgs", source="source", value="element")
IsEmptyArgs = args_record("IsEmptyArgs", source="source")


class _Quantifier(StepAggregate):
    """An answer that one element can decide, run by its step (a ``_QuantifierStep``, which ends the stream
    with the answer; its ``when_completed`` is the answer if none did). When an element decides, the answer
    goes downstream at once and the source is cancelled."""

    __slots__ = ()

    def read_result(self, reader: StateReader) -> bool:
        return reader.read_bool("result")


@step_operator("any", lambda args: AnyStep(args.predicate), builder=any, args=AnyArgs)
class Any(_Quantifier):
    """The running stage of :func:`any`, run by :class:`AnyStep`."""

    name = "reaqtive:any"
    version: Version = (1,)

    __slots__ = ()


@step_operator("all", lambda args: AllStep(args.predicate), builder=all, args=AllArgs)
class All(_Quantifier):
    """The running stage of :func:`all`, run by :class:`AllStep`."""

    name = "reaqtive:all"
    version: Version = (1,)

    __slots__ = ()


@step_operator("contains", lambda args: ContainsStep(args.value), builder=contains, args=ContainsArgs)
class Contains(_Quantifier):
    """The running stage of :func:`contains`, run by :class:`ContainsStep`."""

    name = "reaqtive:contains"
    version: Version = (1,)

    __slots__ = ()


@step_operator("is_empty", lambda args: IsEmptyStep(), builder=is_empty, args=IsEmptyArgs)
class IsEmpty(_Quantifier):
    """The running stage of :func:`is_empty`, run by :class:`IsEmptyStep`."""

    name = "reaqtive:is_empty"
    version: Version = (1,)

    __slots__ = ()


class _QuantifierStep(StatelessStep):
    """The per-element logic of a :class:`_Quantifier` (the stage and a keyed chain run it): no field; an
    element that decides ends the stream with the answer, a completion without one emits ``when_completed``."""

    __slots__ = ()

    when_completed: ClassVar[bool]

    def complete(self, state: typing.Any) -> tuple[typing.Any, ...]:
        return (self.when_completed,)


@runs_inline(Any)
class AnyStep(_QuantifierStep):
    """The per-element logic of :class:`Any`."""

    __slots__ = ("_predicate",)

    when_completed = False

    def __init__(self, predicate: Callable[[typing.Any], object] | None) -> None:
        self._predicate = predicate

    def next(self, state: typing.Any, value: typing.Any) -> tuple[typing.Any, typing.Any]:
        predicate = self._predicate
        if predicate is not None and not predicate(value):
            return None, SKIP
        return DONE, True


@runs_inline(All)
class AllStep(_QuantifierStep):
    """The per-element logic of :class:`All`."""

    __slots__ = ("_predicate",)

    when_completed = True

    def __init__(self, predicate: Callable[[typing.Any], object]) -> None:
        self._predicate = predicate

    def next(self, state: typing.Any, value: typing.Any) -> tuple[typing.Any, typing.Any]:
        if self._predicate(value):
            return None, SKIP
        return DONE, False


@runs_inline(Contains)
class ContainsStep(_QuantifierStep):
    """The per-element logic of :class:`Contains`."""

    __slots__ = ("_value",)

    when_completed = False

    def __init__(self, value: object) -> None:
        self._value = value

    def next(self, state: typing.Any, value: typing.Any) -> tuple[typing.Any, typing.Any]:
        if value == self._value:
            return DONE, True
        return None, SKIP


@runs_inline(IsEmpty)
class IsEmptyStep(_QuantifierStep):
    """The per-element logic of :class:`IsEmpty`."""

    __slots__ = ()

    when_completed = True

    def next(self, state: typing.Any, value: typing.Any) -> tuple[typing.Any, typing.Any]:
        return DONE, False
